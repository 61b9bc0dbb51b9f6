// What `tollgate --version` says: the gateway's version and commit, and the versions of the
// libraries it was built with (Boost, OpenSSL, hiredis, MySQL Connector/C++).
#pragma once

#include <string>

namespace tollgate::app {

extern const char* const kVersion;  // the project's version (CMakeLists.txt)
extern const char* const kCommit;   // git commit at build time ("-modified" with local changes; "unknown")

// Several lines: "tollgate 0.9.0 (commit abc123)" and one line per library.
std::string version_text();

}  // namespace tollgate::app

// Files an operator names (a secret's value_file, TLS keys, certificates and CAs), opened the one
// way: without blocking, so that a FIFO or a device named by mistake never hangs a start, a reload,
// SIGHUP or --check, and only when the path is a regular file.
#pragma once

#include <sys/stat.h>

#include <string>

namespace tollgate::config {

struct RegularFile {
  int fd = -1;           // open for reading (closed by the destructor); -1 when refused
  struct stat st {};     // its fstat (mode, owner)
  std::string error;     // when refused: "<path>: <reason>" or "<path> is not a regular file"
  explicit RegularFile(const std::string& path);
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();
  bool ok() const { return fd >= 0; }
};

}  // namespace tollgate::config

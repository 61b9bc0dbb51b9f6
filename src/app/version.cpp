#include "tollgate/app/version.hpp"

#include <boost/version.hpp>
#include <openssl/opensslv.h>
#include <openssl/crypto.h>

#include "tollgate/config/mysql_source.hpp"
#include "tollgate/store/redis_store.hpp"

namespace tollgate::app {

std::string version_text() {
  std::string out = std::string("tollgate ") + kVersion + " (commit " + kCommit + ")\n";
  out += std::string("  Boost ") + std::to_string(BOOST_VERSION / 100000) + "." + std::to_string(BOOST_VERSION / 100 % 1000) +
         "." + std::to_string(BOOST_VERSION % 100) + "\n";
  // Built against one OpenSSL, running with the one the system has (they can differ after an update).
  out += std::string("  OpenSSL built with ") + OPENSSL_VERSION_TEXT + ", running " + OpenSSL_version(OPENSSL_VERSION) + "\n";
  out += "  hiredis " + store::hiredis_version() + "\n";
  out += "  MySQL Connector/C++ " + config::connector_version() + "\n";
  return out;
}

}  // namespace tollgate::app

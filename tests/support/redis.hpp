// A real Redis for integration tests. scripts/test.sh starts one and exports TOLLGATE_TEST_REDIS_DIR
// and TOLLGATE_TEST_REDIS_PORT; without them the tests start their own (scripts/redis-server.sh) if
// redis-server is installed, and skip with a message if it is not.
#pragma once

#include <string>

namespace tollgate::testing {

class RedisServer {
 public:
  static RedisServer& shared();
  bool available() const { return available_; }
  const std::string& why_not() const { return why_not_; }
  int port() const { return port_; }
  std::string cli(const std::string& args);  // redis-cli output
  void flush() { cli("FLUSHALL"); }
  void stop();
  void start();

 private:
  RedisServer();
  ~RedisServer();
  bool available_ = false;
  bool owned_ = false;
  std::string why_not_;
  std::string dir_;
  int port_ = -1;
};

}  // namespace tollgate::testing

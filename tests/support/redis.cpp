#include "support/redis.hpp"

#include <cstdlib>
#include <stdexcept>

#include "support/process.hpp"

namespace tollgate::testing {

namespace {
const std::string kScript = std::string(TOLLGATE_SOURCE_DIR) + "/scripts/redis-server.sh";

std::string run(const std::string& shell, int* code = nullptr) {
  Process p({"/bin/sh", "-c", shell});
  const auto rc = p.wait_exit(std::chrono::seconds(60));
  if (code) *code = rc.value_or(-1);
  else if (rc != 0) throw std::runtime_error("command failed (" + shell + "): " + p.output());
  return p.output();
}
}  // namespace

RedisServer& RedisServer::shared() {
  static RedisServer instance;
  return instance;
}

RedisServer::RedisServer() {
  const char* dir = std::getenv("TOLLGATE_TEST_REDIS_DIR");
  const char* port = std::getenv("TOLLGATE_TEST_REDIS_PORT");
  if (dir && port) {
    dir_ = dir;
    port_ = std::atoi(port);
    available_ = true;
    return;
  }
  int code = 0;
  run("command -v redis-server >/dev/null && command -v redis-cli >/dev/null", &code);
  if (code != 0) {
    why_not_ = "redis-server is not installed (scripts/test.sh installs redis-server and redis-tools)";
    return;
  }
  dir_ = temp_dir();
  port_ = unused_port();
  owned_ = true;
  start();
  available_ = true;
}

RedisServer::~RedisServer() {
  if (owned_) {
    int code = 0;
    run(kScript + " stop " + dir_, &code);
  }
}

std::string RedisServer::cli(const std::string& args) {
  return run("redis-cli -h 127.0.0.1 -p " + std::to_string(port_) + " " + args);
}

void RedisServer::stop() { run(kScript + " stop " + dir_); }
void RedisServer::start() { run(kScript + " start " + dir_ + " " + std::to_string(port_)); }

}  // namespace tollgate::testing

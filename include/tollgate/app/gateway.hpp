// The composition root: the only place that names concrete stores and config sources.
#pragma once

#include <memory>

#include "tollgate/config/gateway_config.hpp"

namespace tollgate::app {

class Gateway {
 public:
  // Validates the configuration and the rules; throws ConfigError. With `check_only` (--check),
  // MySQL's rows are read once and any row the gateway would reject, or a MySQL it cannot read,
  // throws, where a start serves the file's rules and retries; start() is not to be called.
  explicit Gateway(config::GatewayConfig config, bool check_only = false);
  ~Gateway();
  // Binds the listeners and prints where they are; then run() serves until SIGINT/SIGTERM.
  void start();
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::app

// The composition root: the only place that names concrete stores and config sources.
#pragma once

#include <memory>

#include "tollgate/config/gateway_config.hpp"

namespace tollgate::app {

class Gateway {
 public:
  explicit Gateway(config::GatewayConfig config);  // validates rules; throws ConfigError
  ~Gateway();
  // Binds the listeners and prints where they are; then run() serves until SIGINT/SIGTERM.
  void start();
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::app

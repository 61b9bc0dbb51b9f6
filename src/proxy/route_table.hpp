// Internal to the proxy: the upstreams (resolved once at start) and the path prefixes routed to them.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "http_io.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/proxy/metrics.hpp"

namespace tollgate::proxy {

struct Upstream {
  std::size_t index = 0;  // in config.upstreams (and so in TlsProfiles)
  config::UpstreamConfig conf;
  std::vector<tcp::endpoint> endpoints;
  std::string host_header;
  milliseconds connect_timeout;
  milliseconds response_timeout;
  milliseconds idle_timeout;  // a pooled connection idle longer is closed, not reused
  UpstreamMetrics* metrics = nullptr;  // its series, made at start
};

struct Route {
  std::string prefix;
  std::size_t upstream;  // index into RouteTable::upstreams
};

class RouteTable {
 public:
  // Resolves every upstream's address (throws std::runtime_error naming the one that fails), makes
  // its metric series, and orders the routes longest prefix first.
  void build(const config::GatewayConfig& config, Metrics& metrics);
  const Route* route_for(std::string_view path) const {
    for (const auto& r : routes_)
      if (path.starts_with(r.prefix)) return &r;
    return nullptr;
  }
  std::vector<Upstream>& upstreams() { return upstreams_; }

 private:
  std::vector<Upstream> upstreams_;
  std::vector<Route> routes_;  // longest prefix first
};

}  // namespace tollgate::proxy

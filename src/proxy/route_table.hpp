// Internal to the proxy: the upstreams (their endpoints kept current by the resolver) and the path
// prefixes routed to them.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "endpoints.hpp"
#include "http_io.hpp"
#include "resolver.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/proxy/metrics.hpp"

namespace tollgate::proxy {

struct Upstream {
  std::size_t index = 0;  // in config.upstreams (and so in TlsProfiles)
  config::UpstreamConfig conf;
  std::unique_ptr<UpstreamEndpoints> endpoints;  // shared by the workers
  milliseconds connect_timeout;
  milliseconds response_timeout;
  milliseconds idle_timeout;  // a pooled connection idle longer is closed, not reused
  UpstreamMetrics* metrics = nullptr;  // its series, made at start
};

struct Route {
  std::string prefix;
  std::size_t upstream;  // index into RouteTable::upstreams
  bool strip_prefix = false;
  milliseconds connect_timeout;   // the route's, else the upstream's
  milliseconds response_timeout;
};

class RouteTable {
 public:
  // Makes every upstream's endpoints and metric series (IP literals at once, names by the
  // resolver, which start() begins) and orders the routes longest prefix first.
  void build(const config::GatewayConfig& config, Metrics& metrics, std::size_t workers);
  // Resolves the names, waiting up to `first` for their first answers; never fails on DNS.
  void start(std::chrono::milliseconds first);
  void stop();
  const Route* route_for(std::string_view path) const {
    for (const auto& r : routes_)
      if (path.starts_with(r.prefix)) return &r;
    return nullptr;
  }
  std::vector<Upstream>& upstreams() { return upstreams_; }
  // Names of the upstreams with no address yet.
  std::vector<std::string> unresolved() const;

 private:
  std::vector<Upstream> upstreams_;
  std::vector<Route> routes_;  // longest prefix first
  std::unique_ptr<Resolver> resolver_;
};

}  // namespace tollgate::proxy

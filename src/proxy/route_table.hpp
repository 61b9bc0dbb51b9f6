// Internal to the proxy: the upstreams (their endpoints kept current by the table's resolver) and
// the path prefixes routed to them. A table never changes once built: a SIGHUP builds a new one
// from the new file, which takes over the endpoints (health, TLS sessions, pooled connections)
// of every upstream whose configuration did not change; requests in flight keep the table they
// started on.
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
#include "tollgate/proxy/tls_context.hpp"
#include "upstream_auth.hpp"

namespace tollgate::proxy {

struct Upstream {
  std::size_t index = 0;  // in its table (and so in each worker's pools for that table)
  config::UpstreamConfig conf;
  std::shared_ptr<UpstreamEndpoints> endpoints;  // shared by the workers, and by the next table when unchanged
  std::shared_ptr<UpstreamTls> tls;              // https: its profile and counters; null: plain http
  milliseconds connect_timeout;
  milliseconds response_timeout;
  milliseconds idle_timeout;  // a pooled connection idle longer is closed, not reused
  UpstreamMetrics* metrics = nullptr;  // its series (kept by name across tables)
  std::shared_ptr<UpstreamAuth> auth;  // upstreams.<name>.auth (null: none); kept, with its token, by the next table when unchanged
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
  // resolver, which start() begins) and orders the routes longest prefix first. `tls` is
  // TlsProfiles::prepare(config.upstreams) (null entries: plain http). An upstream whose
  // configuration equals one of `previous` (the table this one replaces; null at start) shares
  // its endpoints. `limits` are the running proxy limits (read only at start). `own` (null: not
  // known) is the proxy listener: its addresses are never endpoints.
  RouteTable(const config::GatewayConfig& config, const config::ProxyLimits& limits,
             std::vector<std::shared_ptr<UpstreamTls>> tls, Metrics& metrics, std::size_t workers,
             const RouteTable* previous, std::shared_ptr<const OwnListener> own = nullptr);
  RouteTable(const RouteTable&) = delete;
  RouteTable& operator=(const RouteTable&) = delete;
  // Resolves the names, waiting up to `first` for their first answers; never fails on DNS (throws
  // only when the resolver itself cannot start).
  void start(std::chrono::milliseconds first);
  // Stops resolving (the table is replaced or the gateway stops); its endpoints keep their last set.
  void stop();
  const Route* route_for(std::string_view path) const {
    for (const auto& r : routes_)
      if (path.starts_with(r.prefix)) return &r;
    return nullptr;
  }
  std::vector<Upstream>& upstreams() { return upstreams_; }
  const std::vector<Upstream>& upstreams() const { return upstreams_; }
  // Names of the upstreams with no address yet.
  std::vector<std::string> unresolved() const;

 private:
  std::vector<Upstream> upstreams_;
  std::vector<Route> routes_;  // longest prefix first
  std::unique_ptr<Resolver> resolver_;
};

}  // namespace tollgate::proxy

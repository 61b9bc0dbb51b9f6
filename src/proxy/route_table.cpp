#include "route_table.hpp"

#include <algorithm>
#include <stdexcept>

namespace tollgate::proxy {

void RouteTable::build(const config::GatewayConfig& config, Metrics& metrics) {
  const config::ProxyLimits& limits = config.proxy;
  net::io_context tmp;
  tcp::resolver resolver(tmp);
  for (const auto& u : config.upstreams) {
    Upstream up;
    up.index = upstreams_.size();
    up.conf = u;
    boost::system::error_code ec;
    auto results = resolver.resolve(u.host, std::to_string(u.port), ec);
    if (ec) throw std::runtime_error("upstream '" + u.name + "' (" + u.url + "): cannot resolve: " + ec.message());
    for (const auto& r : results) up.endpoints.push_back(r.endpoint());
    up.host_header = u.port == (u.https ? 443 : 80) ? u.host : u.host + ":" + std::to_string(u.port);
    up.connect_timeout = milliseconds(u.connect_timeout_ms ? u.connect_timeout_ms : limits.connect_timeout_ms);
    up.response_timeout = milliseconds(u.response_timeout_ms ? u.response_timeout_ms : limits.response_timeout_ms);
    up.idle_timeout = milliseconds(u.idle_timeout_ms ? u.idle_timeout_ms : limits.upstream_idle_timeout_ms);
    up.metrics = &metrics.upstream(u.name);
    upstreams_.push_back(std::move(up));
  }
  for (const auto& r : config.routes) {
    std::size_t idx = 0;
    while (upstreams_[idx].conf.name != r.upstream) ++idx;
    routes_.push_back({r.prefix, idx});
  }
  std::stable_sort(routes_.begin(), routes_.end(),
                   [](const Route& a, const Route& b) { return a.prefix.size() > b.prefix.size(); });
}

}  // namespace tollgate::proxy

#include "route_table.hpp"

#include <algorithm>

namespace tollgate::proxy {

RouteTable::RouteTable(const config::GatewayConfig& config, const config::ProxyLimits& limits,
                       std::vector<std::shared_ptr<UpstreamTls>> tls, Metrics& metrics, std::size_t workers,
                       const RouteTable* previous, std::shared_ptr<const OwnListener> own) {
  std::vector<UpstreamEndpoints*> all;
  for (std::size_t i = 0; i < config.upstreams.size(); ++i) {
    const config::UpstreamConfig& u = config.upstreams[i];
    Upstream up;
    up.index = upstreams_.size();
    up.conf = u;
    up.tls = i < tls.size() ? tls[i] : nullptr;
    up.connect_timeout = milliseconds(u.connect_timeout_ms ? u.connect_timeout_ms : limits.connect_timeout_ms);
    up.response_timeout = milliseconds(u.response_timeout_ms ? u.response_timeout_ms : limits.response_timeout_ms);
    up.idle_timeout = milliseconds(u.idle_timeout_ms ? u.idle_timeout_ms : limits.upstream_idle_timeout_ms);
    up.metrics = &metrics.upstream(u.name);
    if (previous)
      for (const Upstream& was : previous->upstreams_)
        if (was.conf == u) {  // unchanged: its health, sessions, pools and token go on
          up.endpoints = was.endpoints;
          up.auth = was.auth;
        }
    if (!up.endpoints) up.endpoints = std::make_shared<UpstreamEndpoints>(u, workers, metrics, *up.metrics, own);
    if (!up.auth && u.auth.type != config::AuthType::none) up.auth = std::make_shared<UpstreamAuth>(u, metrics);
    all.push_back(up.endpoints.get());
    upstreams_.push_back(std::move(up));
  }
  resolver_ = std::make_unique<Resolver>(config.dns, std::move(all));
  for (const auto& r : config.routes) {
    std::size_t idx = 0;
    while (upstreams_[idx].conf.name != r.upstream) ++idx;
    const Upstream& up = upstreams_[idx];
    routes_.push_back({r.prefix, idx, r.strip_prefix,
                       r.connect_timeout_ms ? milliseconds(r.connect_timeout_ms) : up.connect_timeout,
                       r.response_timeout_ms ? milliseconds(r.response_timeout_ms) : up.response_timeout});
  }
  std::stable_sort(routes_.begin(), routes_.end(),
                   [](const Route& a, const Route& b) { return a.prefix.size() > b.prefix.size(); });
}

void RouteTable::start(std::chrono::milliseconds first) { resolver_->start(first); }

void RouteTable::stop() {
  if (resolver_) resolver_->stop();
}

std::vector<std::string> RouteTable::unresolved() const {
  std::vector<std::string> out;
  for (const auto& u : upstreams_)
    if (!u.endpoints->resolved()) out.push_back(u.conf.name);
  return out;
}

}  // namespace tollgate::proxy

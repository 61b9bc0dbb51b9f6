// Internal to the proxy: what every part of a worker's request path shares. One Worker per thread
// (io_context): its acceptor, its upstream pools and its idle connections, touched only on that
// thread, so without locks.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "http_io.hpp"
#include "timed_socket.hpp"
#include "route_table.hpp"
#include "tollgate/proxy/client_key.hpp"
#include "tollgate/proxy/proxy_server.hpp"
#include "tollgate/proxy/request_policy.hpp"
#include "tollgate/proxy/tls_context.hpp"

namespace tollgate::proxy {

struct PooledConn {
  PooledConn(const net::any_io_executor& ex, Timeouts& t) : stream(ex, t) {}
  TimedSocket stream;
  beast::flat_buffer buffer;
  std::unique_ptr<http1::ResponseHead> head = std::make_unique<http1::ResponseHead>();  // views into buffer
  std::chrono::steady_clock::time_point idle_since;
  std::uint64_t tls_generation = 0;  // the TLS profile it was made with (0: plain)
  EndpointPtr endpoint;              // the address it is connected to
};

// Idle keep-alive connections to one upstream (to any of its endpoints), the endpoint set and
// (https) the TLS profile as this worker last read them.
struct Pool {
  std::vector<std::unique_ptr<PooledConn>> idle;
  std::shared_ptr<const EndpointSet> set;
  std::uint64_t set_version = 0;  // UpstreamEndpoints::version() when `set` was read
  std::uint32_t rr = 0;           // round robin among endpoints equally loaded
  net::steady_timer* warm_timer = nullptr;  // the warm-pool keeper's (min_idle_conns > 0): cancelled to wake it
  std::shared_ptr<const TlsClientProfile> tls;
  std::uint64_t tls_epoch = 0;  // UpstreamTls::epoch() when `tls` was read
  bool retired = false;         // its upstream left the route table: connections coming back are closed
};

// A worker's side of one route table: the table and a pool per upstream. A request keeps the one
// it started on (a shared_ptr) until it is answered; the pools of upstreams the next table keeps
// unchanged are shared with it, the others retire.
struct WorkerTable {
  std::shared_ptr<RouteTable> routes;
  std::vector<std::shared_ptr<Pool>> pools;  // by upstream index
};

struct Worker {
  std::size_t index = 0;  // its TLS session caches in each UpstreamEndpoint
  net::io_context* ctx;
  Timeouts timeouts;  // of this worker's connections, client and upstream
  std::unique_ptr<tcp::acceptor> acceptor;
  std::shared_ptr<WorkerTable> table;           // the running one, replaced on this thread
  std::unordered_set<TimedSocket*> idle;        // connections waiting for their next request
  bool draining = false;                        // set on this worker's own thread
  int spare_fd = -1;  // held back so that a 429 can still be sent when descriptors run out
  std::shared_ptr<const RuleViews> rules;  // of the snapshot this worker saw last
};

struct ProxyContext {
  ProxyContext(ProxyDeps d)
      : deps(d), limits(d.config.proxy), trusted(trusted_proxies_from(limits.trusted_proxies)) {
    settings.max_held = limits.max_held;
    settings.max_held_per_bucket = limits.max_held_per_bucket;
    settings.trusted = &trusted;
    settings.missing_key = d.config.limits.missing_key;
    settings.deadlines = limits.deadline_headers;
    settings.default_latency_us = static_cast<std::int64_t>(limits.default_upstream_latency_ms) * 1000;
    via_received[0] = "1.0 " + limits.via_pseudonym;
    via_received[1] = "1.1 " + limits.via_pseudonym;
    for (int i = 0; i < 2; ++i)
      for (int tls = 0; tls < 2; ++tls)
        via_proto_lines[i][tls] = "Via: " + via_received[i] + "\r\nX-Forwarded-Proto: " + (tls ? "https" : "http") + "\r\n";
  }
  ProxyDeps deps;
  const config::ProxyLimits& limits;
  // The running route table (the admin thread's view; each worker has its own pointer to it).
  std::shared_ptr<RouteTable> routes() const {
    std::lock_guard lock(routes_mu);
    return routes_;
  }
  std::shared_ptr<RouteTable> routes_;  // under routes_mu
  mutable std::mutex routes_mu;
  TrustedProxies trusted;
  PolicySettings settings;
  // This hop's Via element for a request received over HTTP/1.0 and HTTP/1.1 (proxy.via_pseudonym).
  std::string via_received[2];
  // For a request without a Via, the two lines that follow X-Forwarded-For, made once: Via with only
  // this hop's element and X-Forwarded-Proto, by version and then by the client's TLS (one append).
  std::string via_proto_lines[2][2];
};

}  // namespace tollgate::proxy

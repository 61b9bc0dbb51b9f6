// Internal to the proxy: an upstream's endpoints (every address of every URL), shared by the
// workers. The resolver (proxy/resolver) publishes a new EndpointSet when an answer changes;
// workers read it through a version number and keep their copy of the pointer, so the request
// path takes no lock. Each endpoint carries its load (requests outstanding, for least-outstanding
// balancing) and its health (passive ejection after consecutive failures), as atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "http_io.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/tls_context.hpp"

namespace tollgate::proxy {

struct UpstreamEndpoint {
  UpstreamEndpoint(tcp::endpoint a, std::string host, std::size_t workers);
  tcp::endpoint address;
  std::string label;        // "127.0.0.2:8080", "[::1]:9000": its metric label and its name in logs
  std::string host_header;  // of the URL it came from
  std::atomic<int> outstanding{0};              // requests on it now, all workers
  std::atomic<std::uint32_t> failures{0};       // in a row
  std::atomic<std::uint32_t> successes{0};      // in a row
  std::atomic<std::uint32_t> ejections{0};      // in a row (each lasts base_ms times this, at most 10x)
  std::atomic<std::int64_t> ejected_until_us{0};  // steady clock; 0: never ejected
  std::atomic<bool> in_set{true};               // false once a resolution dropped it: its pooled connections go
  std::unique_ptr<TlsSessionCache[]> sessions;  // TLS sessions with it, one cache per worker (no locks)
  EndpointSeries series;
};

using EndpointPtr = std::shared_ptr<UpstreamEndpoint>;

struct EndpointSet {
  std::vector<EndpointPtr> endpoints;  // every URL's addresses, in URL order
};

// Passive ejection's arithmetic, on a given clock (unit-tested with a manual one).
struct EjectPolicy {
  std::uint32_t consecutive_failures = 5;  // 0: never eject
  std::int64_t base_us = 30'000'000;
  std::uint32_t max_percent = 50;
};

// Picks the endpoint with the fewest requests outstanding among those not ejected at `now_us` and
// not in `tried`; ties go round robin from `rr` (which it advances). When every untried one is
// ejected it picks among those anyway (a request is not refused for it). Returns its index in
// `set`, or kNoEndpoint when none is left untried.
inline constexpr std::size_t kNoEndpoint = static_cast<std::size_t>(-1);
std::size_t pick_endpoint(const EndpointSet& set, std::uint32_t& rr, std::int64_t now_us,
                                const UpstreamEndpoint* const* tried, std::size_t tried_count);

// The outcome of one use of `e`: a failure ejects it after `consecutive_failures` in a row, unless
// that would put more than max_percent of `set` out at `now_us`. Returns true when this call
// ejected it.
bool note_failure(const EndpointSet& set, UpstreamEndpoint& e, const EjectPolicy& p, std::int64_t now_us);
void note_success(UpstreamEndpoint& e, const EjectPolicy& p);

// The proxy listener's own addresses, once it is bound: an endpoint equal to one is never used (a
// request sent there comes back to the gateway, which would send it there again). A wildcard
// listener (0.0.0.0, ::) owns its port on every address of the host: loopback ones, and those
// its interfaces had when it was bound.
class OwnListener {
 public:
  explicit OwnListener(tcp::endpoint bound);
  bool owns(const tcp::endpoint& e) const;
  const tcp::endpoint& bound() const { return bound_; }

 private:
  tcp::endpoint bound_;
  std::vector<net::ip::address> local_;  // the host's addresses (a wildcard listener only)
};

// The shared endpoints of one upstream: the targets' current addresses and the published set.
class UpstreamEndpoints {
 public:
  // `own` (null: none known) keeps the proxy listener's addresses out of the set.
  UpstreamEndpoints(const config::UpstreamConfig& conf, std::size_t workers, Metrics& metrics, UpstreamMetrics& um,
                    std::shared_ptr<const OwnListener> own = nullptr);
  ~UpstreamEndpoints();
  // The set and its version; a worker calls it only when version() moved.
  std::shared_ptr<const EndpointSet> current(std::uint64_t& version) const;
  std::uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // A target's addresses as resolved now (resolver thread, or at start for IP literals).
  // Endpoints still in the answer are kept (health, pools); new ones join; gone ones leave. An
  // address of the proxy listener's is left out (logged and counted when an answer first has it).
  // Returns whether the set changed.
  bool set_addresses(std::size_t target, std::vector<tcp::endpoint> addresses);
  bool resolved() const { return resolved_.load(std::memory_order_acquire); }
  // `e` was just ejected: its `up` gauge says so (unless it left the set, and its gauge with it).
  void mark_ejected(UpstreamEndpoint& e);
  // The `up` gauges follow ejections that ended (called about once a second).
  void refresh_gauges(std::int64_t now_us);
  const config::UpstreamConfig& conf() const { return conf_; }
  const EjectPolicy& policy() const { return policy_; }
  UpstreamMetrics& metrics() const { return um_; }

 private:
  // Takes the listener's own addresses out of a target's answer (under mu_).
  void leave_out_own(std::size_t target, std::vector<tcp::endpoint>& addresses);
  config::UpstreamConfig conf_;
  EjectPolicy policy_;
  std::size_t workers_;
  Metrics& metrics_;
  UpstreamMetrics& um_;
  mutable std::mutex mu_;
  std::vector<std::vector<EndpointPtr>> by_target_;  // under mu_
  std::shared_ptr<const EndpointSet> set_;           // under mu_
  std::shared_ptr<const OwnListener> own_;
  std::vector<std::vector<tcp::endpoint>> own_left_out_;  // by target: the listener's addresses its answer had; under mu_
  std::atomic<std::uint64_t> version_{1};
  std::atomic<bool> resolved_{false};
};

}  // namespace tollgate::proxy

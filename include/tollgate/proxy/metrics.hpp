// Request outcome counters and histograms: every decision the proxy takes is counted under a
// name, globally and per bucket (label values come from the rules, so they are bounded).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace tollgate::proxy {

enum class Outcome : int {
  forwarded,    // a rule matched and granted a permit at once
  delayed,      // a rule matched and the request was held for its slot, then forwarded
  rejected,     // a rule matched and the slot was beyond the wait window (or a hold cap was reached): 429
  bypassed,     // the global switch is off: forwarded, nothing counted against a bucket
  unmatched,    // no rule governs the path: forwarded unlimited
  store_error,  // the bucket store failed: handled per its failure policy
  shadow_rejected,  // shadow mode: would have been 429, forwarded with a header saying so
  count_
};
const char* outcome_name(Outcome o);

enum class UpstreamError : int { connect, reset, timeout, count_ };
const char* upstream_error_name(UpstreamError e);

// A Prometheus histogram with fixed bounds in seconds.
struct Histogram {
  static constexpr std::array<double, 14> kBounds{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                  0.5,   1,     2.5,  5,     10,  30,  60};
  std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> counts{};
  std::atomic<std::uint64_t> sum_us{0};
  void observe_us(std::int64_t us);
  void render(std::string& out, const std::string& name, const std::string& labels) const;
};

struct BucketMetrics {
  std::array<std::atomic<std::uint64_t>, static_cast<int>(Outcome::count_)> outcomes{};
  std::atomic<std::int64_t> held{0};
  std::atomic<std::uint64_t> cap_rejections{0};  // 429s because too many requests already wait
  Histogram wait;                                // time held before forwarding (0 for forwarded)
};

// One policy of a rule (its bucket, its channel's, a quota "<bucket>#q<id>", its maxShare
// "<bucket>#maxShare"): how often its check passed or failed, and how often it bound a 429.
struct PolicyMetrics {
  std::atomic<std::uint64_t> passed{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> bound{0};  // 429s it decided (the failed check furthest from passing)
};

struct UpstreamMetrics {
  std::array<std::atomic<std::uint64_t>, static_cast<int>(UpstreamError::count_)> errors{};
  Histogram latency;  // request sent -> response header received
};

struct Metrics {
  std::atomic<std::uint64_t> outcomes[static_cast<int>(Outcome::count_)] = {};
  std::atomic<std::uint64_t> upstream_errors[static_cast<int>(UpstreamError::count_)] = {};
  std::atomic<std::uint64_t> bad_requests{0};   // answered 4xx by the gateway itself (400/404/408/413/431)
  std::atomic<std::int64_t> held{0};            // requests waiting on a timer right now
  std::atomic<std::int64_t> connections{0};     // open client connections
  std::atomic<std::uint64_t> connections_refused{0};  // over proxy.max_connections
  std::atomic<std::uint64_t> refunds{0};        // reservations given back by departed clients
  std::atomic<std::uint64_t> abandoned{0};      // held requests whose client left before the slot
  std::atomic<std::uint64_t> store_degraded{0}; // decisions made by the local fallback (store down)
  // Pooled upstream connections closed instead of reused: bytes or a close arrived while idle
  // (an unsolicited response, a surplus body, an upstream keep-alive timeout) or past the idle limit.
  std::atomic<std::uint64_t> upstream_conns_discarded{0};
  std::atomic<std::uint64_t> upstream_retries{0};  // requests sent again after a reused connection failed

  void count(Outcome o) { outcomes[static_cast<int>(o)].fetch_add(1, std::memory_order_relaxed); }
  void count(UpstreamError e) { upstream_errors[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t get(Outcome o) const { return outcomes[static_cast<int>(o)].load(std::memory_order_relaxed); }
  std::uint64_t get(UpstreamError e) const {
    return upstream_errors[static_cast<int>(e)].load(std::memory_order_relaxed);
  }

  // Per-bucket and per-upstream series, created on first use and kept (names come from the rules
  // and the config). Lookups go through a small per-thread cache.
  BucketMetrics& bucket(std::string_view name);
  UpstreamMetrics& upstream(std::string_view name);
  // The series of one policy of one rule (label values from the rules: bounded).
  PolicyMetrics& policy(std::string_view rule, std::string_view policy);

  // Prometheus text exposition.
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<BucketMetrics>, std::less<>> buckets_;
  std::map<std::string, std::unique_ptr<UpstreamMetrics>, std::less<>> upstreams_;
  std::map<std::string, std::unique_ptr<PolicyMetrics>, std::less<>> policies_;
};

// A Prometheus label value, escaped.
std::string label_value(std::string_view v);

}  // namespace tollgate::proxy

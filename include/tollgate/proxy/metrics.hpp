// Request outcome counters: every decision the proxy takes is counted under a name.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tollgate::proxy {

enum class Outcome : int {
  forwarded,    // a rule matched and granted a permit at once
  delayed,      // a rule matched and the request was held for its slot, then forwarded
  rejected,     // a rule matched and the slot was beyond the wait window: 429
  bypassed,     // the global switch is off: forwarded, nothing counted against a bucket
  unmatched,    // no rule governs the path: forwarded unlimited
  store_error,  // the bucket store failed: handled per its failure policy
  count_
};
const char* outcome_name(Outcome o);

enum class UpstreamError : int { connect, reset, timeout, count_ };
const char* upstream_error_name(UpstreamError e);

struct Metrics {
  std::atomic<std::uint64_t> outcomes[static_cast<int>(Outcome::count_)] = {};
  std::atomic<std::uint64_t> upstream_errors[static_cast<int>(UpstreamError::count_)] = {};
  std::atomic<std::uint64_t> bad_requests{0};   // answered 4xx by the gateway itself (400/404/413/431)
  std::atomic<std::int64_t> held{0};            // requests waiting on a timer right now
  std::atomic<std::int64_t> connections{0};     // open client connections
  std::atomic<std::uint64_t> refunds{0};        // reservations given back by departed clients
  std::atomic<std::uint64_t> store_degraded{0}; // decisions made by the local fallback (store down)

  void count(Outcome o) { outcomes[static_cast<int>(o)].fetch_add(1, std::memory_order_relaxed); }
  void count(UpstreamError e) { upstream_errors[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t get(Outcome o) const { return outcomes[static_cast<int>(o)].load(std::memory_order_relaxed); }
  std::uint64_t get(UpstreamError e) const {
    return upstream_errors[static_cast<int>(e)].load(std::memory_order_relaxed);
  }

  // Prometheus text exposition.
  std::string render() const;
};

}  // namespace tollgate::proxy

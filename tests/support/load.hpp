// A bounded load generator for integration tests: keep-alive clients in threads, for a fixed time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tollgate::testing {

struct LoadResult {
  std::map<int, int> statuses;  // HTTP status -> count (0: transport error)
  int total() const {
    int n = 0;
    for (const auto& [s, c] : statuses) n += c;
    return n;
  }
  int count(int status) const {
    auto it = statuses.find(status);
    return it == statuses.end() ? 0 : it->second;
  }
};

// `clients` threads per port, each sending GET `target` back to back on one keep-alive connection
// (reconnecting if it closes), pausing `pause_after_reject` after a 429/503, for `duration`.
LoadResult run_load(const std::vector<int>& ports, const std::string& target, int clients_per_port,
                    std::chrono::milliseconds duration,
                    std::chrono::milliseconds pause_after_reject = std::chrono::milliseconds(20));

// What the fleet-wide bound allows, checked on the upstream's arrival times (microseconds, any
// order): the largest excess of any window [a_i, a_j] over burst + rate * T (<= 1 when the bound
// holds: the +1 is the request at the window's start), and the admissions as a share of
// burst + rate * (the whole span).
struct WindowCheck {
  double worst_excess = 0;
  double span_s = 0;
  double share = 0;  // admitted / (burst + rate * span)
};
WindowCheck check_windows(std::vector<std::int64_t> arrivals_us, double burst, double rate);

}  // namespace tollgate::testing

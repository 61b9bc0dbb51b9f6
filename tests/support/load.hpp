// A bounded load generator for integration tests: keep-alive clients in threads, for a fixed time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
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
// `fields`: header fields every request carries.
using Fields = std::vector<std::pair<std::string, std::string>>;
LoadResult run_load(const std::vector<int>& ports, const std::string& target, int clients_per_port,
                    std::chrono::milliseconds duration,
                    std::chrono::milliseconds pause_after_reject = std::chrono::milliseconds(20),
                    const Fields& fields = {});

// Paced load: `rate_per_port` GETs a second to each port, spread over `clients_per_port` keep-alive
// clients that each send on their own schedule (a late answer delays only its client's next
// request, which then goes at once), for `duration`.
LoadResult paced_load(const std::vector<int>& ports, const std::string& target, double rate_per_port,
                      int clients_per_port, std::chrono::milliseconds duration, const Fields& fields = {});

// One answer of a BackgroundLoad: when its request went out and when the answer (or the error)
// came, in steady_clock microseconds (CLOCK_MONOTONIC: the clock of the mock upstream's arrival
// times), its status (0: transport error) and, when it is not 200, the start of the body or the error.
struct TimedAnswer {
  std::int64_t sent_us = 0;
  std::int64_t done_us = 0;
  int status = 0;
  std::string detail;
};

// Load that runs while a test does other things: `clients` threads, each sending GET `target` to
// 127.0.0.1:port on one keep-alive connection (reconnecting if it closes), waiting `pause` between
// answers, from construction until stop(). Every answer is recorded.
class BackgroundLoad {
 public:
  BackgroundLoad(int port, std::string target, int clients,
                 std::chrono::milliseconds pause = std::chrono::milliseconds(5));
  ~BackgroundLoad() { stop(); }
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;
  void stop();  // waits for the answers in flight (each read gives up after 10 s)
  std::vector<TimedAnswer> answers() const;  // those so far
  int clients() const { return clients_; }

 private:
  void run(int port);
  std::string target_;
  int clients_;
  std::chrono::milliseconds pause_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::vector<TimedAnswer> answers_;
  std::vector<std::thread> threads_;
};

inline std::int64_t monotonic_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

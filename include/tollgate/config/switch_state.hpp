// The global switch: on = limits enforced, off = every request forwarded at once (counted "bypassed").
// Read on every request (one atomic load); written by the admin API and by config sources.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace tollgate::config {

struct SwitchInfo {
  bool enabled = true;
  std::string changed_by;     // "config" at start, else who flipped it
  std::int64_t changed_at_ms = 0;  // Unix epoch milliseconds
  std::string source;         // "file", "admin", "mysql"
};

class SwitchState {
 public:
  explicit SwitchState(bool enabled = true, std::string source = "file") {
    info_.enabled = enabled;
    info_.changed_by = "config";
    info_.changed_at_ms = now_ms();
    info_.source = std::move(source);
    enabled_.store(enabled, std::memory_order_relaxed);
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Returns the previous value.
  bool set(bool enabled, std::string by, std::string source) {
    std::lock_guard lock(mu_);
    const bool old = info_.enabled;
    info_.enabled = enabled;
    info_.changed_by = std::move(by);
    info_.changed_at_ms = now_ms();
    info_.source = std::move(source);
    enabled_.store(enabled, std::memory_order_relaxed);
    return old;
  }
  // Takes a value decided elsewhere (the fleet's row in MySQL), with its own author and time.
  void apply(bool enabled, std::string by, std::int64_t at_ms, std::string source) {
    std::lock_guard lock(mu_);
    info_.enabled = enabled;
    info_.changed_by = std::move(by);
    info_.changed_at_ms = at_ms;
    info_.source = std::move(source);
    enabled_.store(enabled, std::memory_order_relaxed);
  }
  SwitchInfo info() const {
    std::lock_guard lock(mu_);
    return info_;
  }
  static std::int64_t now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  }

 private:
  std::atomic<bool> enabled_{true};
  mutable std::mutex mu_;
  SwitchInfo info_;
};

}  // namespace tollgate::config

// The global switch: enforce (limits apply), shadow (decide and count, forward everything) or off
// (every request forwarded at once, counted "bypassed"). Read on every request (one atomic load);
// written by the admin API and by config sources.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

namespace tollgate::config {

// The numbers are the `state` column of t_ratelimite_switch (1 and 0 as in the original table).
enum class SwitchMode : int { off = 0, enforce = 1, shadow = 2 };
const char* switch_mode_name(SwitchMode m);
std::optional<SwitchMode> parse_switch_mode(std::string_view s);

struct SwitchInfo {
  SwitchMode mode = SwitchMode::enforce;
  std::string changed_by;          // "config" at start, else who flipped it
  std::int64_t changed_at_ms = 0;  // Unix epoch milliseconds
  std::string source;              // "file", "admin", "mysql"
  std::int64_t revert_at_ms = 0;   // 0: no scheduled revert
  SwitchMode revert_to = SwitchMode::enforce;
  std::uint64_t generation = 0;    // bumps on every change (a revert only undoes its own change)
};

class SwitchState {
 public:
  explicit SwitchState(SwitchMode mode = SwitchMode::enforce, std::string source = "file") {
    info_.mode = mode;
    info_.changed_by = "config";
    info_.changed_at_ms = now_ms();
    info_.source = std::move(source);
    mode_.store(static_cast<int>(mode), std::memory_order_relaxed);
  }
  SwitchMode mode() const { return static_cast<SwitchMode>(mode_.load(std::memory_order_relaxed)); }
  bool enabled() const { return mode() != SwitchMode::off; }
  // Sets the mode; returns the previous one. `revert_at_ms` 0: no revert scheduled.
  SwitchMode set(SwitchMode mode, std::string by, std::int64_t at_ms, std::string source,
                 std::int64_t revert_at_ms = 0, SwitchMode revert_to = SwitchMode::enforce) {
    std::lock_guard lock(mu_);
    const SwitchMode old = info_.mode;
    info_.mode = mode;
    info_.changed_by = std::move(by);
    info_.changed_at_ms = at_ms;
    info_.source = std::move(source);
    info_.revert_at_ms = revert_at_ms;
    info_.revert_to = revert_to;
    ++info_.generation;
    mode_.store(static_cast<int>(mode), std::memory_order_relaxed);
    return old;
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
  std::atomic<int> mode_{static_cast<int>(SwitchMode::enforce)};
  mutable std::mutex mu_;
  SwitchInfo info_;
};

inline const char* switch_mode_name(SwitchMode m) {
  switch (m) {
    case SwitchMode::off: return "off";
    case SwitchMode::enforce: return "enforce";
    case SwitchMode::shadow: return "shadow";
  }
  return "enforce";
}

inline std::optional<SwitchMode> parse_switch_mode(std::string_view s) {
  if (s == "enforce") return SwitchMode::enforce;
  if (s == "shadow") return SwitchMode::shadow;
  if (s == "off") return SwitchMode::off;
  return std::nullopt;
}

}  // namespace tollgate::config

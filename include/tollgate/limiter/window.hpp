// Window quotas: "at most `limit` requests per `period`" counted per window, next to the
// token bucket. Pure arithmetic like token_bucket.hpp: state + parameters + now -> decision.
//
//   fixed:   one counter per window [k*period, (k+1)*period); a request is admitted while
//            count + permits <= limit. Two full windows can meet at a boundary: up to 2*limit
//            requests in a span much shorter than one period.
//   sliding: the previous window's count weighted by how much of it the sliding window still
//            overlaps, plus the current count:
//              estimate = previous * ((period - elapsed) / period) + current
//            admitted while estimate + permits <= limit. It assumes the previous window's requests
//            were spread evenly; its worst case (all of them at the very end of that window) lets a
//            true sliding window of one period hold up to 2*limit - 1, but a burst right after a full
//            window is refused, and in general an interval of one period never holds more than
//            limit + previous * elapsed / period.
// The Redis script (src/store/redis_scripts.hpp) performs the same double operations in the same
// order, so both stores give bit-identical answers.
#pragma once

#include <cstdint>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

enum class WindowAlgorithm { fixed, sliding };

struct WindowParams {
  Micros period_us = 1'000'000;  // whole seconds in practice (periodSeconds)
  std::int64_t limit = 1;        // requests per period, >= 1
  WindowAlgorithm algorithm = WindowAlgorithm::fixed;
  bool operator==(const WindowParams&) const = default;
};

// A missing state means no request in the current or the previous window.
struct WindowState {
  std::int64_t window = 0;    // index of the current window: floor(now / period)
  std::int64_t current = 0;   // admitted in the current window
  std::int64_t previous = 0;  // admitted in the window before it
};

struct WindowDecision {
  bool admitted = false;
  double used = 0;             // count (fixed) or estimate (sliding) before this request
  double remaining = 0;        // limit - used - permits when admitted, else limit - used (>= 0)
  Micros retry_after_us = 0;   // rejected: earliest moment (from now) the same request is admitted
  Micros reset_us = 0;         // until the current window ends
};

std::int64_t window_index(Micros now, Micros period_us);

// Moves `st` to the window containing `now`: the current count becomes the previous one if the
// windows are adjacent; older counts are forgotten.
void roll(WindowState& st, const WindowParams& p, Micros now);

// Decides on a rolled state without changing it.
WindowDecision window_check(const WindowState& rolled, const WindowParams& p, std::int64_t permits, Micros now);

// try_acquire for one window quota: roll, check, and count the permits when admitted.
WindowDecision window_try_acquire(WindowState& st, const WindowParams& p, std::int64_t permits, Micros now);

// How long a state must be kept to decide the same as a missing one (TTL of a Redis counter).
Micros window_ttl_us(const WindowState& rolled, const WindowParams& p, Micros now);

}  // namespace tollgate::limiter

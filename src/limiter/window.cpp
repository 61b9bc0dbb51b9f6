#include "tollgate/limiter/window.hpp"

#include <algorithm>
#include <cmath>

namespace tollgate::limiter {

std::int64_t window_index(Micros now, Micros period_us) {
  const std::int64_t q = now / period_us;
  return now % period_us < 0 ? q - 1 : q;  // floor, also for (test) times before the epoch
}

void roll(WindowState& st, const WindowParams& p, Micros now) {
  const std::int64_t idx = window_index(now, p.period_us);
  if (st.window == idx) return;
  st.previous = st.window == idx - 1 ? st.current : 0;
  st.current = 0;
  st.window = idx;
}

namespace {

double sliding_estimate(const WindowState& st, const WindowParams& p, Micros elapsed) {
  const double period = static_cast<double>(p.period_us);
  return static_cast<double>(st.previous) * ((period - static_cast<double>(elapsed)) / period) +
         static_cast<double>(st.current);
}

// Earliest elapsed time within a window whose previous count is `previous` and current count is
// `current` at which `permits` more fit; period when none does within that window.
Micros sliding_fit(std::int64_t previous, std::int64_t current, const WindowParams& p, std::int64_t permits) {
  const std::int64_t need = p.limit - permits - current;
  if (need < 0) return p.period_us;
  if (previous <= need) return 0;
  const double period = static_cast<double>(p.period_us);
  // previous * (period - e) / period <= need  <=>  e >= period - need * period / previous
  Micros e = static_cast<Micros>(std::ceil(period - static_cast<double>(need) * period / static_cast<double>(previous)));
  e = std::clamp<Micros>(e, 0, p.period_us);
  const WindowState probe{0, current, previous};
  // The closed form and the estimate round differently: step to the first microsecond that fits.
  while (e < p.period_us && sliding_estimate(probe, p, e) + static_cast<double>(permits) > static_cast<double>(p.limit)) ++e;
  return e;
}

}  // namespace

WindowDecision window_check(const WindowState& st, const WindowParams& p, std::int64_t permits, Micros now) {
  WindowDecision d;
  const Micros start = st.window * p.period_us;
  const Micros elapsed = now - start;
  d.reset_us = start + p.period_us - now;
  const double limit = static_cast<double>(p.limit);
  if (permits > p.limit) {  // can never fit
    d.used = p.algorithm == WindowAlgorithm::fixed ? static_cast<double>(st.current) : sliding_estimate(st, p, elapsed);
    d.remaining = std::max(0.0, limit - d.used);
    d.retry_after_us = kInfinite;
    return d;
  }
  if (p.algorithm == WindowAlgorithm::fixed) {
    d.used = static_cast<double>(st.current);
    d.admitted = st.current + permits <= p.limit;
    if (!d.admitted) d.retry_after_us = d.reset_us;  // the next window starts empty
  } else {
    d.used = sliding_estimate(st, p, elapsed);
    d.admitted = d.used + static_cast<double>(permits) <= limit;
    if (!d.admitted) {
      const Micros e = sliding_fit(st.previous, st.current, p, permits);
      if (e < p.period_us && e > elapsed) {
        d.retry_after_us = e - elapsed;
      } else {
        // Not in this window: in the next one the current count becomes the previous.
        d.retry_after_us = d.reset_us + sliding_fit(st.current, 0, p, permits);
      }
    }
  }
  d.remaining = std::max(0.0, limit - d.used - (d.admitted ? static_cast<double>(permits) : 0.0));
  return d;
}

WindowDecision window_try_acquire(WindowState& st, const WindowParams& p, std::int64_t permits, Micros now) {
  roll(st, p, now);
  WindowDecision d = window_check(st, p, permits, now);
  if (d.admitted) st.current += permits;
  return d;
}

Micros window_ttl_us(const WindowState& st, const WindowParams& p, Micros now) {
  const Micros end = (st.window + 1) * p.period_us;
  // A sliding counter is still read as "previous" during the next window.
  return (p.algorithm == WindowAlgorithm::sliding ? end + p.period_us : end) - now;
}

}  // namespace tollgate::limiter

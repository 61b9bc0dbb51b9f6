#include "tollgate/limiter/token_bucket.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tollgate::limiter {

Micros saturating_add(Micros a, Micros b) {
  Micros r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? kInfinite : std::numeric_limits<Micros>::min();
  return r;
}

Micros truncate_micros(double us) {
  if (std::isnan(us)) return 0;
  // 2^63 is exactly representable; anything at or above it saturates.
  if (us >= 9223372036854775807.0) return kInfinite;
  if (us <= -9223372036854775807.0) return std::numeric_limits<Micros>::min();
  return static_cast<Micros>(us);  // truncation toward zero, as Java's (long) cast
}

Shape shape_of(const BucketParams& p) {
  if (!(p.rate > 0) || !std::isfinite(p.rate)) throw std::invalid_argument("rate must be a finite number > 0");
  Shape s;
  s.interval_us = 1e6 / p.rate;
  if (p.warmup_us > 0) {
    if (!(p.cold_factor >= 1.0) || !std::isfinite(p.cold_factor))
      throw std::invalid_argument("cold_factor must be >= 1");
    const double warmup = static_cast<double>(p.warmup_us);
    s.warm = true;
    s.cold_interval_us = s.interval_us * p.cold_factor;
    s.threshold = 0.5 * warmup / s.interval_us;
    s.max_permits = s.threshold + 2.0 * warmup / (s.interval_us + s.cold_interval_us);
    s.slope = (s.cold_interval_us - s.interval_us) / (s.max_permits - s.threshold);
    s.cool_down_us = warmup / s.max_permits;
  } else {
    if (p.warmup_us < 0) throw std::invalid_argument("warmup must be >= 0");
    const double burst = p.burst.value_or(p.rate);  // one second of permits by default
    if (!(burst >= 0) || !std::isfinite(burst)) throw std::invalid_argument("burst must be a finite number >= 0");
    s.max_permits = burst;
    s.cool_down_us = s.interval_us;
  }
  return s;
}

void resync(BucketState& st, const Shape& s, Micros now) {
  if (now > st.next_free) {
    const double fresh = static_cast<double>(now - st.next_free) / s.cool_down_us;
    st.stored = std::min(s.max_permits, st.stored + fresh);
    st.next_free = now;
  }
}

namespace {
// Warm-up: the cost of the permit at `permits` stored permits above the threshold.
double permits_to_time(const Shape& s, double permits) { return s.interval_us + permits * s.slope; }
}  // namespace

Micros stored_permits_to_wait_time(const Shape& s, double stored, double spend) {
  if (!s.warm) return 0;
  Micros micros = 0;
  const double above = stored - s.threshold;
  if (above > 0.0) {
    const double take_above = std::min(above, spend);
    // Trapezoid under the warm-up line between `above` and `above - take_above`.
    const double length = permits_to_time(s, above) + permits_to_time(s, above - take_above);
    micros = truncate_micros(take_above * length / 2.0);
    spend -= take_above;
  }
  return saturating_add(micros, truncate_micros(s.interval_us * spend));
}

Decision try_acquire(BucketState& st, const Shape& s, Mode mode, double permits, Micros timeout_us,
                     Micros now, double reserve) {
  BucketState next = st;  // committed only on grant
  resync(next, s, now);
  const double spend = std::min(permits, next.stored);
  const double fresh = permits - spend;
  const Micros cost = saturating_add(stored_permits_to_wait_time(s, next.stored, spend),
                                     truncate_micros(fresh * s.interval_us));
  const Micros release = saturating_add(next.next_free, cost);

  Decision d;
  // pay_now: released when its own last permit exists; pay_later: when the previous one does.
  Micros ready = mode == Mode::pay_now ? release : next.next_free;
  if (reserve > 0.0) {
    // A lower class: its slot is where its permits and the reserve behind them would both exist.
    const double needed = permits + reserve;
    const double vspend = std::min(needed, next.stored);
    const double vfresh = needed - vspend;
    const Micros vrelease = saturating_add(next.next_free, truncate_micros(vfresh * s.interval_us));
    if (mode == Mode::pay_now) ready = vrelease;
    else ready = saturating_add(next.next_free, truncate_micros(std::max(0.0, reserve - next.stored) * s.interval_us));
  }
  const Micros wait = std::max<Micros>(0, ready - now);
  if (wait > timeout_us) {
    d.granted = false;
    d.retry_after_us = ready - timeout_us - now;
    d.remaining = next.stored;
    d.next_free = st.next_free;
    return d;
  }
  next.next_free = release;
  next.stored -= spend;
  st = next;
  d.granted = true;
  d.wait_us = wait;
  d.remaining = st.stored;
  d.next_free = st.next_free;
  d.cost_us = cost;
  d.spent = spend;
  return d;
}

PairDecision try_acquire_pair(BucketState& a, const Shape& sa, BucketState& b, const Shape& sb, Mode mode,
                              const PairAsk& ask, Micros timeout_us, Micros now) {
  PairDecision out;
  BucketState ta = a, tb = b;  // decide on copies; commit only if both grant
  out.first = try_acquire(ta, sa, mode, ask.permits_a, timeout_us, now, ask.reserve_a);
  out.second = try_acquire(tb, sb, mode, ask.permits_b, timeout_us, now, ask.reserve_b);
  if (out.first.granted && out.second.granted) {
    a = ta;
    b = tb;
    out.combined = out.first.wait_us >= out.second.wait_us ? out.first : out.second;
    out.bound = out.first.wait_us >= out.second.wait_us ? 0 : 1;
    out.combined.remaining = std::min(out.first.remaining, out.second.remaining);
    return out;
  }
  // Rejected: undo nothing (copies were never committed), report the binding rejection.
  if (out.first.granted) out.first = Decision{false, 0, 0, out.first.remaining, a.next_free, 0, 0};
  if (out.second.granted) out.second = Decision{false, 0, 0, out.second.remaining, b.next_free, 0, 0};
  const Micros ra = out.first.retry_after_us, rb = out.second.retry_after_us;
  out.bound = ra >= rb ? 0 : 1;
  out.combined = out.bound == 0 ? out.first : out.second;
  out.combined.granted = false;
  out.combined.remaining = std::min(out.first.remaining, out.second.remaining);
  return out;
}

bool restore(BucketState& st, const Shape& s, double permits) {
  if (!(st.stored < s.max_permits)) return false;
  st.stored = std::min(s.max_permits, st.stored + permits);
  return true;
}

bool refund(BucketState& st, const Shape& s, Micros release, Micros cost_us, double spent) {
  if (st.next_free != release) return false;  // a later reservation exists: it keeps its place
  st.next_free = release - cost_us;
  st.stored = std::min(s.max_permits, st.stored + spent);
  return true;
}

namespace {
// Order of remembered slots: by release; at one release, a slot that took no time sorts after one
// that did (it was granted after it, at that same next_free).
bool slot_before(const Slot& a, const Slot& b) {
  if (a.release != b.release) return a.release < b.release;
  return a.cost_us != 0 && b.cost_us == 0;
}
}  // namespace

GiveBack abandon(BucketState& st, const Shape& s, std::vector<Slot>& abandoned, const Slot& r, Micros now,
                 std::size_t max_abandoned) {
  GiveBack out;
  // Released slots (release <= now) sit at the front.
  abandoned.erase(abandoned.begin(), std::partition_point(abandoned.begin(), abandoned.end(),
                                                          [now](const Slot& x) { return x.release <= now; }));
  if (r.release > now && r.release < st.next_free) {
    // Ties keep the order of abandonment: after every equal slot.
    const auto at = std::upper_bound(abandoned.begin(), abandoned.end(), r, slot_before);
    const bool first = at == abandoned.begin();
    abandoned.insert(at, r);
    out.remembered = true;
    if (abandoned.size() > max_abandoned) {  // full: forget the earliest (possibly r itself)
      abandoned.erase(abandoned.begin());
      out.remembered = !first;
    }
  } else if (r.release > now && r.release == st.next_free) {
    // Each one is the newest when its turn comes: the single refund's exact inverse of its grant.
    auto give = [&](const Slot& x) { out.returned += refund(st, s, x.release, x.cost_us, x.spent) ? 1 : 0; };
    if (r.cost_us != 0) {
      while (!abandoned.empty() && abandoned.back().release == st.next_free && abandoned.back().cost_us == 0) {
        give(abandoned.back());
        abandoned.pop_back();
      }
    }
    give(r);
    while (!abandoned.empty() && abandoned.back().release == st.next_free) {
      give(abandoned.back());
      abandoned.pop_back();
    }
    // Anything still after the tail can never be the newest again.
    while (!abandoned.empty() && abandoned.back().release > st.next_free) abandoned.pop_back();
  }
  // A quiet bucket holds no memory, and one that had a crowd leave gives most of it back.
  if (abandoned.empty()) std::vector<Slot>().swap(abandoned);
  else if (abandoned.capacity() > 64 && abandoned.size() < abandoned.capacity() / 4) abandoned.shrink_to_fit();
  return out;
}

void rescale(BucketState& st, const Shape& old_shape, const Shape& new_shape, Micros now) {
  resync(st, old_shape, now);
  if (old_shape.max_permits > 0.0 && st.stored >= old_shape.max_permits) {
    // Full stays full: exactly the new maximum, as a missing state (a rested bucket a store forgot)
    // would be, not old * new / old rounded below it.
    st.stored = new_shape.max_permits;
  } else if (old_shape.max_permits > 0.0) {
    st.stored = st.stored * new_shape.max_permits / old_shape.max_permits;
  } else {
    // Guava: a bursty bucket of size 0 stays empty; a warming one starts cold (full).
    st.stored = new_shape.warm ? new_shape.max_permits : 0.0;
  }
  st.stored = std::min(st.stored, new_shape.max_permits);
}

TokenBucket::TokenBucket(const BucketParams& params, Micros now, Initial initial)
    : params_(params), shape_(shape_of(params)) {
  state_ = initial == Initial::full ? full_state(shape_, now) : empty_state(now);
}

Decision TokenBucket::try_acquire(double permits, Micros timeout_us, Micros now) {
  if (!(permits > 0) || !std::isfinite(permits)) throw std::invalid_argument("permits must be a finite number > 0");
  return limiter::try_acquire(state_, shape_, params_.mode, permits, std::max<Micros>(0, timeout_us), now);
}

void TokenBucket::set_rate(double rate, Micros now) {
  BucketParams next = params_;
  next.rate = rate;
  const Shape new_shape = shape_of(next);
  rescale(state_, shape_, new_shape, now);
  params_ = next;
  shape_ = new_shape;
}

}  // namespace tollgate::limiter

#include "tollgate/limiter/adaptive_rate.hpp"

#include <cmath>

namespace tollgate::limiter {

// Every step below is mirrored in Lua (src/store/redis_scripts.hpp, kAdaptiveLua) with the same
// operations in the same order, so that both stores compute the same doubles.

const char* adaptive_name(Adaptive a) {
  switch (a) {
    case Adaptive::on: return "on";
    case Adaptive::shadow: return "shadow";
    case Adaptive::off: break;
  }
  return "off";
}

double floor_rate(double configured, const AdaptiveParams& p) {
  double f = configured * p.floor_share;
  if (f < p.min_floor) f = p.min_floor;
  if (f > configured) f = configured;
  return f;
}

namespace {
std::int64_t second_of(Micros now) { return static_cast<std::int64_t>(std::floor(static_cast<double>(now) / 1e6)); }

// W(t) of the curve at `now` (t counted from the epoch, never negative).
double curve(const AdaptiveState& st, Micros now, const AdaptiveParams& p) {
  double t = static_cast<double>(now - st.epoch) / 1e6;
  if (t < 0) t = 0;
  const double k = std::pow(st.w_max * (1 - p.beta) / p.c, 1.0 / 3.0);
  const double d = t - k;
  return p.c * d * d * d + st.w_max;
}
}  // namespace

void note_demand(AdaptiveState& st, Micros now, double permits) {
  const std::int64_t sec = second_of(now);
  if (sec > st.demand_sec) {
    st.demand_prev = sec == st.demand_sec + 1 ? st.demand_cur : 0;
    st.demand_cur = 0;
    st.demand_sec = sec;
  }
  st.demand_cur += permits;
}

double demand(const AdaptiveState& st, Micros now) {
  const std::int64_t sec = second_of(now);
  const double elapsed = static_cast<double>(now - sec * 1'000'000);
  const double left = (1e6 - elapsed) / 1e6;  // share of the previous second still in the window
  if (sec <= st.demand_sec) return st.demand_prev * left + st.demand_cur;
  if (sec == st.demand_sec + 1) return st.demand_cur * left;
  return 0;
}

double sent_rate(const AdaptiveState& st, Micros now, const AdaptiveParams& p) {
  if (now <= st.sent_at) return st.sent;
  return st.sent * std::exp(-static_cast<double>(now - st.sent_at) / p.sent_window_us);
}

void note_grant(AdaptiveState& st, Micros now, double permits, const AdaptiveParams& p) {
  st.sent = sent_rate(st, now, p) + permits * 1e6 / p.sent_window_us;
  if (now > st.sent_at) st.sent_at = now;
}

double effective_rate(AdaptiveState& st, double configured, Micros now, const AdaptiveParams& p) {
  if (st.w_max > 0 && now - st.last > p.forget_us && st.pause_until <= now) st.w_max = 0;
  if (!(st.w_max > 0)) return configured;
  if (now > st.last) {
    // The time since the last step counts only while the interface is asked for at least the curve.
    const Micros from = st.last > st.epoch ? st.last : st.epoch;
    if (now > from && demand(st, now) < curve(st, now, p)) st.epoch += now - from;
    st.last = now;
  }
  const double w = curve(st, now, p);
  if (w >= configured) {  // recovered: the rule's own rate again
    st.w_max = 0;
    return configured;
  }
  double rate = w;
  const double d = demand(st, now);
  if (rate > d) rate = d;
  const double fl = floor_rate(configured, p);
  if (rate < fl) rate = fl;
  return rate;
}

BucketParams effective_params(const BucketParams& configured, double rate) {
  BucketParams out = configured;
  if (configured.burst) out.burst = *configured.burst * rate / configured.rate;
  out.rate = rate;
  return out;
}

ThrottleResult on_throttle(AdaptiveState& st, double configured, Micros now, Micros pause_us, Micros jitter_us,
                           const AdaptiveParams& p) {
  ThrottleResult r;
  const double eff = effective_rate(st, configured, now, p);
  r.pause_until = st.pause_until;
  if (now - st.last_signal < p.debounce_us) return r;  // the same episode as the last cut
  st.last_signal = now;
  // The rate actually being sent: the effective rate, or what is asked for if that is less.
  double sent = eff;
  const double d = demand(st, now);
  if (d < sent) sent = d;
  const double measured = sent_rate(st, now, p);
  if (measured < sent) sent = measured > p.beta * sent ? measured : p.beta * sent;
  const double fl = floor_rate(configured, p);
  if (sent < fl) sent = fl;
  if (pause_us > 0) {
    if (pause_us > p.max_pause_us) pause_us = p.max_pause_us;
    const Micros until = now + pause_us + (jitter_us > 0 ? jitter_us : 0);
    if (until > st.pause_until) {
      st.pause_until = until;
      r.paused = true;
    }
  }
  st.w_max = sent;
  st.epoch = st.pause_until > now ? st.pause_until : now;  // the curve starts when sending may resume
  st.last = now;
  r.cut = true;
  r.from = sent;
  r.to = effective_rate(st, configured, now, p);
  r.pause_until = st.pause_until;
  return r;
}

bool adaptive_rested(const AdaptiveState& st, Micros now) {
  // The measured rate decayed to nothing (about 100 s after the last grant): what is left of it is
  // below half an ulp of a whole permit's share (0.5), so neither the next grant's sum nor a cut
  // sees it, and forgetting it decides as keeping it would (the Redis hash keeps it 10 minutes).
  return !(st.w_max > 0) && st.pause_until <= now && demand(st, now) == 0 && sent_rate(st, now) < 1e-20;
}

}  // namespace tollgate::limiter

#include "tollgate/limiter/three_color.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tollgate::limiter {

// Each arithmetic step below is one double operation in the order the header gives, so that a
// Lua 5.1 port with the same steps computes the same doubles.

std::string_view color_name(Color c) {
  switch (c) {
    case Color::green: return "green";
    case Color::yellow: return "yellow";
    case Color::red: break;
  }
  return "red";
}

namespace {

// The largest rate: one permit per microsecond.
constexpr double kMaxRate = 1e6;

// Searches stop here: whole microseconds up to 2^53 are exact in a double (and in Lua).
constexpr Micros kMaxSearch = Micros{1} << 53;

void check_rate(double v, const char* what) {
  if (!(v > 0) || !std::isfinite(v) || v > kMaxRate)
    throw std::invalid_argument(std::string(what) + " must be a finite number > 0 and <= 1e6 permits per second");
}

void check_size(double v, const char* what, bool zero_ok) {
  if (!std::isfinite(v) || (zero_ok ? !(v >= 0) : !(v > 0)))
    throw std::invalid_argument(std::string(what) + (zero_ok ? " must be a finite number >= 0" : " must be a finite number > 0"));
}

void check_cost(double cost) {
  if (!(cost > 0) || !std::isfinite(cost)) throw std::invalid_argument("cost must be a finite number > 0");
}

// The smallest dt in 1..kMaxSearch with reached(dt), given that reached(0) is false and that
// reached is monotone (false up to some dt, true from there on); kInfinite if none is. `guess`
// is a closed-form estimate: the search gallops from it to a bracket, then bisects, so a good
// guess costs two or three calls and a bad one (rounding at huge counts) about a hundred.
template <class Reached>
Micros first_micros(const Reached& reached, double guess) {
  Micros g;
  if (!(guess < static_cast<double>(kMaxSearch))) g = kMaxSearch;  // also a NaN guess
  else if (guess < 1.0) g = 1;
  else g = static_cast<Micros>(std::ceil(guess));
  Micros lo, hi;  // reached(lo) is false, reached(hi) is true
  if (reached(g)) {
    hi = g;
    Micros step = 1;
    for (;;) {
      if (hi - step <= 0) {
        lo = 0;
        break;
      }
      const Micros cand = hi - step;
      if (!reached(cand)) {
        lo = cand;
        break;
      }
      hi = cand;
      step = step * 2;
    }
  } else {
    lo = g;
    Micros step = 1;
    for (;;) {
      if (lo >= kMaxSearch - step) {
        if (!reached(kMaxSearch)) return kInfinite;
        hi = kMaxSearch;
        break;
      }
      const Micros cand = lo + step;
      if (reached(cand)) {
        hi = cand;
        break;
      }
      lo = cand;
      step = step * 2;
    }
  }
  while (hi - lo > 1) {
    const Micros mid = lo + (hi - lo) / 2;
    if (reached(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

// A time found from the state's `last` as a time from `now`.
Micros from_now(Micros last, Micros now, Micros dt) {
  if (dt == kInfinite) return kInfinite;
  const Micros gap = last > now ? last - now : 0;
  return saturating_add(gap, dt);
}

// ---- srTCM ----

// The update's arithmetic for dt > 0 microseconds.
void srtcm_refill(SrtcmState& st, const SrtcmParams& p, Micros dt) {
  const double scaled = p.cir * static_cast<double>(dt);
  const double added = scaled / 1e6;
  const double sum = st.tc + added;
  if (sum <= p.cbs) {
    st.tc = sum;
  } else {
    const double overflow = sum - p.cbs;
    st.tc = p.cbs;
    st.te = std::min(p.ebs, st.te + overflow);
  }
}

// The colour of an updated state, without taking anything.
Color srtcm_color(const SrtcmState& st, double cost, Color pre) {
  if (pre == Color::red) return Color::red;
  if (pre == Color::green && st.tc >= cost) return Color::green;
  if (st.te >= cost) return Color::yellow;
  return Color::red;
}

// Red at an updated state: when the same request would not be red.
Micros srtcm_retry_after(const SrtcmState& st, const SrtcmParams& p, double cost, Color pre, Micros now) {
  if (pre == Color::red) return kInfinite;
  bool can = false;
  double guess = static_cast<double>(kMaxSearch);
  if (pre == Color::green && cost <= p.cbs) {  // C reaching cost
    can = true;
    guess = std::min(guess, (cost - st.tc) * 1e6 / p.cir);
  }
  if (cost <= p.ebs) {  // E reaching cost: C fills to cbs first, then overflows into E
    can = true;
    guess = std::min(guess, (cost - st.te + p.cbs - st.tc) * 1e6 / p.cir);
  }
  if (!can) return kInfinite;
  const auto not_red = [&](Micros dt) {
    SrtcmState next = st;
    srtcm_refill(next, p, dt);
    return srtcm_color(next, cost, pre) != Color::red;
  };
  return from_now(st.last, now, first_micros(not_red, guess));
}

// Marks an updated state.
TcmDecision srtcm_decide(SrtcmState& st, const SrtcmParams& p, double cost, Color pre, Micros now) {
  TcmDecision d;
  d.color = srtcm_color(st, cost, pre);
  if (d.color == Color::green) st.tc = st.tc - cost;
  else if (d.color == Color::yellow) st.te = st.te - cost;
  else d.retry_after_us = srtcm_retry_after(st, p, cost, pre, now);
  d.tc_left = st.tc;
  d.te_or_tp_left = st.te;
  return d;
}

// ---- trTCM ----

void trtcm_refill(TrtcmState& st, const TrtcmParams& p, Micros dt) {
  const double elapsed = static_cast<double>(dt);
  const double p_scaled = p.pir * elapsed;
  const double p_added = p_scaled / 1e6;
  st.tp = std::min(p.pbs, st.tp + p_added);
  const double c_scaled = p.cir * elapsed;
  const double c_added = c_scaled / 1e6;
  st.tc = std::min(p.cbs, st.tc + c_added);
}

Color trtcm_color(const TrtcmState& st, double cost, Color pre) {
  if (pre == Color::red || st.tp < cost) return Color::red;
  if (pre == Color::yellow || st.tc < cost) return Color::yellow;
  return Color::green;
}

Micros trtcm_retry_after(const TrtcmState& st, const TrtcmParams& p, double cost, Color pre, Micros now) {
  if (pre == Color::red || cost > p.pbs) return kInfinite;
  const auto not_red = [&](Micros dt) {
    TrtcmState next = st;
    trtcm_refill(next, p, dt);
    return trtcm_color(next, cost, pre) != Color::red;
  };
  return from_now(st.last, now, first_micros(not_red, (cost - st.tp) * 1e6 / p.pir));
}

TcmDecision trtcm_decide(TrtcmState& st, const TrtcmParams& p, double cost, Color pre, Micros now) {
  TcmDecision d;
  d.color = trtcm_color(st, cost, pre);
  if (d.color == Color::green) {
    st.tp = st.tp - cost;
    st.tc = st.tc - cost;
  } else if (d.color == Color::yellow) {
    st.tp = st.tp - cost;
  } else {
    d.retry_after_us = trtcm_retry_after(st, p, cost, pre, now);
  }
  d.tc_left = st.tc;
  d.te_or_tp_left = st.tp;
  return d;
}

}  // namespace

// ---- srTCM ----

void validate_srtcm(const SrtcmParams& p) {
  check_rate(p.cir, "cir");
  check_size(p.cbs, "cbs", true);
  check_size(p.ebs, "ebs", true);
  if (!(p.cbs + p.ebs > 0)) throw std::invalid_argument("cbs + ebs must be > 0");
}

SrtcmState srtcm_full_state(const SrtcmParams& p, Micros now) { return {p.cbs, p.ebs, now}; }

void srtcm_update(SrtcmState& st, const SrtcmParams& p, Micros now) {
  if (now <= st.last) return;  // time never goes back
  srtcm_refill(st, p, now - st.last);
  st.last = now;
}

TcmDecision srtcm_mark(SrtcmState& st, const SrtcmParams& p, double cost, Micros now) {
  return srtcm_mark_aware(st, p, cost, Color::green, now);
}

TcmDecision srtcm_mark_aware(SrtcmState& st, const SrtcmParams& p, double cost, Color pre, Micros now) {
  check_cost(cost);
  srtcm_update(st, p, now);
  return srtcm_decide(st, p, cost, pre, now);
}

TcmDecision srtcm_wait_green(SrtcmState& st, const SrtcmParams& p, double cost, Micros timeout_us, Micros now) {
  return srtcm_wait_green_aware(st, p, cost, Color::green, timeout_us, now);
}

TcmDecision srtcm_wait_green_aware(SrtcmState& st, const SrtcmParams& p, double cost, Color pre,
                                   Micros timeout_us, Micros now) {
  check_cost(cost);
  srtcm_update(st, p, now);
  if (pre == Color::green && st.tc < cost && cost <= p.cbs) {
    const auto green = [&](Micros dt) {
      SrtcmState next = st;
      srtcm_refill(next, p, dt);
      return next.tc >= cost;
    };
    const Micros wait = from_now(st.last, now, first_micros(green, (cost - st.tc) * 1e6 / p.cir));
    if (wait != kInfinite && wait <= std::max<Micros>(0, timeout_us)) {
      st.tc = st.tc - cost;  // a debt: later updates refill it before anything reaches E
      TcmDecision d;
      d.color = Color::green;
      d.wait_us = wait;
      d.tc_left = st.tc;
      d.te_or_tp_left = st.te;
      return d;
    }
  }
  return srtcm_decide(st, p, cost, pre, now);
}

// ---- trTCM ----

void validate_trtcm(const TrtcmParams& p) {
  check_rate(p.cir, "cir");
  check_rate(p.pir, "pir");
  if (!(p.pir >= p.cir)) throw std::invalid_argument("pir must be >= cir");
  check_size(p.cbs, "cbs", false);
  check_size(p.pbs, "pbs", false);
}

TrtcmState trtcm_full_state(const TrtcmParams& p, Micros now) { return {p.cbs, p.pbs, now}; }

void trtcm_update(TrtcmState& st, const TrtcmParams& p, Micros now) {
  if (now <= st.last) return;  // time never goes back
  trtcm_refill(st, p, now - st.last);
  st.last = now;
}

TcmDecision trtcm_mark(TrtcmState& st, const TrtcmParams& p, double cost, Micros now) {
  return trtcm_mark_aware(st, p, cost, Color::green, now);
}

TcmDecision trtcm_mark_aware(TrtcmState& st, const TrtcmParams& p, double cost, Color pre, Micros now) {
  check_cost(cost);
  trtcm_update(st, p, now);
  return trtcm_decide(st, p, cost, pre, now);
}

TcmDecision trtcm_wait_green(TrtcmState& st, const TrtcmParams& p, double cost, Micros timeout_us, Micros now) {
  return trtcm_wait_green_aware(st, p, cost, Color::green, timeout_us, now);
}

TcmDecision trtcm_wait_green_aware(TrtcmState& st, const TrtcmParams& p, double cost, Color pre,
                                   Micros timeout_us, Micros now) {
  check_cost(cost);
  trtcm_update(st, p, now);
  if (pre == Color::green && (st.tc < cost || st.tp < cost) && cost <= p.cbs && cost <= p.pbs) {
    const auto green = [&](Micros dt) {
      TrtcmState next = st;
      trtcm_refill(next, p, dt);
      return next.tp >= cost && next.tc >= cost;
    };
    const double guess_c = (cost - st.tc) * 1e6 / p.cir;
    const double guess_p = (cost - st.tp) * 1e6 / p.pir;
    const Micros wait = from_now(st.last, now, first_micros(green, std::max(guess_c, guess_p)));
    if (wait != kInfinite && wait <= std::max<Micros>(0, timeout_us)) {
      st.tp = st.tp - cost;  // debts: later updates refill them
      st.tc = st.tc - cost;
      TcmDecision d;
      d.color = Color::green;
      d.wait_us = wait;
      d.tc_left = st.tc;
      d.te_or_tp_left = st.tp;
      return d;
    }
  }
  return trtcm_decide(st, p, cost, pre, now);
}

}  // namespace tollgate::limiter

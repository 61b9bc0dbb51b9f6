#include "tollgate/limiter/adaptive_rate.hpp"

#include <cmath>

namespace tollgate::limiter {

// Every step below is mirrored in Lua (src/store/lua/adaptive_lib.lua and adapt.lua) with the
// same operations in the same order, so that both stores compute the same doubles.

const char* adaptive_name(Adaptive a) {
  switch (a) {
    case Adaptive::on: return "on";
    case Adaptive::shadow: return "shadow";
    case Adaptive::off: break;
  }
  return "off";
}

std::uint64_t caller_id(std::string_view caller) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a
  for (const char c : caller) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  h &= (std::uint64_t{1} << 53) - 1;
  return h == 0 ? 1 : h;
}

double floor_rate(double configured, const AdaptiveParams& p) {
  double f = configured * p.floor_share;
  if (f < p.min_floor) f = p.min_floor;
  if (f > configured) f = configured;
  return f;
}

namespace {
// The seconds the counts are kept by: the supplier's windows once the fleet learned where they
// start (a fixed window's allowance is what it admitted in one of them), else the wall clock's.
// The shift moves the wall clock's by less than half a second either way, so that a second keeps
// its number (moved by 0.9 s, the window under way would be numbered the one before, and read
// as having admitted nothing).
Micros second_shift(const AdaptiveState& st) {
  if (!(st.windows.width > 0)) return st.phase;
  return st.phase + WindowPhase::nearest(-WindowPhase::middle(st.windows) - st.phase);
}

std::int64_t second_of(const AdaptiveState& st, Micros now) {
  return static_cast<std::int64_t>(std::floor(static_cast<double>(now + second_shift(st)) / 1e6));
}

// Moves the per-second counts on to `now`'s second.
void roll(AdaptiveState& st, Micros now) {
  const std::int64_t sec = second_of(st, now);
  if (sec <= st.sec) return;
  if (sec == st.sec + 1) {
    st.demand_prev = st.demand_cur;
    st.ok_prev = st.ok_cur;
  } else {
    st.demand_prev = 0;
    st.ok_prev = 0;
  }
  st.demand_cur = 0;
  st.ok_cur = 0;
  st.sec = sec;
}

// A count over the sliding second ending at `now`.
double sliding(const AdaptiveState& st, double cur, double prev, Micros now) {
  const std::int64_t sec = second_of(st, now);
  const double elapsed = static_cast<double>(now + second_shift(st) - sec * 1'000'000);
  const double left = (1e6 - elapsed) / 1e6;  // share of the previous second still in the window
  if (sec <= st.sec) return prev * left + cur;
  if (sec == st.sec + 1) return cur * left;
  return 0;
}

// The probe curve at `now`: the held rate until the epoch, then target (1 + probe x^3).
double curve(const AdaptiveState& st, Micros now, const AdaptiveParams& p) {
  double x = static_cast<double>(now - st.epoch) / 1e6;
  if (x < 0) x = 0;
  return st.target * (1 + p.probe * x * x * x);
}
}  // namespace

void note_demand(AdaptiveState& st, Micros now, double permits, std::uint64_t caller) {
  roll(st, now);
  st.demand_cur += permits;
  st.asked.note(caller, now);
}

double demand(const AdaptiveState& st, Micros now) { return sliding(st, st.demand_cur, st.demand_prev, now); }

void note_admitted(AdaptiveState& st, Micros now, double n, double before) {
  roll(st, now);
  st.ok_cur += n - before;
  st.ok_prev += before;
  st.since_ok += n;
}

double admitted(const AdaptiveState& st, Micros now) { return sliding(st, st.ok_cur, st.ok_prev, now); }

double admitted_per_window(const AdaptiveState& st, Micros now) {
  const std::int64_t sec = second_of(st, now);
  if (sec <= st.sec) return st.ok_cur > st.ok_prev ? st.ok_cur : st.ok_prev;
  if (sec == st.sec + 1) return st.ok_cur;
  return 0;
}

double effective_rate(AdaptiveState& st, double configured, Micros now, const AdaptiveParams& p) {
  if (st.target > 0 && now - st.last > p.forget_us && st.pause_until <= now) st.target = 0;
  if (!(st.target > 0)) return configured;
  if (now > st.last) {
    // The time since the last step counts only while the interface is asked for at least the curve.
    const Micros from = st.last > st.epoch ? st.last : st.epoch;
    if (now > from && demand(st, now) < curve(st, now, p)) st.epoch += now - from;
    st.last = now;
  }
  const double w = curve(st, now, p);
  if (w >= configured) {  // recovered: the rule's own rate again
    st.target = 0;
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

namespace {
// Nothing is sent before `pause_us` (capped, and `jitter_us`) from now, unless a pause runs longer.
void extend_pause(AdaptiveState& st, Micros now, Micros pause_us, Micros jitter_us, const AdaptiveParams& p,
                  ThrottleResult& r) {
  if (pause_us > p.max_pause_us) pause_us = p.max_pause_us;
  const Micros until = now + pause_us + (jitter_us > 0 ? jitter_us : 0);
  if (until > st.pause_until) {
    st.pause_until = until;
    r.paused = true;
  }
}
}  // namespace

// Longer than a function should be (about 140 lines): it is adapt.lua's body statement for
// statement, and the replay tests compare the two double for double; splitting it means splitting
// the script the same way, with it.
ThrottleResult on_throttle(AdaptiveState& st, double configured, Micros now, Micros pause_us, Micros jitter_us,
                           std::uint64_t caller, const AdaptiveParams& p) {
  ThrottleResult r;
  const double eff = effective_rate(st, configured, now, p);
  st.throttled.note(caller, now);
  r.pause_until = st.pause_until;
  if (now - st.last_signal < p.debounce_us) return r;  // the same episode as the last cut
  // Evidence: two callers throttled lately, or the throttled caller is the only one asking.
  const bool two = now - st.throttled.second_at < p.evidence_us;
  const bool alone = st.asked.first == caller && !(now - st.asked.second_at < p.evidence_us);
  if (!two && !alone) {
    r.unconfirmed = true;
    return r;
  }
  // Refused again within a second of the last cut, nothing admitted since: the window that refused
  // then had not turned when the pause ended (where the supplier's windows start not learned yet:
  // the pause ended on the wall clock's second). It says nothing of the allowance (read, it would
  // be the time since the cut, nearly all pause, and halve the rate): a pause again, no cut.
  if (st.since_ok == 0 && now - st.last_signal < p.unturned_us) {
    if (pause_us > 0) extend_pause(st, now, pause_us, jitter_us, p, r);
    r.pause_until = st.pause_until;
    return r;
  }
  const Micros previous = st.last_signal;
  st.last_signal = now;
  // The rate actually being sent: the effective rate, or what is asked for if that is less.
  double sent = eff;
  const double d = demand(st, now);
  if (d < sent) sent = d;
  // The estimate: what the supplier admitted in the fullest of the last two calendar seconds (a
  // sliding second across a fixed window's edge counts parts of two full windows: up to twice the
  // allowance; a calendar second counts one). After a recent cut: probing
  // above the level that cut estimated, that reading, bounded by the level and by what the
  // supplier admitted since (below); throttled at or under it, the allowance dropped, and what it
  // admitted a second since that cut says to what. A pause counts in that time for up to a second
  // (the supplier's allowance refilled meanwhile and was spent after it), not beyond (a bucket
  // fills once).
  double estimate = admitted_per_window(st, now);
  double cut_from = sent;  // one cut goes no lower than max_cut of this
  const bool recent = now - previous < p.recent_us;
  if (recent) {
    const bool probing = sent > st.level;
    Micros start = previous;
    if (st.pause_until - 1'000'000 > start && st.pause_until < now) start = st.pause_until - 1'000'000;
    const double elapsed = static_cast<double>(now - start) / 1e6;
    if (probing) {
      // A token bucket's burst (refilled in a pause or a hold) lets a probe through above the
      // allowance for a while, at most a second's worth: unless more than that went through above
      // the level since the last cut, one refused probe raises the level by at most a quarter...
      const double above = st.since_ok - st.level * elapsed;
      if (above > st.level) {
        if (estimate < st.level) estimate = st.level;
      } else {
        const double most = st.level * p.probe_gain;
        if (estimate > most) estimate = most;
        // A reading so bounded is of the level, not a lag: the cut may go below half the rate sent,
        // to the level (or the busy average below it, see `least`). A token bucket's refilled
        // burst lets a probe climb to two or three times the allowance first: half of 35.4/s held
        // a 12/s supplier's cut at 16.8/s.
        if (st.level > 0) cut_from = estimate;
        // ...and, when the supplier was kept busy since the last cut (it admitted at least three
        // quarters of the level a second: not a quiet spell, whose average says nothing), a
        // reading well above that average is that burst: the bucket was empty at both refusals,
        // and what it admitted in between is its allowance. A fixed window's reading is within a
        // few percent of that average over the time it was sent to (the hold was just under it;
        // a pause, when its windows had nothing to give, is left out).
        const double since = st.since_ok / elapsed;
        const bool busy = since >= (1 - p.same_level) * st.level;
        const Micros paused_to = st.pause_until < now ? st.pause_until : now;
        const Micros paused = paused_to > start ? paused_to - start : 0;
        const double sending = static_cast<double>(now - start - paused) / 1e6;
        if (busy && sending > 0 && estimate > st.since_ok / sending * p.drained) estimate = since;
        // No lower than the level, unless that (busy) average is lower too: a fixed window's
        // reading under the level says the level was read high (held above the allowance, it
        // stayed).
        const double least = busy && since < st.level ? since : st.level;
        if (estimate < least) estimate = least;
      }
    } else if (now - start >= p.debounce_us) {
      // No more than the window that refused admitted: a fixed-window supplier's new allowance at
      // once (the admissions since the last cut still count the old one's windows).
      double since = st.since_ok / elapsed;
      // ...but no less than the window that refused has admitted so far: the time since the cut
      // includes the pause to the next window, through which a fixed window had nothing left to
      // give (12/s read 9.8/s).
      const double window = second_of(st, now) == st.sec ? st.ok_cur : 0;
      if (window > since) since = window;
      if (since < estimate) estimate = since;
    }
  }
  st.since_ok = 0;
  if (estimate > sent) estimate = sent;
  const double lowest = p.max_cut * cut_from;
  if (estimate < lowest) estimate = lowest;
  // The same level refused again soon after: probe less often. A reading above the level takes
  // the mean of the two (a small real rise is still followed, over a few probes); one under it
  // refutes the level and stands (averaged with the refuted level, a drop from 20 to 12/s first
  // read as 15.6 was held at 12.9, then 12.1, and refused again at each).
  Micros hold = p.hold_min_us;
  if (st.level > 0 && recent && std::fabs(estimate - st.level) <= p.same_level * st.level) {
    hold = st.hold_us * 2;
    if (hold < p.hold_min_us) hold = p.hold_min_us;
    if (estimate > st.level) {
      estimate = (estimate + st.level) / 2;
      if (estimate > sent) estimate = sent;
      if (estimate < lowest) estimate = lowest;
    }
    // A refused probe costs about one request, and a cycle is the hold and the second the probe
    // takes to cross the level: so that a steady level is refused no more than `probe_cost` of
    // what is sent, one under 10/s is held longer than 3 s (7 s at 5/s, 9 s at 4/s: with 3 s,
    // 4/s was refused 5.9% of the time), up to `hold_most_us` (10 s: under 4/s the share grows
    // again, 4% at 2/s). A rise at such a level is found that much later.
    Micros most = p.hold_max_us;
    if (estimate > 0) {
      const double spaced = 1e6 / (p.probe_cost * estimate) - 1e6;
      if (spaced > static_cast<double>(p.hold_most_us)) {
        if (p.hold_most_us > most) most = p.hold_most_us;
      } else if (spaced > static_cast<double>(most)) {
        most = static_cast<Micros>(spaced);
      }
    }
    if (hold > most) hold = most;
  }
  double target = p.margin * estimate;
  const double fl = floor_rate(configured, p);
  if (target < fl) target = fl;
  st.level = estimate;
  st.hold_us = hold;
  if (pause_us > 0) extend_pause(st, now, pause_us, jitter_us, p, r);
  st.target = target;
  st.epoch = (st.pause_until > now ? st.pause_until : now) + hold;  // probing starts after the hold
  st.last = now;
  r.cut = true;
  r.from = sent;
  r.to = effective_rate(st, configured, now, p);
  r.pause_until = st.pause_until;
  return r;
}

bool adaptive_rested(const AdaptiveState& st, Micros now, const AdaptiveParams& p) {
  // Nothing counted in the sliding second, no caller inside the evidence window, no cut recent
  // enough to lengthen the next hold or to count admissions since (since_ok): forgetting it
  // decides as keeping it would (the Redis hash keeps it 10 minutes).
  return !(st.target > 0) && st.pause_until <= now && demand(st, now) == 0 && admitted(st, now) == 0 &&
         !(now - st.asked.first_at < p.evidence_us) && !(now - st.throttled.first_at < p.evidence_us) &&
         !(now - st.last_signal < p.recent_us) && !advert_live(st.adv, now);
}

}  // namespace tollgate::limiter

// Where a supplier's one-second windows start, learned from when it refuses and when it admits
// again: the pause after a refusal ends where the supplier's next window begins, not at the wall
// clock's next whole second (a counter whose windows start at its first request, a clock a few
// hundred milliseconds off, the network's delay: the windows fall anywhere in the second).
//
// The evidence is a pair: a request the supplier refused, sent at r, then the first one it admitted
// after it, sent at s (send times: the supplier sees them a one-way delay later, and so are the
// learned boundaries). Less than a second apart, a window began in (r, s]: an arc of the second.
// The windows start at the same point of every second, so each pair's arc holds it, and so does
// their intersection: a refusal near a window's end moves its start, a pause that ended late (its
// first request admitted) its end, and a pause that ended early (refused up to the boundary, then
// admitted) makes it narrow at once. The boundary is taken at the arc's middle. A pair whose arc
// misses the one held (the supplier restarted its windows, or it is a token bucket, whose refusals
// and admissions interleave anywhere) starts again from it. Pairs a second or more apart (a pause
// of its own, a quiet spell) say nothing. Two refusals less than a second apart with no admission
// between are one window's: the next starts after the second and within a second of the first, an
// arc as well (the pause after the first ended before the window turned). Until a first arc,
// windows are assumed to start on the wall clock's whole seconds.
//
// A fleet learns it together: each gateway tells the store the arcs it learned (with its next
// decision or throttle report), the store keeps the intersection of every gateway's arcs (merge(),
// on its own clock; both are told relative to now, so the gateways' clocks need not agree), and
// the gateway adopts the fleet's arc from the reply.
//
// Pure arithmetic on wall-clock microseconds; the gateway keeps one per adaptive bucket
// (BucketMetrics), fed by its own answers and its store's replies.
#pragma once

#include <cstdint>
#include <utility>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

class WindowPhase {
 public:
  static constexpr Micros kWindowUs = 1'000'000;

  // The supplier refused a request sent at `sent`. Less than a second after a refusal not yet
  // followed by an admission, that is in the same window: the next one starts within a second of
  // the first (an arc, as a pair's, kept for take_pair); true when that taught a boundary.
  bool note_refused(Micros sent);
  // It admitted one sent at `sent`; true when that taught a boundary (a pair, kept for take_pair).
  bool note_admitted(Micros sent);
  // The latest pair not yet told to the store, its arc as (start, width) of the second; width 0:
  // none. Taken once.
  struct Arc {
    Micros start = 0;
    Micros width = 0;
  };
  Arc take_pair() { return std::exchange(pair_, Arc{}); }
  // The store's arc (the fleet's, from its reply), replacing this one (width 0: nothing learned
  // yet, this one stays).
  void adopt(Arc fleet) {
    if (fleet.width > 0) arc_ = fleet;
  }
  // An arc's middle, where the windows are taken to start (0 to 999,999 us).
  static Micros middle(Arc a) { return within_second(a.start + (a.width + 1) / 2); }
  // Where `t` falls in the second, 0 to 999,999 us.
  static Micros within_second(Micros t);
  // `t` moved by whole seconds to within half a second of 0 (-500,000 to 499,999 us): a shift of a
  // clock's seconds that keeps the second under way its number.
  static Micros nearest(Micros t) { return within_second(t + kWindowUs / 2) - kWindowUs / 2; }
  // An arc (from `from`, `gap` long) merged into `held`: their overlap, or the new one alone when
  // it misses the held one (or none is held). The same for a gateway's own pairs and a store's
  // arc of the fleet's; false when `gap` says nothing (not inside one window).
  static bool merge(Arc& held, Micros from, Micros gap);
  // A store's side: a gateway's pair `told` relative to `now` (its start that far past now's
  // point of the second) merged into the fleet's arc `held` (on the store's clock); returns the
  // fleet's arc relative to `now` (width 0: none learned).
  static Arc share(Arc& held, Micros now, Arc told);
  // Between a clock and "relative to now": an arc told to or by a store.
  static Arc relative(Arc a, Micros now) { return {within_second(a.start - now), a.width}; }
  static Arc absolute(Arc a, Micros now) { return {within_second(a.start + now), a.width}; }
  // Whether a refusal waits for the admission after it (a lock-free look before note_admitted).
  bool waiting() const { return refused_ != kNone; }
  bool learned() const { return arc_.width > 0; }
  // Where in the second the windows start (0 to 999,999 us; 0 until learned): the arc's middle.
  Micros phase() const;
  // The arc that holds it: from `arc_start()` (excluded), `arc_width()` long (0: not learned).
  Micros arc_start() const { return arc_.start; }
  Micros arc_width() const { return arc_.width; }
  // The time from `now` to the next window's start (0 < result <= 1 s).
  Micros until_next(Micros now) const { return next_after(now) - now; }
  // The next window's start after `t` (a refusal's send time: the window that refused ends then).
  // Inside the arc, the middle of the arc's rest after `t`: a window's start is never assumed a
  // second off when it may be a moment away.
  Micros next_after(Micros t) const;

 private:
  static constexpr Micros kNone = -1;
  Micros refused_ = kNone;  // the latest refusal's send time not yet followed by an admission
  Arc arc_;                 // the arc (start, start + width] of the second holds the boundary
  Arc pair_;                // the latest pair's arc, until taken
};

}  // namespace tollgate::limiter

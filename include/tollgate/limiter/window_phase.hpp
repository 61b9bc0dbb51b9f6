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
// of its own, a quiet spell) say nothing. Until a first pair, windows are assumed to start on the
// wall clock's whole seconds.
//
// Pure arithmetic on wall-clock microseconds; the gateway keeps one per adaptive bucket
// (BucketMetrics), fed by its own answers.
#pragma once

#include <cstdint>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

class WindowPhase {
 public:
  static constexpr Micros kWindowUs = 1'000'000;

  // The supplier refused a request sent at `sent`.
  void note_refused(Micros sent);
  // It admitted one sent at `sent`; true when that taught a boundary.
  bool note_admitted(Micros sent);
  // Whether a refusal waits for the admission after it (a lock-free look before note_admitted).
  bool waiting() const { return refused_ != kNone; }
  bool learned() const { return width_ > 0; }
  // Where in the second the windows start (0 to 999,999 us; 0 until learned): the arc's middle.
  Micros phase() const;
  // The arc that holds it: from `arc_start()` (excluded), `arc_width()` long (0: not learned).
  Micros arc_start() const { return start_; }
  Micros arc_width() const { return width_; }
  // The time from `now` to the next window's start (0 < result <= 1 s).
  Micros until_next(Micros now) const { return next_after(now) - now; }
  // The next window's start after `t` (a refusal's send time: the window that refused ends then).
  // Inside the arc, the middle of the arc's rest after `t`: a window's start is never assumed a
  // second off when it may be a moment away.
  Micros next_after(Micros t) const;

 private:
  static constexpr Micros kNone = -1;
  Micros refused_ = kNone;  // the latest refusal's send time not yet followed by an admission
  Micros start_ = 0;        // the arc (start_, start_ + width_] of the second holds the boundary
  Micros width_ = 0;
};

}  // namespace tollgate::limiter

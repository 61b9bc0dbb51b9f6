// The allowance a supplier advertises: what its rate-limit fields (RateLimit, X-RateLimit-*, ...:
// proxy/upstream_signal's read_advert) say is left of its current window, followed by an adaptive
// bucket so that it sends no more than that before the window ends, spread over the time left
// rather than in a burst. Pure arithmetic on a state struct, like adaptive_rate.hpp: no I/O, no
// clock reads; times are whole microseconds on the store's clock. The Redis store runs the same
// steps in Lua (src/store/lua/adaptive_lib.lua), replayed against this one double for double.
//
// Counting: the store counts the permits it grants for the bucket (`granted`, the fleet's in a
// shared store), and each decision reports that count to its request. An answer's fields are the
// supplier's count right after that request, so what is left now is the advertised `left` less
// every permit granted since (some of them may not have reached the supplier yet: counting them is
// the safe side). The newest report wins (the higher count); within one window the remaining only
// falls, so a report that says more is left than is known starts a new window, and one that says
// less keeps the earlier reset (a supplier rounding its reset up to whole seconds makes the later
// reports' resets later than the window's end).
//
// A grant whose slot is at or after the window's end (held across it) counts in the next window,
// not in this one. When a window ends with no newer report, the next one is assumed to give
// `limit` over `window` when the supplier said both, less what was granted into it already. Without them the advertisement lapses, and only the bucket's own
// rate (and the adaptive rate's cuts) apply. Ten minutes after the last window ended with nobody
// asking, the assumed ones lapse too.
#pragma once

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

// Windows are assumed to follow each other this long after the last one ended, no longer.
inline constexpr Micros kAdvertForgetUs = 600'000'000;

struct Advertised {
  Micros reset = 0;    // the advertised window's end (0: nothing advertised)
  double left = 0;     // permits the supplier admits before `reset`, counted from grant `seq` on
  double seq = 0;      // the grant count `left` is as of
  double limit = 0;    // the supplier's allowance per window (0: not said)
  Micros window = 0;   // its window's length (0: not said)
  double granted = 0;  // permits granted by the bucket so far
  double ahead = 0;    // of those since `seq`, the ones whose slots are at or after `reset`
};

// One answer's fields, as a gateway reports them to the store.
struct AdvertReport {
  double seq = 0;       // the grant count the store reported to the request it answered
  double left = 0;      // the supplier's remaining after that request (>= 0)
  Micros reset_in = 0;  // from the report to the window's end (>= 0)
  double limit = 0;     // 0: not said
  Micros window = 0;    // 0: not said
};

// What the advertisement allows a request of `permits` at `now`.
struct AdvertLimit {
  double rate = 0;          // the pace, permits a second (0: no cap)
  Micros closed_until = 0;  // no permit before this (0: none): the window is used up
};

// Takes a report in (see the counting rules above); an older one than what is known is dropped.
void note_advert(Advertised& a, Micros now, const AdvertReport& r);
// Moves a passed window on (see above); then what is left, spread over the time from `from` (the
// bucket's first free slot, or now if later) to the reset, and whether the request must wait for a
// later window: the next when it has room for the request beside the permits already granted into
// it (a limit being said), else the one after. A bucket whose queue reaches the reset is paced at
// the next window's rate.
AdvertLimit advert_limit(Advertised& a, Micros now, double permits, Micros from);
// Counts a grant of `permits` whose slot (when its request goes) is `slot`.
void advert_granted(Advertised& a, double permits, Micros slot);
// Whether the state still says anything at `now` (a window not yet over, or one whose successors
// are known).
bool advert_live(const Advertised& a, Micros now);

}  // namespace tollgate::limiter

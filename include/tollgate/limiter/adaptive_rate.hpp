// Adaptive rate: a bucket's effective rate follows the upstream's throttling. Pure arithmetic on a
// state struct, like token_bucket.hpp: no I/O, no clock reads, no locks; times are whole
// microseconds on the caller's clock (Redis time in the Redis store, which runs the same steps in
// Lua: src/store/lua/adaptive_lib.lua).
//
// A supplier's allowance is a number it enforces, not a capacity to discover: what it let through
// when it throttles is an estimate of it (its answers other than throttles, which the gateways
// report), in the fullest calendar second of the last two (a fixed window's allowance exactly: the
// window that refused is full; the seconds are the wall clock's, see AdaptiveState::phase). While
// the gateway was sending above the level the last cut estimated, that reading (at most a quarter
// more than the level unless over a second's worth went through above it since the last cut; and,
// when the supplier was kept busy since that cut, a reading so bounded that is a fifth above the
// average admitted since, over the time sent to, is a token bucket's burst, refilled in the hold
// and drained by the probe: the average, which is the bucket's allowance between two refusals, is
// taken instead; never less than the level unless that busy average is less too: a fixed window's
// full window under the level says the level was read high). When it throttles at or under that
// level, the allowance dropped, and what it admitted a second since that cut says to what (a pause
// counted for at most a second: a bucket fills once), or the calendar second's reading if less, but
// no less than the window that refused has admitted so far. A throttle backed by evidence that the
// interface, not one caller, is over its allowance cuts the rate to `margin` (0.95) of the
// estimate, never more than halving it at once (the estimate may lag; but after a refused probe
// that found no rise, the level, or the busy average below it, is no lag, and the cut may go that
// far), and holds it there for a while (0.5 s, doubled each time the same level is refused again
// soon after, up to 3 s, or under 10/s up to 1 / (probe_cost x level) s less one, at most 10 s: a
// refused probe costs about one request, so a steady level is refused about probe_cost of what is
// sent, down to 4/s; a probe that reads the same level again, above it, takes the mean of the two
// estimates; a throttle under the level refutes it, and its reading stands). Then it probes upward
// on T (1 + probe x^3), x the seconds since probing began: flat near the held rate for a second (a
// probe that finds the allowance unchanged costs a few refusals), steep after (a risen allowance is
// reached within a few seconds). Reaching the configured rate ends the adaptation. Never below the
// floor, never above the configured rate, and while the interface is asked for less than the curve,
// the curve does not advance.
//
// Evidence: throttles for two different callers within `evidence_us`, or a throttled caller that is
// the only one who asked in that time (there is nobody else to protect). One caller's own throttles
// (its per-user quota, its bad credentials) among others' successes change nothing.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

#include "tollgate/limiter/advertised.hpp"
#include "tollgate/limiter/token_bucket.hpp"
#include "tollgate/limiter/window_phase.hpp"

namespace tollgate::limiter {

// A rule's adaptive setting: off (the default), on (the effective rate applies), shadow (the
// state follows the signals and is shown, decisions use the configured rate).
enum class Adaptive : std::uint8_t { off, on, shadow };
const char* adaptive_name(Adaptive a);

struct AdaptiveParams {
  double margin = 0.95;          // a cut holds at this share of the estimated allowance
  double max_cut = 0.5;          // ...but one cut goes no lower than this share of the rate being sent
                                 // (after a refused probe that found no rise: the level instead)
  double probe = 0.05;           // the probe: target * (1 + probe * x^3), x in seconds
  double probe_gain = 1.25;      // a refused probe raises the level by at most this factor...
  double drained = 1.2;          // ...and reads the average since the last cut if this far above it
  Micros debounce_us = 500'000;  // a second signal within this of the last cut is the same episode
  Micros unturned_us = 1'000'000;  // ...and one within this, nothing admitted since, its window's end
  Micros evidence_us = 2'000'000;  // throttles of two callers within this, or only one caller asking
  Micros hold_min_us = 500'000;    // the hold after a cut before probing...
  Micros hold_max_us = 3'000'000;  // ...doubled up to this while the same level is refused again,
  double probe_cost = 0.025;       // ...or, under 10/s, to 1 / (probe_cost x level) s less one
  Micros hold_most_us = 10'000'000;  // ...but never beyond this: with the pause before it and the
                                     // probe after it, the next cut is still recent (pauses < ~17 s)
  double same_level = 0.25;        // estimates within this share of each other are the same level
  Micros recent_us = 30'000'000;   // ...when the cuts are this close
  Micros max_pause_us = 60'000'000;  // Retry-After and RateLimit t are capped here
  double floor_share = 0.02;     // the floor: this share of the configured rate...
  double min_floor = 0.1;        // ...but at least this many permits a second (or the configured rate)
  Micros forget_us = 600'000'000;  // an adaptation nobody asked through for this long is over
};

inline constexpr Micros kNever = std::numeric_limits<Micros>::min() / 2;

// The two most recent different callers of a kind of event, and when each last had one: whether
// two callers had one within a window is `second_at` inside it. Caller ids are below 2^53 (exact
// as doubles, in Lua too).
struct CallerPair {
  std::uint64_t first = 0;      // the caller of the most recent event
  Micros first_at = kNever;
  std::uint64_t second = 0;     // the most recent other caller
  Micros second_at = kNever;
  void note(std::uint64_t caller, Micros now) {
    if (caller != first) {
      second = first;
      second_at = first_at;
      first = caller;
    }
    first_at = now;
  }
};

struct AdaptiveState {
  double target = 0;           // the held rate (0: not adapting, the configured rate applies)
  Micros epoch = 0;            // x = 0 of the probe (moved on while the interface asks for less)
  Micros last = 0;             // when the curve was last advanced
  Micros last_signal = kNever; // the last signal that cut (debounce)
  Micros pause_until = 0;      // nothing is sent before this
  // Per whole second of this clock: requests arriving, and the supplier's answers reported (its
  // admissions: answers other than throttles), this second and the previous one (a sliding second
  // is read from both).
  std::int64_t sec = 0;
  // Where this clock's whole seconds fall: a second is floor((t + phase) / 1 s), so that they are
  // the wall clock's (a fixed-window supplier counts calls per calendar second). 0 in Redis, whose
  // TIME is the wall clock, and on a manual clock; the in-process store sets its steady clock's.
  Micros phase = 0;
  double demand_cur = 0, demand_prev = 0;
  double ok_cur = 0, ok_prev = 0;
  double since_ok = 0;         // admissions reported since the last cut
  double level = 0;            // the allowance estimated at the last cut
  Micros hold_us = 0;          // the hold that cut began
  CallerPair asked;            // callers of arrivals
  CallerPair throttled;        // callers of throttles heard
  Advertised adv;              // what the supplier's fields say is left (limiter/advertised.hpp)
  // Where the supplier's windows start, the fleet's arc on this clock (WindowPhase::share): once
  // learned, the seconds above are the supplier's windows, not the wall clock's.
  WindowPhase::Arc windows;
};

// A caller id for an address (or any text): 53 bits of a hash, never 0 (0 is "no caller").
std::uint64_t caller_id(std::string_view caller);

double floor_rate(double configured, const AdaptiveParams& p = {});
// Counts `permits` arriving at `now` from `caller`.
void note_demand(AdaptiveState& st, Micros now, double permits, std::uint64_t caller = 0);
// Requests a second the interface is asked for at `now`: the previous second's count weighted by
// the share of it still inside the last second, plus this second's (a sliding window).
double demand(const AdaptiveState& st, Micros now);
// Counts `n` answers of the supplier that were not throttles (reported by a gateway at `now`: each
// gateway counts them and sends its count with its next decision for the bucket).
// `before` of them were heard in an earlier second (the last answers of a second are told with the
// next second's first decision): they count in the previous second.
void note_admitted(AdaptiveState& st, Micros now, double n, double before = 0);
// What the supplier let through over the sliding second.
double admitted(const AdaptiveState& st, Micros now);
// What the supplier let through in the fuller second of the two ending at `now` (this one so far,
// and the one before; its windows once learned, else calendar seconds): a fixed-window supplier's
// allowance exactly, whenever it refuses (the window that refused is full, the one before held no
// more); a token bucket's admissions over the last whole second.
double admitted_per_window(const AdaptiveState& st, Micros now);
// The effective rate at `now` (after note_demand for the request being decided). Advances the
// curve (or holds it while demand is below it) and ends the adaptation once it reaches `configured`.
double effective_rate(AdaptiveState& st, double configured, Micros now, const AdaptiveParams& p = {});
// A bucket's params at an effective rate: the rate, and an explicit burst scaled with it (an unset
// burst is one second of permits and follows the rate by itself). Warm-up buckets do not adapt.
BucketParams effective_params(const BucketParams& configured, double rate);

struct ThrottleResult {
  bool cut = false;        // the rate was cut now
  bool unconfirmed = false;  // not cut for want of evidence (one caller's throttles among others')
  double from = 0;         // the rate being sent when it came
  double to = 0;           // the rate right after the cut
  bool paused = false;     // a pause began (or was extended) now
  Micros pause_until = 0;  // when it ends
};
// A throttle signal from the upstream at `now`, for a request of `caller`. `pause_us`: its
// Retry-After or RateLimit t (0: none), capped at max_pause_us; `jitter_us` is added to a pause so
// that a fleet does not resume in step. The signal is always counted (the estimate and the
// evidence); it cuts when it is not within the debounce of the last cut and the evidence holds.
// Then the rate being sent is the effective rate, or the demand if less; the estimate (above),
// no more than the rate being sent and no less than max_cut of it (but for a refused probe that
// found no rise, floored by the level instead); the rate is held at margin times the estimate.
ThrottleResult on_throttle(AdaptiveState& st, double configured, Micros now, Micros pause_us, Micros jitter_us,
                           std::uint64_t caller = 0, const AdaptiveParams& p = {});
// Whether a state holds nothing (not adapting, no pause ahead, nothing counted in the last
// seconds, no caller inside the evidence window, no cut recent enough to lengthen a hold): it
// decides as a missing one.
bool adaptive_rested(const AdaptiveState& st, Micros now, const AdaptiveParams& p = {});

}  // namespace tollgate::limiter

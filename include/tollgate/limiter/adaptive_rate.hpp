// Adaptive rate: a bucket's effective rate follows the upstream's throttling. Pure
// arithmetic on a state struct, like token_bucket.hpp: no I/O, no clock reads, no locks; times are
// whole microseconds on the caller's clock (Redis time in the Redis store, which runs the same
// steps in Lua: src/store/redis_scripts.hpp).
//
// The curve is CUBIC (RFC 9438) as the AWS SDKs' adaptive retry mode uses it for request rates:
// a throttle signal records the rate actually being sent, w_max, and the rate drops to
// beta * w_max; from then on the rate is W(t) = C (t - K)^3 + w_max with K = cbrt(w_max (1 - beta) / C),
// which climbs back quickly, flattens around w_max (where the last throttle came) and then probes
// above it. Once W reaches the configured rate the bucket is back to its rule. Never below the
// floor, never above the configured rate, and while the interface is asked for less than W the
// curve does not advance: it never grows past what it was asked for without a throttle to say so.
#pragma once

#include <cstdint>
#include <limits>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

// A rule's adaptive setting: off (the default), on (the effective rate applies), shadow (the
// state follows the signals and is shown, decisions use the configured rate).
enum class Adaptive : std::uint8_t { off, on, shadow };
const char* adaptive_name(Adaptive a);

struct AdaptiveParams {
  double beta = 0.7;             // the multiplicative cut
  double c = 0.4;                // CUBIC's scaling constant (permits/s per s^3)
  Micros debounce_us = 500'000;  // a second signal within this of the last cut is the same episode
  Micros max_pause_us = 60'000'000;  // Retry-After and RateLimit t are capped here
  double floor_share = 0.02;     // the floor: this share of the configured rate...
  double min_floor = 0.1;        // ...but at least this many permits a second (or the configured rate)
  Micros forget_us = 600'000'000;  // an adaptation nobody asked through for this long is over
  double sent_window_us = 2e6;     // the time constant of the measured rate of grants
};

inline constexpr Micros kNever = std::numeric_limits<Micros>::min() / 2;

struct AdaptiveState {
  double w_max = 0;            // 0: not adapting, the configured rate applies
  Micros epoch = 0;            // t = 0 of the curve (moved on while the interface asks for less)
  Micros last = 0;             // when the curve was last advanced
  Micros last_signal = kNever; // the last signal that cut (debounce)
  Micros pause_until = 0;      // nothing is sent before this
  // Demand: requests arriving per second, counted in whole seconds of this clock.
  std::int64_t demand_sec = 0;
  double demand_cur = 0;       // this second's arrivals
  double demand_prev = 0;      // the previous second's
  // What is actually sent: grants a second, an exponentially weighted average (sent_window_us).
  double sent = 0;
  Micros sent_at = 0;
};

double floor_rate(double configured, const AdaptiveParams& p = {});
// Counts `permits` arriving at `now`.
void note_demand(AdaptiveState& st, Micros now, double permits);
// Requests a second the interface is asked for at `now`: the previous second's count weighted by
// the share of it still inside the last second, plus this second's (a sliding window).
double demand(const AdaptiveState& st, Micros now);
// Counts a grant of `permits` at `now`, and the measured rate of grants at `now`.
void note_grant(AdaptiveState& st, Micros now, double permits, const AdaptiveParams& p = {});
double sent_rate(const AdaptiveState& st, Micros now, const AdaptiveParams& p = {});
// The effective rate at `now` (after note_demand for the request being decided). Advances the
// curve (or holds it while demand is below it) and ends the adaptation once it reaches `configured`.
double effective_rate(AdaptiveState& st, double configured, Micros now, const AdaptiveParams& p = {});
// A bucket's params at an effective rate: the rate, and an explicit burst scaled with it (an unset
// burst is one second of permits and follows the rate by itself). Warm-up buckets do not adapt.
BucketParams effective_params(const BucketParams& configured, double rate);

struct ThrottleResult {
  bool cut = false;        // the rate was cut now (false: within the debounce of the last cut)
  double from = 0;         // the rate being sent when it came
  double to = 0;           // the rate right after the cut
  bool paused = false;     // a pause began (or was extended) now
  Micros pause_until = 0;  // when it ends
};
// A throttle signal from the upstream at `now`. `pause_us`: its Retry-After or RateLimit t (0:
// none), capped at max_pause_us; `jitter_us` is added to a pause so that a fleet does not resume
// in step. The rate being sent is the effective rate, or the demand if less, or the measured rate
// of grants if that is less still (a supplier's burst lets a rate through for a while that it does
// not allow: what went through over the last seconds, pauses included, says more), but not under
// beta times the other two (a measure that has not caught up after a quiet spell).
ThrottleResult on_throttle(AdaptiveState& st, double configured, Micros now, Micros pause_us, Micros jitter_us,
                           const AdaptiveParams& p = {});
// Whether a state holds nothing (not adapting, no pause ahead, no demand and no measured rate to
// remember): it decides as a missing one.
bool adaptive_rested(const AdaptiveState& st, Micros now);

}  // namespace tollgate::limiter

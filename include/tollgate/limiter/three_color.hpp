// Three-colour markers: the single-rate (RFC 2697, srTCM) and the two-rate (RFC 2698, trTCM)
// three-colour markers as pure arithmetic on a state struct, like token_bucket.hpp: no I/O, no
// clock reads, no locks. Times are whole microseconds on the caller's clock, token counts are
// permits (a request of cost B takes B permits, fractions kept) and rates are permits per second.
//
//   srTCM: bucket C (size CBS) fills at CIR; what would overflow it fills bucket E (size EBS).
//          Green takes from C, yellow from E, red takes nothing.
//   trTCM: bucket P (size PBS) fills at PIR, bucket C (size CBS) at CIR, each on its own.
//          Red when P lacks B; else yellow when C lacks B (takes from P); else green (takes from both).
//
// The RFCs add whole tokens on clock ticks; here the clock is continuous: an update after dt
// microseconds adds rate * dt / 1e6 permits at once. Time never goes back: an update at or before
// the state's `last` adds nothing and keeps `last`.
//
// Colour-blind marking is colour-aware marking with a green pre-colour (as in both RFCs); a red
// pre-colour is always red, a yellow one is never green.
//
// Waiting for green (the gateway's `"yellow": "wait"` mode): a request that is not green now but
// whose C (trTCM: C and P) would hold its cost within the caller's timeout is granted green with
// that wait and charged now, so C (and P) go negative. That debt is refilled first by later
// updates, so the next caller queues behind it exactly as in a pay_now token bucket; in the srTCM
// only what refills C above CBS overflows to E.
//
// Every step is written as one double operation in the order given, with no fused or
// reassociated forms and no long double, so that it can be ported literally to Lua 5.1 (whose
// numbers are doubles) and give bit-identical answers. This relies on the compiler not contracting
// a * b + c into a fused multiply-add: GCC's ISO mode (CMAKE_CXX_EXTENSIONS OFF, -std=c++20)
// defaults to -ffp-contract=off. Waits and retry times are searched in whole microseconds below
// 2^53 (about 285 years), where Lua's doubles count exactly; anything later is kInfinite.
#pragma once

#include <cstdint>
#include <string_view>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

enum class Color : std::uint8_t { green, yellow, red };

// "green", "yellow", "red".
std::string_view color_name(Color c);

// ---------------------------------------------------------------------------------------------
// Single-rate three-colour marker (RFC 2697).

struct SrtcmParams {
  double cir = 1.0;  // committed information rate, permits per second: finite, > 0, <= 1e6
  double cbs = 1.0;  // committed burst size (bucket C), permits: finite, >= 0
  double ebs = 0.0;  // excess burst size (bucket E), permits: finite, >= 0; cbs + ebs > 0

  bool operator==(const SrtcmParams&) const = default;
};

// Throws std::invalid_argument naming the first bad field. The functions below expect valid params.
void validate_srtcm(const SrtcmParams& p);

// The two meters keep separate state structs, each with the RFC's names for its buckets.
struct SrtcmState {
  double tc = 0;    // bucket C: at most cbs; below 0 only as the debt of held greens (wait mode)
  double te = 0;    // bucket E: 0..ebs
  Micros last = 0;  // the latest time the state was updated to; never goes back

  bool operator==(const SrtcmState&) const = default;
};

// A missing state is full: tc = cbs, te = ebs, last = now.
SrtcmState srtcm_full_state(const SrtcmParams& p, Micros now);

// Adds the permits of the time since `last` (nothing when now <= last), then last = now:
//   added = cir * dt / 1e6
//   if tc + added <= cbs: tc = tc + added
//   else: overflow = tc + added - cbs; tc = cbs; te = min(ebs, te + overflow)
// A negative tc (a debt) is therefore refilled first; only the part above cbs reaches E.
void srtcm_update(SrtcmState& st, const SrtcmParams& p, Micros now);

// ---------------------------------------------------------------------------------------------
// Two-rate three-colour marker (RFC 2698).

struct TrtcmParams {
  double cir = 1.0;  // committed information rate, permits per second: finite, > 0, <= 1e6
  double cbs = 1.0;  // committed burst size (bucket C), permits: finite, > 0
  double pir = 1.0;  // peak information rate, permits per second: finite, > 0, <= 1e6, >= cir
  double pbs = 1.0;  // peak burst size (bucket P), permits: finite, > 0

  bool operator==(const TrtcmParams&) const = default;
};

// Throws std::invalid_argument naming the first bad field. The functions below expect valid params.
void validate_trtcm(const TrtcmParams& p);

struct TrtcmState {
  double tc = 0;    // bucket C: at most cbs; below 0 only as the debt of held greens (wait mode)
  double tp = 0;    // bucket P: at most pbs; below 0 only as the debt of held greens (wait mode)
  Micros last = 0;  // the latest time the state was updated to; never goes back

  bool operator==(const TrtcmState&) const = default;
};

// A missing state is full: tp = pbs, tc = cbs, last = now.
TrtcmState trtcm_full_state(const TrtcmParams& p, Micros now);

// Adds the permits of the time since `last` (nothing when now <= last), then last = now:
//   tp = min(pbs, tp + pir * dt / 1e6); tc = min(cbs, tc + cir * dt / 1e6)
void trtcm_update(TrtcmState& st, const TrtcmParams& p, Micros now);

// ---------------------------------------------------------------------------------------------
// Decisions. Each function below first updates the state to `now` (the update is kept whatever
// the colour), then marks a request of `cost` permits (finite, > 0, else std::invalid_argument).
// Waits and retry times are counted from `now`; when `now` is before the state's `last` (a caller
// whose clock is behind the one that updated the state last), the gap up to `last` is included.
// Each is the first whole microsecond at which the update arithmetic above gives the answer
// (found by a short search over that same arithmetic, not by a closed form that may round apart).

struct TcmDecision {
  Color color = Color::red;
  // Green from a wait function: how long (us) the caller holds the request before sending it;
  // 0 when it is green at once. Always 0 for yellow and red, and for the marking functions.
  Micros wait_us = 0;
  // Red: whole microseconds from now (rounded up) until the same request, with the same
  // pre-colour, would no longer be red if nothing else arrived; kInfinite if it never can be
  // (a red pre-colour, or a cost above every bucket that could pass it). 0 for green and yellow.
  Micros retry_after_us = 0;
  // Bucket C after the decision (negative: the debt of held greens).
  double tc_left = 0;
  // After the decision: srTCM bucket E; trTCM bucket P (negative: the debt of held greens).
  double te_or_tp_left = 0;
};

// srTCM, colour-blind: green if tc >= cost (tc -= cost); else yellow if te >= cost (te -= cost);
// else red, nothing taken. retry_after is the earlier of tc reaching cost (needs cost <= cbs)
// and te reaching it (needs cost <= ebs; C must fill to cbs before E gets anything).
TcmDecision srtcm_mark(SrtcmState& st, const SrtcmParams& p, double cost, Micros now);

// srTCM, colour-aware: green if pre is green and tc >= cost (tc -= cost); else yellow if pre is
// green or yellow and te >= cost (te -= cost); else red. A yellow pre-colour's retry_after only
// counts te; a red pre-colour is always red with retry_after kInfinite.
TcmDecision srtcm_mark_aware(SrtcmState& st, const SrtcmParams& p, double cost, Color pre, Micros now);

// srTCM, waiting for green. Green now (tc >= cost): as srtcm_mark, wait 0. Otherwise, if
// cost <= cbs and tc would reach cost within timeout_us (from now; a negative timeout counts as
// 0): green with that wait, tc -= cost at once (a debt). Otherwise the colour-blind marking of the
// current state: yellow or red, as srtcm_mark.
TcmDecision srtcm_wait_green(SrtcmState& st, const SrtcmParams& p, double cost, Micros timeout_us, Micros now);

// srtcm_wait_green with a pre-colour: only a green pre-colour waits; a yellow or red one is marked
// as srtcm_mark_aware at once.
TcmDecision srtcm_wait_green_aware(SrtcmState& st, const SrtcmParams& p, double cost, Color pre,
                                   Micros timeout_us, Micros now);

// trTCM, colour-blind: red if tp < cost; else yellow if tc < cost (tp -= cost); else green
// (tp -= cost, tc -= cost). retry_after is the time until tp reaches cost (needs cost <= pbs).
TcmDecision trtcm_mark(TrtcmState& st, const TrtcmParams& p, double cost, Micros now);

// trTCM, colour-aware: red if pre is red or tp < cost; else yellow if pre is yellow or tc < cost
// (tp -= cost); else green (both -= cost). A red pre-colour's retry_after is kInfinite.
TcmDecision trtcm_mark_aware(TrtcmState& st, const TrtcmParams& p, double cost, Color pre, Micros now);

// trTCM, waiting for green. Green now: as trtcm_mark, wait 0. Otherwise, if cost <= cbs and
// cost <= pbs and both tc and tp would reach cost within timeout_us: green with the later of the
// two times as its wait, tp -= cost and tc -= cost at once (debts). Otherwise the colour-blind
// marking of the current state: yellow or red, as trtcm_mark.
TcmDecision trtcm_wait_green(TrtcmState& st, const TrtcmParams& p, double cost, Micros timeout_us, Micros now);

// trtcm_wait_green with a pre-colour: only a green pre-colour waits; a yellow or red one is marked
// as trtcm_mark_aware at once.
TcmDecision trtcm_wait_green_aware(TrtcmState& st, const TrtcmParams& p, double cost, Color pre,
                                   Micros timeout_us, Micros now);

}  // namespace tollgate::limiter

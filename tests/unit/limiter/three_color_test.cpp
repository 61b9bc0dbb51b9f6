// The three-colour markers (RFC 2697 srTCM, RFC 2698 trTCM) on a continuous clock, to the
// microsecond. Time is a plain variable: these tests never read a clock or sleep. Expected counts
// are written as the double operations the header gives, in its order, so they hold exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "tollgate/limiter/three_color.hpp"

namespace tollgate::limiter {
namespace {

constexpr Color G = Color::green;
constexpr Color Y = Color::yellow;
constexpr Color R = Color::red;

SrtcmParams sr(double cir, double cbs, double ebs) { return SrtcmParams{cir, cbs, ebs}; }
TrtcmParams tr(double cir, double cbs, double pir, double pbs) { return TrtcmParams{cir, cbs, pir, pbs}; }

// The message of the std::invalid_argument that f throws, or "" when it throws nothing.
template <class F>
std::string thrown(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// The state after a plain update to `at`, leaving `st` as it is.
SrtcmState sr_at(SrtcmState st, const SrtcmParams& p, Micros at) {
  srtcm_update(st, p, at);
  return st;
}
TrtcmState tr_at(TrtcmState st, const TrtcmParams& p, Micros at) {
  trtcm_update(st, p, at);
  return st;
}

// The colour a request would get at `at`, leaving `st` as it is.
Color sr_peek(SrtcmState st, const SrtcmParams& p, double cost, Color pre, Micros at) {
  return srtcm_mark_aware(st, p, cost, pre, at).color;
}
Color tr_peek(TrtcmState st, const TrtcmParams& p, double cost, Color pre, Micros at) {
  return trtcm_mark_aware(st, p, cost, pre, at).color;
}

TEST(ThreeColor, ColorNames) {
  EXPECT_EQ(color_name(G), "green");
  EXPECT_EQ(color_name(Y), "yellow");
  EXPECT_EQ(color_name(R), "red");
}

// ---- validation ----

TEST(ThreeColor, SrtcmValidation) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_NO_THROW(validate_srtcm(sr(10, 5, 10)));
  EXPECT_NO_THROW(validate_srtcm(sr(1e6, 0, 1)));  // the largest rate; cbs 0 with ebs > 0
  EXPECT_NO_THROW(validate_srtcm(sr(0.5, 1, 0)));  // ebs 0 with cbs > 0
  for (const double cir : {0.0, -1.0, nan, inf, 1e6 + 1})
    EXPECT_NE(thrown([&] { validate_srtcm(sr(cir, 5, 10)); }).find("cir must be"), std::string::npos) << cir;
  for (const double cbs : {-1.0, nan, inf})
    EXPECT_NE(thrown([&] { validate_srtcm(sr(10, cbs, 10)); }).find("cbs must be"), std::string::npos) << cbs;
  for (const double ebs : {-0.5, nan, inf})
    EXPECT_NE(thrown([&] { validate_srtcm(sr(10, 5, ebs)); }).find("ebs must be"), std::string::npos) << ebs;
  EXPECT_EQ(thrown([] { validate_srtcm(sr(10, 0, 0)); }), "cbs + ebs must be > 0");
}

TEST(ThreeColor, TrtcmValidation) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_NO_THROW(validate_trtcm(tr(10, 5, 20, 10)));
  EXPECT_NO_THROW(validate_trtcm(tr(1e6, 1, 1e6, 1)));  // pir == cir, the largest rate
  EXPECT_NO_THROW(validate_trtcm(tr(10, 50, 20, 10)));  // cbs above pbs is allowed
  for (const double cir : {0.0, -1.0, nan, inf, 1e6 + 1})
    EXPECT_NE(thrown([&] { validate_trtcm(tr(cir, 5, 1e6, 10)); }).find("cir must be"), std::string::npos) << cir;
  for (const double pir : {0.0, -1.0, nan, inf, 2e6})
    EXPECT_NE(thrown([&] { validate_trtcm(tr(10, 5, pir, 10)); }).find("pir must be"), std::string::npos) << pir;
  EXPECT_EQ(thrown([] { validate_trtcm(tr(10, 5, 9.5, 10)); }), "pir must be >= cir");
  for (const double cbs : {0.0, -1.0, nan, inf})
    EXPECT_NE(thrown([&] { validate_trtcm(tr(10, cbs, 20, 10)); }).find("cbs must be"), std::string::npos) << cbs;
  for (const double pbs : {0.0, -1.0, nan, inf})
    EXPECT_NE(thrown([&] { validate_trtcm(tr(10, 5, 20, pbs)); }).find("pbs must be"), std::string::npos) << pbs;
}

TEST(ThreeColor, CostMustBeFiniteAndPositive) {
  const SrtcmParams sp = sr(10, 5, 10);
  const TrtcmParams tp = tr(10, 5, 20, 10);
  SrtcmState s = srtcm_full_state(sp, 0);
  TrtcmState t = trtcm_full_state(tp, 0);
  const SrtcmState s0 = s;
  const TrtcmState t0 = t;
  for (const double cost : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    const std::string want = "cost must be a finite number > 0";
    EXPECT_EQ(thrown([&] { srtcm_mark(s, sp, cost, 5); }), want);
    EXPECT_EQ(thrown([&] { srtcm_mark_aware(s, sp, cost, Y, 5); }), want);
    EXPECT_EQ(thrown([&] { srtcm_wait_green(s, sp, cost, 1000, 5); }), want);
    EXPECT_EQ(thrown([&] { srtcm_wait_green_aware(s, sp, cost, G, 1000, 5); }), want);
    EXPECT_EQ(thrown([&] { trtcm_mark(t, tp, cost, 5); }), want);
    EXPECT_EQ(thrown([&] { trtcm_mark_aware(t, tp, cost, Y, 5); }), want);
    EXPECT_EQ(thrown([&] { trtcm_wait_green(t, tp, cost, 1000, 5); }), want);
    EXPECT_EQ(thrown([&] { trtcm_wait_green_aware(t, tp, cost, G, 1000, 5); }), want);
  }
  EXPECT_EQ(s, s0);  // checked before anything, the update included
  EXPECT_EQ(t, t0);
}

// ---- srTCM ----

TEST(ThreeColor, SrtcmMissingStateIsFull) {
  const SrtcmState st = srtcm_full_state(sr(10, 5, 10), 42);
  EXPECT_EQ(st, (SrtcmState{5, 10, 42}));
}

TEST(ThreeColor, SrtcmRfcSequence) {
  // RFC 2697, section 3, with CIR 10/s, CBS 5, EBS 10, both buckets full at t = 0.
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  for (int i = 1; i <= 5; ++i) {  // C serves the burst
    const TcmDecision d = srtcm_mark(st, p, 1, 0);
    EXPECT_EQ(d.color, G) << i;
    EXPECT_EQ(d.tc_left, 5 - i) << i;
    EXPECT_EQ(d.te_or_tp_left, 10) << i;
    EXPECT_EQ(d.wait_us, 0);
    EXPECT_EQ(d.retry_after_us, 0);
  }
  for (int i = 1; i <= 10; ++i) {  // then E
    const TcmDecision d = srtcm_mark(st, p, 1, 0);
    EXPECT_EQ(d.color, Y) << i;
    EXPECT_EQ(d.tc_left, 0) << i;
    EXPECT_EQ(d.te_or_tp_left, 10 - i) << i;
    EXPECT_EQ(d.retry_after_us, 0);
  }
  TcmDecision d = srtcm_mark(st, p, 1, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 100000);  // C holds one permit again after 100 ms (E after 600 ms)
  EXPECT_EQ(st, (SrtcmState{0, 0, 0}));  // red takes nothing

  EXPECT_EQ(sr_peek(st, p, 1, G, 99999), R);
  d = srtcm_mark(st, p, 1, 100000);  // after 100 ms: one more green
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.tc_left, 0);
  EXPECT_EQ(d.te_or_tp_left, 0);
  d = srtcm_mark(st, p, 1, 100000);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 100000);

  // E refills only once C is full: 450 ms fill C to 4.5, 500 ms to exactly 5, with E still empty;
  // only what comes after overflows into E.
  EXPECT_EQ(sr_at(st, p, 550000), (SrtcmState{4.5, 0, 550000}));
  EXPECT_EQ(sr_at(st, p, 600000), (SrtcmState{5, 0, 600000}));
  EXPECT_EQ(sr_at(st, p, 700000), (SrtcmState{5, 1, 700000}));
  // A long idle (1 s = 10 permits): 5 fill C, only the other 5 reach E.
  EXPECT_EQ(sr_at(st, p, 1100000), (SrtcmState{5, 5, 1100000}));
  // Then E is capped at EBS.
  EXPECT_EQ(sr_at(st, p, 60000000), (SrtcmState{5, 10, 60000000}));
}

TEST(ThreeColor, SrtcmExactFractionsAfterOddSteps) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(st, p, 5, 0).color, G);
  EXPECT_EQ(srtcm_mark(st, p, 10, 0).color, Y);
  ASSERT_EQ(st, (SrtcmState{0, 0, 0}));

  // 123457 us at 10/s: 10 * 123457 = 1234570, / 1e6 = the double nearest 1.23457.
  srtcm_update(st, p, 123457);
  EXPECT_EQ(st.tc, 1.23457);
  EXPECT_EQ(st.te, 0);
  TcmDecision d = srtcm_mark(st, p, 1, 123457);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.tc_left, 1.23457 - 1.0);
  srtcm_update(st, p, 246914);
  const double tc = (1.23457 - 1.0) + 1.23457;
  EXPECT_EQ(st.tc, tc);

  // Cost 2 is red: C lacks 2 - tc (~0.53086 permits, ~53086 us); E would need C full first.
  d = srtcm_mark(st, p, 2, 246914);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 53086);
  // Exactly the first microsecond at which the update gives C its 2 permits.
  EXPECT_LT(sr_at(st, p, 246914 + 53085).tc, 2.0);
  EXPECT_GE(sr_at(st, p, 246914 + 53086).tc, 2.0);
  EXPECT_EQ(sr_peek(st, p, 2, G, 246914 + 53085), R);
  EXPECT_EQ(sr_peek(st, p, 2, G, 246914 + 53086), G);
}

TEST(ThreeColor, SrtcmOverflowIntoE) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(st, p, 0.5, 0).color, G);
  EXPECT_EQ(srtcm_mark(st, p, 10, 0).color, Y);
  ASSERT_EQ(st, (SrtcmState{4.5, 0, 0}));
  // 75 ms = 0.75 permits: 0.5 fill C, 0.25 overflow into E.
  srtcm_update(st, p, 75000);
  EXPECT_EQ(st, (SrtcmState{5, 0.25, 75000}));
  // All of an odd step overflows once C is full: te + ((tc + added) - cbs).
  srtcm_update(st, p, 75000 + 123457);
  EXPECT_EQ(st.tc, 5);
  EXPECT_EQ(st.te, 0.25 + ((5.0 + 1.23457) - 5.0));
}

TEST(ThreeColor, SrtcmColorAware) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  TcmDecision d = srtcm_mark_aware(st, p, 1, R, 0);  // red stays red, even with both buckets full
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);
  EXPECT_EQ(st, (SrtcmState{5, 10, 0}));
  d = srtcm_mark_aware(st, p, 1, Y, 0);  // yellow is never green: it takes from E
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(st, (SrtcmState{5, 9, 0}));
  d = srtcm_mark_aware(st, p, 1, G, 0);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(st, (SrtcmState{4, 9, 0}));
  EXPECT_EQ(srtcm_mark_aware(st, p, 4, G, 0).color, G);
  d = srtcm_mark_aware(st, p, 1, G, 0);  // C empty: a green pre-colour becomes yellow
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(st, (SrtcmState{0, 8, 0}));
  EXPECT_EQ(srtcm_mark_aware(st, p, 8, Y, 0).color, Y);
  ASSERT_EQ(st, (SrtcmState{0, 0, 0}));

  // Both empty. A yellow pre-colour waits for E: C fills in 500 ms, then E has 1 after 100 more.
  d = srtcm_mark_aware(st, p, 1, Y, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 600000);
  EXPECT_EQ(sr_peek(st, p, 1, Y, 599999), R);
  EXPECT_EQ(sr_peek(st, p, 1, Y, 600000), Y);
  // A green one only for C.
  d = srtcm_mark_aware(st, p, 1, G, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 100000);
  EXPECT_EQ(sr_peek(st, p, 1, G, 100000), G);
  EXPECT_EQ(sr_peek(st, p, 1, Y, 100000), R);  // C has it, E does not
  EXPECT_EQ(srtcm_mark_aware(st, p, 1, R, 100000).retry_after_us, kInfinite);

  // A yellow pre-colour above EBS can never pass, though C could take it.
  const SrtcmParams small_e = sr(10, 5, 2);
  SrtcmState s2 = srtcm_full_state(small_e, 0);
  d = srtcm_mark_aware(s2, small_e, 3, Y, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);
  EXPECT_EQ(srtcm_mark_aware(s2, small_e, 3, G, 0).color, G);
}

TEST(ThreeColor, SrtcmCostAboveBothSizes) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  TcmDecision d = srtcm_mark(st, p, 11, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);
  EXPECT_EQ(st, srtcm_full_state(p, 0));
  // Above CBS but within EBS: yellow at best, and E refills only through a full C.
  d = srtcm_mark(st, p, 10, 0);
  EXPECT_EQ(d.color, Y);
  d = srtcm_mark(st, p, 10, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 1000000);
  EXPECT_EQ(sr_peek(st, p, 10, G, 999999), R);
  EXPECT_EQ(sr_peek(st, p, 10, G, 1000000), Y);
}

TEST(ThreeColor, SrtcmTimeNeverGoesBack) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 1000000);
  EXPECT_EQ(srtcm_mark(st, p, 5, 1000000).color, G);
  EXPECT_EQ(srtcm_mark(st, p, 10, 1000000).color, Y);
  const SrtcmState drained = st;
  srtcm_update(st, p, 500000);  // earlier: nothing added, last kept
  EXPECT_EQ(st, drained);
  srtcm_update(st, p, 1000000);  // the same time: nothing either
  EXPECT_EQ(st, drained);
  // A caller whose clock is 100 ms behind: the state refills from its own last, so the retry
  // counts the 100 ms gap as well.
  const TcmDecision d = srtcm_mark(st, p, 1, 900000);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 200000);
  EXPECT_EQ(st, drained);
  EXPECT_EQ(sr_peek(st, p, 1, G, 1099999), R);
  EXPECT_EQ(sr_peek(st, p, 1, G, 1100000), G);
}

// ---- trTCM ----

TEST(ThreeColor, TrtcmMissingStateIsFull) {
  const TrtcmState st = trtcm_full_state(tr(10, 5, 20, 10), 7);
  EXPECT_EQ(st, (TrtcmState{5, 10, 7}));
}

TEST(ThreeColor, TrtcmRfcSequence) {
  // RFC 2698, section 3: PIR 20/s, PBS 10, CIR 10/s, CBS 5, full at t = 0.
  const TrtcmParams p = tr(10, 5, 20, 10);
  TrtcmState st = trtcm_full_state(p, 0);
  for (int i = 1; i <= 5; ++i) {  // green takes from both
    const TcmDecision d = trtcm_mark(st, p, 1, 0);
    EXPECT_EQ(d.color, G) << i;
    EXPECT_EQ(d.tc_left, 5 - i) << i;
    EXPECT_EQ(d.te_or_tp_left, 10 - i) << i;
  }
  for (int i = 1; i <= 5; ++i) {  // C is empty (yellow is C-limited): yellow takes from P only
    const TcmDecision d = trtcm_mark(st, p, 1, 0);
    EXPECT_EQ(d.color, Y) << i;
    EXPECT_EQ(d.tc_left, 0) << i;
    EXPECT_EQ(d.te_or_tp_left, 5 - i) << i;
  }
  TcmDecision d = trtcm_mark(st, p, 1, 0);  // P is empty (red is P-limited)
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 50000);  // P refills at 20/s
  EXPECT_EQ(st, (TrtcmState{0, 0, 0}));
  EXPECT_EQ(tr_peek(st, p, 1, G, 49999), R);

  // 50 ms: P 1, C 0.5: yellow, then red.
  d = trtcm_mark(st, p, 1, 50000);
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(d.tc_left, 0.5);
  EXPECT_EQ(d.te_or_tp_left, 0);
  d = trtcm_mark(st, p, 1, 50000);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 50000);
  // 100 ms more: P 2, C 1.5: green, yellow, red.
  EXPECT_EQ(trtcm_mark(st, p, 1, 150000).color, G);
  EXPECT_EQ(st, (TrtcmState{0.5, 1, 150000}));
  EXPECT_EQ(trtcm_mark(st, p, 1, 150000).color, Y);
  d = trtcm_mark(st, p, 1, 150000);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 50000);
  // Each bucket refills on its own and is capped at its own size.
  EXPECT_EQ(tr_at(st, p, 400000), (TrtcmState{3, 5, 400000}));
  EXPECT_EQ(tr_at(st, p, 1150000), (TrtcmState{5, 10, 1150000}));
}

TEST(ThreeColor, TrtcmPeakLimitsGreenWhileCIsFull) {
  const TrtcmParams p = tr(10, 5, 20, 10);
  TrtcmState st = trtcm_full_state(p, 0);
  TcmDecision d = trtcm_mark(st, p, 7, 0);  // above CBS: yellow
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(st, (TrtcmState{5, 3, 0}));
  d = trtcm_mark(st, p, 4, 0);  // C has 5, but P only 3: red
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 50000);
  EXPECT_EQ(tr_peek(st, p, 4, G, 49999), R);
  EXPECT_EQ(tr_peek(st, p, 4, G, 50000), G);
  d = trtcm_mark(st, p, 3, 0);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(st, (TrtcmState{2, 0, 0}));

  // Above PBS: never anything but red.
  st = trtcm_full_state(p, 0);
  d = trtcm_mark(st, p, 10.5, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);
  EXPECT_EQ(st, trtcm_full_state(p, 0));
  // Above CBS, within PBS: yellow, then red until P holds 6 again (from 4: 100 ms).
  EXPECT_EQ(trtcm_mark(st, p, 6, 0).color, Y);
  d = trtcm_mark(st, p, 6, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 100000);
}

TEST(ThreeColor, TrtcmColorAware) {
  const TrtcmParams p = tr(10, 5, 20, 10);
  TrtcmState st = trtcm_full_state(p, 0);
  TcmDecision d = trtcm_mark_aware(st, p, 1, R, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);
  EXPECT_EQ(st, (TrtcmState{5, 10, 0}));
  d = trtcm_mark_aware(st, p, 1, Y, 0);  // yellow with C full: takes from P only
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(st, (TrtcmState{5, 9, 0}));
  d = trtcm_mark_aware(st, p, 1, G, 0);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(st, (TrtcmState{4, 8, 0}));
  EXPECT_EQ(trtcm_mark_aware(st, p, 8, Y, 0).color, Y);
  d = trtcm_mark_aware(st, p, 1, Y, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 50000);
  d = trtcm_mark_aware(st, p, 1, G, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 50000);
  // 50 ms: P 1, C 4.5: a yellow pre-colour stays yellow, a green one is green.
  EXPECT_EQ(tr_peek(st, p, 1, Y, 50000), Y);
  EXPECT_EQ(tr_peek(st, p, 1, G, 50000), G);
  EXPECT_EQ(tr_peek(st, p, 1, R, 50000), R);
}

TEST(ThreeColor, TrtcmTimeNeverGoesBack) {
  const TrtcmParams p = tr(10, 5, 20, 10);
  TrtcmState st = trtcm_full_state(p, 2000000);
  EXPECT_EQ(trtcm_mark(st, p, 10, 2000000).color, Y);
  const TrtcmState drained = st;
  trtcm_update(st, p, 1000000);
  EXPECT_EQ(st, drained);
  const TcmDecision d = trtcm_mark(st, p, 1, 1950000);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 100000);  // 50 ms up to last, 50 ms for P
  EXPECT_EQ(st, drained);
}

// ---- waiting for green ----

TEST(ThreeColor, SrtcmWaitGreenQueuesBehindTheDebt) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  for (int i = 0; i < 5; ++i) {
    const TcmDecision d = srtcm_wait_green(st, p, 1, 1000000, 0);
    EXPECT_EQ(d.color, G);
    EXPECT_EQ(d.wait_us, 0);
  }
  for (int i = 1; i <= 10; ++i) {  // one permit every 100 ms, each behind the one before
    const TcmDecision d = srtcm_wait_green(st, p, 1, 1000000, 0);
    EXPECT_EQ(d.color, G) << i;
    EXPECT_EQ(d.wait_us, 100000 * i) << i;
    EXPECT_EQ(d.tc_left, -i) << i;
    EXPECT_EQ(d.te_or_tp_left, 10) << i;  // E is not touched by held greens
  }
  // The next would wait 1.1 s, beyond the timeout: marked as without waiting, so yellow from E.
  TcmDecision d = srtcm_wait_green(st, p, 1, 1000000, 0);
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(d.wait_us, 0);
  EXPECT_EQ(st, (SrtcmState{-10, 9, 0}));
  for (int i = 0; i < 9; ++i) EXPECT_EQ(srtcm_wait_green(st, p, 1, 1000000, 0).color, Y);
  d = srtcm_wait_green(st, p, 1, 1000000, 0);  // E empty too: red
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.wait_us, 0);
  EXPECT_EQ(d.retry_after_us, 1100000);  // C back to 1 (E: 1.6 s, C must reach 5 first)
  EXPECT_EQ(st, (SrtcmState{-10, 0, 0}));

  // The debt is refilled first and nothing overflows into E meanwhile.
  EXPECT_EQ(sr_at(st, p, 1000000), (SrtcmState{0, 0, 1000000}));
  d = srtcm_wait_green(st, p, 1, 0, 1100000);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.wait_us, 0);
  EXPECT_EQ(st, (SrtcmState{0, 0, 1100000}));
  // One second later: 10 permits, 5 to C, 5 over into E.
  EXPECT_EQ(sr_at(st, p, 2100000), (SrtcmState{5, 5, 2100000}));
}

TEST(ThreeColor, SrtcmWaitGreenLaterCallersQueueBehindHeldOnes) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(st, p, 5, 0).color, G);
  EXPECT_EQ(srtcm_wait_green(st, p, 1, 1000000, 0).wait_us, 100000);
  EXPECT_EQ(srtcm_wait_green(st, p, 1, 1000000, 0).wait_us, 200000);
  EXPECT_EQ(srtcm_wait_green(st, p, 1, 1000000, 0).wait_us, 300000);
  // 100 ms on, the first is released; a newcomer takes the slot after the third, at 400 ms.
  const TcmDecision d = srtcm_wait_green(st, p, 1, 1000000, 100000);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.wait_us, 300000);
  EXPECT_EQ(st, (SrtcmState{-3, 10, 100000}));
  // A debt of 2 refilled by 1 s (10 permits): 7 to C (up to 5), 3 over into E (capped at 10).
  SrtcmState s2 = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(s2, p, 5, 0).color, G);
  EXPECT_EQ(srtcm_mark(s2, p, 10, 0).color, Y);
  EXPECT_EQ(srtcm_wait_green(s2, p, 1, 1000000, 0).wait_us, 100000);
  EXPECT_EQ(srtcm_wait_green(s2, p, 1, 1000000, 0).wait_us, 200000);
  EXPECT_EQ(sr_at(s2, p, 1000000), (SrtcmState{5, 3, 1000000}));
}

TEST(ThreeColor, SrtcmWaitGreenTimeoutAndFallbacks) {
  const SrtcmParams p = sr(10, 5, 10);
  SrtcmState st = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(st, p, 5, 0).color, G);
  // The wait equal to the timeout is granted; one microsecond less is not.
  EXPECT_EQ(srtcm_wait_green(st, p, 1, 99999, 0).color, Y);
  EXPECT_EQ(st, (SrtcmState{0, 9, 0}));
  TcmDecision d = srtcm_wait_green(st, p, 1, 100000, 0);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.wait_us, 100000);
  EXPECT_EQ(srtcm_wait_green(st, p, 1, -5, 0).color, Y);  // a negative timeout is 0
  EXPECT_EQ(srtcm_wait_green(st, p, 1, kInfinite, 0).wait_us, 200000);

  // Above CBS: no wait can make it green; yellow from E.
  SrtcmState full = srtcm_full_state(p, 0);
  d = srtcm_wait_green(full, p, 6, kInfinite, 0);
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(d.wait_us, 0);
  EXPECT_EQ(full, (SrtcmState{5, 4, 0}));
  // Above both sizes: red for ever.
  d = srtcm_wait_green(full, p, 11, kInfinite, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);

  // Pre-colours: only green waits.
  SrtcmState empty_c = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(empty_c, p, 5, 0).color, G);
  d = srtcm_wait_green_aware(empty_c, p, 1, Y, kInfinite, 0);
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(d.wait_us, 0);
  d = srtcm_wait_green_aware(empty_c, p, 1, R, kInfinite, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);
  d = srtcm_wait_green_aware(empty_c, p, 1, G, kInfinite, 0);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.wait_us, 100000);

  // A clock behind the state's: the wait counts the gap too.
  SrtcmState later = srtcm_full_state(p, 500000);
  EXPECT_EQ(srtcm_mark(later, p, 5, 500000).color, G);
  d = srtcm_wait_green(later, p, 1, 1000000, 400000);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.wait_us, 200000);
  EXPECT_EQ(later, (SrtcmState{-1, 10, 500000}));
}

TEST(ThreeColor, TrtcmWaitGreenQueuesBehindTheLaterBucket) {
  // P is small: it binds first, then C (PIR 20, PBS 2, CIR 10, CBS 5).
  const TrtcmParams p = tr(10, 5, 20, 2);
  TrtcmState st = trtcm_full_state(p, 0);
  EXPECT_EQ(trtcm_wait_green(st, p, 1, 1000000, 0).wait_us, 0);
  EXPECT_EQ(trtcm_wait_green(st, p, 1, 1000000, 0).wait_us, 0);
  const Micros want[] = {50000, 100000, 150000, 200000, 250000, 300000, 400000, 500000};
  for (int i = 0; i < 8; ++i) {
    const TcmDecision d = trtcm_wait_green(st, p, 1, 1000000, 0);
    EXPECT_EQ(d.color, G) << i;
    EXPECT_EQ(d.wait_us, want[i]) << i;
    EXPECT_EQ(d.te_or_tp_left, -1 - i) << i;
    EXPECT_EQ(d.tc_left, 2 - i) << i;
  }
  // At 250 ms P has refilled 5 of its debt of 8, C 2.5 of its debt of 5.
  EXPECT_EQ(tr_at(st, p, 250000), (TrtcmState{-2.5, -3, 250000}));
}

TEST(ThreeColor, TrtcmWaitGreenTimeoutAndFallbacks) {
  const TrtcmParams p = tr(10, 5, 20, 2);
  TrtcmState st = trtcm_full_state(p, 0);
  EXPECT_EQ(trtcm_mark(st, p, 2, 0).color, G);
  EXPECT_EQ(trtcm_wait_green(st, p, 1, 100000, 0).wait_us, 50000);
  EXPECT_EQ(trtcm_wait_green(st, p, 1, 100000, 0).wait_us, 100000);
  // The next would wait 150 ms: refused, and P's debt makes it red, until P is back to 1.
  TcmDecision d = trtcm_wait_green(st, p, 1, 100000, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, 150000);
  EXPECT_EQ(st, (TrtcmState{1, -2, 0}));

  // C-limited: refused waits fall back to yellow while P has the permits.
  const TrtcmParams q = tr(10, 5, 20, 10);
  TrtcmState s2 = trtcm_full_state(q, 0);
  EXPECT_EQ(trtcm_mark(s2, q, 5, 0).color, G);
  d = trtcm_wait_green(s2, q, 1, 50000, 0);
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(d.wait_us, 0);
  EXPECT_EQ(s2, (TrtcmState{0, 4, 0}));
  d = trtcm_wait_green(s2, q, 1, 100000, 0);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.wait_us, 100000);
  EXPECT_EQ(s2, (TrtcmState{-1, 3, 0}));
  // Above CBS: never green, yellow at once.
  d = trtcm_wait_green(s2, q, 6, kInfinite, 1000000);
  EXPECT_EQ(d.color, Y);
  EXPECT_EQ(d.wait_us, 0);
  // Pre-colours: only green waits.
  TrtcmState s3 = trtcm_full_state(q, 0);
  EXPECT_EQ(trtcm_mark(s3, q, 5, 0).color, G);
  EXPECT_EQ(trtcm_wait_green_aware(s3, q, 1, Y, kInfinite, 0).color, Y);
  EXPECT_EQ(trtcm_wait_green_aware(s3, q, 1, R, kInfinite, 0).retry_after_us, kInfinite);
  d = trtcm_wait_green_aware(s3, q, 1, G, kInfinite, 0);
  EXPECT_EQ(d.color, G);
  EXPECT_EQ(d.wait_us, 100000);
}

// ---- the searches at the edges ----

TEST(ThreeColor, RetryIsExactWhereHugeCountsRound) {
  // Near 1e18 a double steps by 128 permits: the closed form is far off; the search is not.
  const SrtcmParams p = sr(1, 1e18, 1);
  SrtcmState st = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(st, p, 4096, 0).color, G);
  const double cost = 1e18 - 1000;
  const TcmDecision d = srtcm_mark(st, p, cost, 0);
  ASSERT_EQ(d.color, R);
  ASSERT_NE(d.retry_after_us, kInfinite);
  EXPECT_EQ(sr_peek(st, p, cost, G, d.retry_after_us - 1), R);
  EXPECT_EQ(sr_peek(st, p, cost, G, d.retry_after_us), G);
  EXPECT_NEAR(static_cast<double>(d.retry_after_us), (cost - (1e18 - 4096)) * 1e6, 128e6);
}

TEST(ThreeColor, WaitsBeyond2Pow53AreInfinite) {
  const SrtcmParams p = sr(1e-12, 1, 0);  // one permit per 1e18 us
  SrtcmState st = srtcm_full_state(p, 0);
  EXPECT_EQ(srtcm_mark(st, p, 1, 0).color, G);
  TcmDecision d = srtcm_mark(st, p, 1, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(d.retry_after_us, kInfinite);
  d = srtcm_wait_green(st, p, 1, kInfinite, 0);  // not granted with an infinite wait
  EXPECT_EQ(d.color, R);
  EXPECT_EQ(st, (SrtcmState{0, 0, 0}));

  const SrtcmParams q = sr(1e-9, 1, 0);  // one permit per 1e15 us: still below 2^53
  SrtcmState s2 = srtcm_full_state(q, 0);
  EXPECT_EQ(srtcm_mark(s2, q, 1, 0).color, G);
  d = srtcm_mark(s2, q, 1, 0);
  EXPECT_EQ(d.color, R);
  EXPECT_NEAR(static_cast<double>(d.retry_after_us), 1e15, 2);
  EXPECT_EQ(sr_peek(s2, q, 1, G, d.retry_after_us - 1), R);
  EXPECT_EQ(sr_peek(s2, q, 1, G, d.retry_after_us), G);
}

// Random traffic: every red's retry and every held green's wait is the first microsecond that
// the update arithmetic allows, and the buckets stay within their bounds.
TEST(ThreeColor, RandomTrafficRetriesAndWaitsAreExact) {
  std::mt19937_64 rng(20260301);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const Color colors[] = {G, Y, R};
  for (int round = 0; round < 40; ++round) {
    const double cir = 0.5 + unit(rng) * 200;
    const SrtcmParams sp = sr(cir, std::floor(unit(rng) * 20), 1 + std::floor(unit(rng) * 20));
    const TrtcmParams tp = tr(cir, 1 + unit(rng) * 20, cir * (1 + unit(rng) * 3), 1 + unit(rng) * 20);
    ASSERT_NO_THROW(validate_srtcm(sp));
    ASSERT_NO_THROW(validate_trtcm(tp));
    Micros now = 1000000;
    SrtcmState s = srtcm_full_state(sp, now);
    TrtcmState t = trtcm_full_state(tp, now);
    for (int i = 0; i < 300; ++i) {
      now += static_cast<Micros>(unit(rng) * 60000) - 5000;  // sometimes backwards
      const double cost = unit(rng) < 0.5 ? 1.0 : 0.25 + unit(rng) * 6;
      const Color pre = colors[rng() % 3];
      const int op = static_cast<int>(rng() % 2);
      const Micros timeout = static_cast<Micros>(unit(rng) * 300000);

      const SrtcmState s_before = sr_at(s, sp, now);
      const TcmDecision ds = op == 0 ? srtcm_mark_aware(s, sp, cost, pre, now)
                                     : srtcm_wait_green_aware(s, sp, cost, pre, timeout, now);
      if (ds.color == R && ds.retry_after_us != kInfinite) {
        ASSERT_EQ(sr_peek(s, sp, cost, pre, now + ds.retry_after_us - 1), R);
        ASSERT_NE(sr_peek(s, sp, cost, pre, now + ds.retry_after_us), R);
      }
      if (ds.color == G && ds.wait_us > 0) {
        ASSERT_LE(ds.wait_us, timeout);
        ASSERT_NE(sr_peek(s_before, sp, cost, G, now + ds.wait_us - 1), G);
        ASSERT_EQ(sr_peek(s_before, sp, cost, G, now + ds.wait_us), G);
      }
      ASSERT_LE(s.tc, sp.cbs);
      ASSERT_GE(s.te, 0);
      ASSERT_LE(s.te, sp.ebs);

      const TrtcmState t_before = tr_at(t, tp, now);
      const TcmDecision dt = op == 0 ? trtcm_mark_aware(t, tp, cost, pre, now)
                                     : trtcm_wait_green_aware(t, tp, cost, pre, timeout, now);
      if (dt.color == R && dt.retry_after_us != kInfinite) {
        ASSERT_EQ(tr_peek(t, tp, cost, pre, now + dt.retry_after_us - 1), R);
        ASSERT_NE(tr_peek(t, tp, cost, pre, now + dt.retry_after_us), R);
      }
      if (dt.color == G && dt.wait_us > 0) {
        ASSERT_LE(dt.wait_us, timeout);
        ASSERT_NE(tr_peek(t_before, tp, cost, G, now + dt.wait_us - 1), G);
        ASSERT_EQ(tr_peek(t_before, tp, cost, G, now + dt.wait_us), G);
      }
      ASSERT_LE(t.tc, tp.cbs);
      ASSERT_LE(t.tp, tp.pbs);
    }
  }
}

}  // namespace
}  // namespace tollgate::limiter

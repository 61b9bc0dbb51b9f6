// The adaptive rate controller on a manual clock: cut, debounce, pause, recovery, floor, cap.
#include "tollgate/limiter/adaptive_rate.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace tollgate::limiter {
namespace {

constexpr Micros kSec = 1'000'000;
constexpr Micros kLead = 20 * kSec;  // long enough for the measured rate of grants to settle (2 s constant)

// `n` arrivals spread evenly over [from, to), each granted: a steady demand (and sending rate) of
// n / (to - from) per second.
void arrive(AdaptiveState& st, Micros from, Micros to, int n) {
  for (int i = 0; i < n; ++i) {
    note_demand(st, from + (to - from) * i / n, 1.0);
    note_grant(st, from + (to - from) * i / n, 1.0);
  }
}

TEST(AdaptiveRate, NotAdaptingIsTheConfiguredRate) {
  AdaptiveState st;
  arrive(st, 0, kSec, 10);
  EXPECT_DOUBLE_EQ(effective_rate(st, 50, kSec), 50);
  EXPECT_TRUE(adaptive_rested(AdaptiveState{}, 0));
}

TEST(AdaptiveRate, DemandIsASlidingSecond) {
  AdaptiveState st;
  arrive(st, 0, kSec, 40);
  EXPECT_DOUBLE_EQ(demand(st, kSec - 1), 40);
  // Half way through the next second with nothing new: half of the previous second's count.
  EXPECT_DOUBLE_EQ(demand(st, kSec + kSec / 2), 20);
  EXPECT_DOUBLE_EQ(demand(st, 3 * kSec), 0);  // two seconds later: nothing asked
}

TEST(AdaptiveRate, CutIsBetaOfTheRateBeingSent) {
  AdaptiveState st;
  arrive(st, 0, kLead, 1200);  // asked for 60/s, configured 50/s: sending 50/s
  const ThrottleResult r = on_throttle(st, 50, kLead, 0, 0);
  EXPECT_TRUE(r.cut);
  EXPECT_FALSE(r.paused);
  EXPECT_DOUBLE_EQ(r.from, 50);
  EXPECT_NEAR(r.to, 35, 1e-9);
  EXPECT_NEAR(effective_rate(st, 50, kLead), 35, 1e-9);
}

TEST(AdaptiveRate, CutFromTheDemandWhenItIsBelowTheRate) {
  AdaptiveState st;
  arrive(st, 0, kLead, 400);  // asked for 20/s under a 50/s rule: 20/s is what is being sent
  const ThrottleResult r = on_throttle(st, 50, kLead, 0, 0);
  // The measured rate of grants, 20/s (read just before the next grant is due, it is at the low
  // point of its sawtooth: a grant adds 1/(2 s) = 0.5, so within 0.25 of the rate).
  EXPECT_NEAR(r.from, 20, 0.26);
  EXPECT_NEAR(r.to, 0.7 * r.from, 1e-9);
}

TEST(AdaptiveRate, SignalsWithinTheDebounceCountOnce) {
  AdaptiveState st;
  arrive(st, 0, kLead, 1200);
  ASSERT_TRUE(on_throttle(st, 50, kLead, 0, 0).cut);
  arrive(st, kLead, kLead + kSec / 2, 30);  // still asked for 60/s
  const ThrottleResult again = on_throttle(st, 50, kLead + 499'999, 0, 0);
  EXPECT_FALSE(again.cut);
  // Not cut twice: on the curve from the first cut (it climbs fast at first: 35 -> 40.8 in 0.5 s).
  const double k = std::cbrt(50 * 0.3 / 0.4);
  EXPECT_NEAR(effective_rate(st, 50, kLead + 499'999), 0.4 * std::pow(0.499999 - k, 3) + 50, 1e-6);
  const ThrottleResult later = on_throttle(st, 50, kLead + kSec / 2, 0, 0);
  EXPECT_TRUE(later.cut);  // a new episode: cut again, from the rate now being sent
  EXPECT_NEAR(later.from, 0.4 * std::pow(0.5 - k, 3) + 50, 1e-6);
  EXPECT_NEAR(later.to, 0.7 * later.from, 1e-6);
}

TEST(AdaptiveRate, RecoversOnTheCubicCurveAndFlattensAtTheLastThrottle) {
  AdaptiveState st;
  Micros now = 0;
  arrive(st, now, kLead, 1200);
  now = kLead;
  on_throttle(st, 50, now, 0, 0);  // w_max 50 is the configured rate: recovery ends at 50
  const double k = std::cbrt(50 * 0.3 / 0.4);  // 3.35 s to get back
  double last = 0;
  for (int tenth = 1; tenth < 34; ++tenth) {
    arrive(st, now, now + kSec / 10, 6);  // still asked for 60/s
    now += kSec / 10;
    const double rate = effective_rate(st, 50, now);
    const double t = tenth / 10.0;
    EXPECT_NEAR(rate, 0.4 * std::pow(t - k, 3) + 50, 1e-6) << "t=" << t;
    EXPECT_GE(rate, last);  // concave, rising
    last = rate;
  }
  arrive(st, now, now + kSec, 60);
  now += kSec;
  EXPECT_DOUBLE_EQ(effective_rate(st, 50, now), 50);  // back to the rule
  EXPECT_DOUBLE_EQ(st.w_max, 0);
}

TEST(AdaptiveRate, ProbesAboveTheLastThrottleButNeverAboveTheRule) {
  // A cut while 20/s was being sent (the supplier's allowance).
  AdaptiveState s3;
  arrive(s3, 0, kLead, 400);
  on_throttle(s3, 50, kLead, 0, 0);
  ASSERT_NEAR(s3.w_max, 20, 0.26);
  Micros now = kLead;
  const double k = std::cbrt(20 * 0.3 / 0.4);  // 2.47 s
  for (; now < kLead + static_cast<Micros>(k * kSec) + 3 * kSec; now += kSec / 10) {
    arrive(s3, now, now + kSec / 10, 6);  // asked for 60/s from now on
    const double rate = effective_rate(s3, 50, now + kSec / 10);
    EXPECT_LE(rate, 50);
    EXPECT_GE(rate, 14 - 1e-9);
  }
  EXPECT_GT(effective_rate(s3, 50, now), 20);  // past K it probes above the last throttle
}

TEST(AdaptiveRate, AFloorBelowWhichItNeverCuts) {
  AdaptiveState st;
  EXPECT_DOUBLE_EQ(floor_rate(50), 1.0);    // 2% of the rule
  EXPECT_DOUBLE_EQ(floor_rate(2), 0.1);     // at least 0.1/s
  EXPECT_DOUBLE_EQ(floor_rate(0.05), 0.05); // never above the rule
  arrive(st, 0, kLead, 1200);
  Micros now = kLead;
  // Throttled every 0.6 s with a 1 s pause (the curve does not climb back in between), asked for
  // 60/s throughout: 50 * 0.7^n comes down to the floor and stays there.
  for (int i = 0; i < 30; ++i) {
    on_throttle(st, 50, now, kSec, 0);
    arrive(st, now, now + 600'000, 36);
    now += 600'000;
  }
  EXPECT_NEAR(effective_rate(st, 50, now), floor_rate(50), 1e-12);
}

TEST(AdaptiveRate, CappedAtDemandAndTheCurveWaitsForIt) {
  AdaptiveState st;
  arrive(st, 0, kLead, 1200);
  Micros now = kLead;
  on_throttle(st, 50, now, 0, 0);  // 35/s
  // The interface is now asked for 5/s only, for 20 s: the rate never shows more than that, and
  // the curve does not advance while nobody asks for it.
  for (int i = 0; i < 200; ++i) {
    arrive(st, now, now + kSec / 10, i % 2);  // 5/s
    now += kSec / 10;
    const double rate = effective_rate(st, 50, now);
    // Once the sliding second holds only the new demand, the rate is no more than it.
    if (i >= 10) {
      EXPECT_LE(rate, 5.0 + 1e-9) << i;
    }
  }
  EXPECT_GT(st.w_max, 0);  // still adapting: 20 s of a 5/s demand proved nothing above it
  arrive(st, now, now + kSec, 60);
  now += kSec;
  const double resumed = effective_rate(st, 50, now);
  EXPECT_GT(resumed, 30);  // from where the curve stood, not from scratch...
  EXPECT_LT(resumed, 50);  // ...and not at the rule at once
}

TEST(AdaptiveRate, RetryAfterPausesWithJitterAndCapsAtTheMaximum) {
  AdaptiveState st;
  arrive(st, 0, kLead, 1200);
  const ThrottleResult r = on_throttle(st, 50, kLead, 3 * kSec, 120'000);
  EXPECT_TRUE(r.paused);
  EXPECT_EQ(r.pause_until, kLead + 3 * kSec + 120'000);
  EXPECT_EQ(st.epoch, r.pause_until);  // the curve starts when sending may resume
  AdaptiveState capped;
  arrive(capped, 0, kLead, 1200);
  AdaptiveParams p;
  p.max_pause_us = 10 * kSec;
  EXPECT_EQ(on_throttle(capped, 50, kLead, 3600 * kSec, 0, p).pause_until, kLead + 10 * kSec);
  // A pause already longer is not shortened by a later, shorter one.
  arrive(st, kLead, kLead + kSec, 60);
  const ThrottleResult shorter = on_throttle(st, 50, kLead + kSec, 1 * kSec, 0);
  EXPECT_TRUE(shorter.cut);
  EXPECT_FALSE(shorter.paused);
  EXPECT_EQ(st.pause_until, kLead + 3 * kSec + 120'000);
  EXPECT_FALSE(adaptive_rested(st, kLead + 2 * kSec));
}

// A supplier's burst lets a rate through for a while that it does not allow: the cut starts from
// what went through over the last seconds (the measured rate of grants), not the rate of the
// moment, but never below beta times the rate of the moment.
TEST(AdaptiveRate, TheMeasuredRateOfGrantsBoundsTheCut) {
  AdaptiveState st;
  Micros now = 0;
  for (; now < kLead; now += kSec / 60) note_demand(st, now, 1.0);  // asked for 60/s...
  for (Micros t = 0; t < kLead; t += kSec / 40) note_grant(st, t, 1.0);  // ...40/s went through
  const ThrottleResult r = on_throttle(st, 50, now, 0, 0);
  EXPECT_NEAR(r.from, 40, 0.6);
  AdaptiveState quiet;  // after a quiet spell the measure lags: then beta times the rate of the moment
  for (Micros t = 0; t < kLead; t += kSec / 60) note_demand(quiet, t, 1.0);
  for (Micros t = kLead - kSec / 2; t < kLead; t += kSec / 60) note_grant(quiet, t, 1.0);
  EXPECT_NEAR(on_throttle(quiet, 50, kLead, 0, 0).from, 35, 1e-9);
  EXPECT_NEAR(sent_rate(quiet, kLead + 2 * kSec), sent_rate(quiet, kLead) * std::exp(-1.0), 1e-9);
}

TEST(AdaptiveRate, EffectiveParamsScaleAnExplicitBurst) {
  BucketParams p;
  p.rate = 50;
  EXPECT_FALSE(effective_params(p, 20).burst.has_value());  // one second of permits follows by itself
  p.burst = 100;
  const BucketParams e = effective_params(p, 20);
  EXPECT_DOUBLE_EQ(e.rate, 20);
  EXPECT_DOUBLE_EQ(*e.burst, 40);
}

}  // namespace
}  // namespace tollgate::limiter

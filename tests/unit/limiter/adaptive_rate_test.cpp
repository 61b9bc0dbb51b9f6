// The adaptive rate controller on a manual clock: the estimate, the cut, the hold, the probe, the
// evidence, the pause, the floor and the cap.
#include "tollgate/limiter/adaptive_rate.hpp"

#include <gtest/gtest.h>

namespace tollgate::limiter {
namespace {

constexpr Micros kSec = 1'000'000;
constexpr Micros kLead = 20 * kSec;

// Traffic over `span` from `at`: `asked` arrivals (from `callers` callers in turn, ids 1..n), and
// `admitted` answers of the supplier other than throttles reported, each spread evenly.
void traffic(AdaptiveState& st, Micros at, Micros span, int asked, int admitted, int callers = 1) {
  for (int i = 0; i < asked; ++i) note_demand(st, at + span * i / asked, 1.0, 1 + static_cast<std::uint64_t>(i % callers));
  for (int i = 0; i < admitted; ++i) note_admitted(st, at + span * i / admitted, 1.0);
}
// One second of it.
void second_of(AdaptiveState& st, Micros at, int asked, int admitted, int callers = 1) {
  traffic(st, at, kSec, asked, admitted, callers);
}

// The lead (`asked` a second, `admitted` of them, for kLead) and a throttle that cuts, with a
// pause of `pause_us`: the level is `admitted`. Returns the time of the cut.
Micros cut_after_lead(AdaptiveState& st, int asked, int admitted, Micros pause_us = 0) {
  Micros now = 0;
  for (; now < kLead; now += kSec) second_of(st, now, asked, admitted);
  EXPECT_TRUE(on_throttle(st, 50, now, pause_us, 0, 1).cut);
  EXPECT_DOUBLE_EQ(st.level, admitted);
  return now;
}

TEST(AdaptiveRate, NotAdaptingIsTheConfiguredRate) {
  AdaptiveState st;
  second_of(st, 0, 10, 10);
  EXPECT_DOUBLE_EQ(effective_rate(st, 50, kSec), 50);
  EXPECT_TRUE(adaptive_rested(AdaptiveState{}, 0));
}

TEST(AdaptiveRate, DemandIsASlidingSecond) {
  AdaptiveState st;
  second_of(st, 0, 40, 0);
  EXPECT_DOUBLE_EQ(demand(st, kSec - 1), 40);
  // Half way through the next second with nothing new: half of the previous second's count.
  EXPECT_DOUBLE_EQ(demand(st, kSec + kSec / 2), 20);
  EXPECT_DOUBLE_EQ(demand(st, 3 * kSec), 0);  // two seconds later: nothing asked
}

// Asked for 60/s under a 50/s rule; the supplier admits 30/s (and refuses the rest). With no cut
// before, the cut holds at 0.95 of what it admitted over the last second, not at a fraction of
// what was being sent.
TEST(AdaptiveRate, ACutHoldsJustUnderWhatTheSupplierAdmitted) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 30);
  EXPECT_DOUBLE_EQ(admitted(st, kLead), 30);
  const ThrottleResult r = on_throttle(st, 50, kLead, 0, 0, 1);
  EXPECT_TRUE(r.cut);
  EXPECT_FALSE(r.unconfirmed);
  EXPECT_DOUBLE_EQ(r.from, 50);
  EXPECT_DOUBLE_EQ(r.to, 0.95 * 30);
  EXPECT_DOUBLE_EQ(st.level, 30);
}

// A fixed-window supplier (20 per calendar second) asked for 30/s: each window is full two thirds
// of the way in and refuses the rest. Over the sliding second that ends at a refusal it admitted
// 20 + a third of the window before (26.7); in the calendar second, exactly its allowance. The
// state's seconds are put on the wall clock's by its phase (here the clock's whole seconds fall
// 0.7 s after the wall clock's).
TEST(AdaptiveRate, AFixedWindowIsReadPerCalendarSecond) {
  AdaptiveState st;
  st.phase = 700'000;  // (t + phase) is a whole second when the wall clock's is
  const Micros first = 300'000;  // the first wall-clock second this clock sees begins here
  for (int w = 0; w < 20; ++w) {
    const Micros start = first + w * kSec;
    for (int i = 0; i < 30; ++i) {
      const Micros t = start + kSec * i / 30;
      note_demand(st, t, 1.0, 1);
      if (i < 20) note_admitted(st, t + 1000, 1.0);
    }
  }
  const Micros refused = first + 19 * kSec + kSec * 20 / 30 + 1000;  // the 21st of the last window
  EXPECT_NEAR(admitted(st, refused), 20 + 20.0 / 3, 0.05);
  EXPECT_DOUBLE_EQ(admitted_per_window(st, refused), 20);
  const ThrottleResult r = on_throttle(st, 50, refused, 0, 0, 1);
  EXPECT_TRUE(r.cut);
  EXPECT_DOUBLE_EQ(st.level, 20);
  EXPECT_DOUBLE_EQ(r.to, 0.95 * 20);
  // As a gateway tells them: each admission with its next decision. Held at 19/s for 19 windows,
  // then a probe at 30/s refused in the 20th: each held window's last admission is told with the
  // next window's first decision. Said to be from the second before (`before`), the refused window
  // reads its allowance; counted when told, one more.
  for (const bool apart : {true, false}) {
    AdaptiveState g;
    g.phase = st.phase;
    for (int w = 0; w < 19; ++w) {
      const Micros start = first + w * kSec;
      for (int k = 0; k < 19; ++k) {
        const Micros told = start + kSec * (k + 1) / 19 + 1000;
        note_admitted(g, told, 1.0, apart && k == 18 ? 1.0 : 0.0);
      }
    }
    const Micros start = first + 19 * kSec;
    for (int i = 0; i < 20; ++i) note_admitted(g, start + kSec * (i + 1) / 30 + 1000, 1.0);
    EXPECT_DOUBLE_EQ(admitted_per_window(g, refused), apart ? 20 : 21) << apart;
  }
}

// A supplier of 20 per window, its windows starting 400 ms into the wall clock's second, held at
// 15/s, then probed at 40/s: the probed window admits its 20 in half a second and refuses the
// 21st. The calendar second that holds the refusal holds the last 0.4 s of the window before too
// (6 more): it reads 26, above the allowance. Once the fleet learned where the windows start (the
// arc WindowPhase::share keeps), the seconds are its windows, and it reads exactly 20.
TEST(AdaptiveRate, AFixedWindowIsReadPerWindowOnceItsStartIsLearned) {
  for (const bool learned : {false, true}) {
    SCOPED_TRACE(learned ? "learned" : "calendar seconds");
    AdaptiveState st;
    if (learned) st.windows = {390'000, 21'000};  // the middle: 400 ms
    const Micros first = 10 * kSec + 400'000;
    for (int w = 0; w < 19; ++w) {
      for (int i = 0; i < 15; ++i) note_admitted(st, first + w * kSec + kSec * i / 15 + 1000, 1.0);
    }
    const Micros probed = first + 19 * kSec;
    for (int i = 0; i < 20; ++i) note_admitted(st, probed + kSec * i / 40 + 1000, 1.0);
    const Micros refused = probed + kSec * 20 / 40 + 1000;
    EXPECT_DOUBLE_EQ(admitted_per_window(st, refused), learned ? 20 : 26);
  }
}

// Learned while a second is under way, windows starting 0.9 s into the wall clock's second: the
// seconds move by 0.1 s back, not 0.9 s on, so the window under way keeps its number and what it
// admitted is read (numbered the second before, it read as nothing: a cut to half, 12.5/s for 20).
TEST(AdaptiveRate, LearningTheWindowsKeepsTheSecondUnderWay) {
  AdaptiveState st;
  for (int i = 0; i < 26; ++i) {
    note_demand(st, 9 * kSec + 230'000 * i / 26, 1.0, 1);
    note_admitted(st, 9 * kSec + 230'000 * i / 26, 1.0);
  }
  ASSERT_TRUE(on_throttle(st, 50, 9 * kSec + 233'000, 567'000, 0, 1).cut);
  ASSERT_DOUBLE_EQ(st.level, 26);
  st.windows = {880'000, 40'000};  // learned: the windows start at .900
  for (int i = 0; i < 19; ++i) {
    const Micros t = 10 * kSec + 50'000 + 700'000 * i / 19;
    note_demand(st, t, 1.0, 1);
    note_admitted(st, t, 1.0);
  }
  const ThrottleResult r = on_throttle(st, 50, 10 * kSec + 751'000, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  EXPECT_DOUBLE_EQ(st.level, 19);  // what the window under way admitted
  EXPECT_DOUBLE_EQ(r.to, 0.95 * 19);
}

// What was admitted may lag what is allowed now (the throttles of the last second had not all been
// heard): one cut never goes below half of the rate being sent, nor below the floor.
TEST(AdaptiveRate, OneCutNeverMoreThanHalves) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 2);
  const ThrottleResult r = on_throttle(st, 50, kLead, 0, 0, 1);
  EXPECT_DOUBLE_EQ(r.to, 0.95 * 25);
  EXPECT_DOUBLE_EQ(floor_rate(50), 1.0);     // 2% of the rule
  EXPECT_DOUBLE_EQ(floor_rate(2), 0.1);      // at least 0.1/s
  EXPECT_DOUBLE_EQ(floor_rate(0.05), 0.05);  // never above the rule
  // Throttled again and again with nothing admitted: down to the floor, never under it.
  Micros now = kLead;
  for (int i = 0; i < 20; ++i) {
    now += kSec;
    second_of(st, now - kSec, 60, 0);
    on_throttle(st, 50, now, 0, 0, 1);
  }
  EXPECT_DOUBLE_EQ(effective_rate(st, 50, now), floor_rate(50));
}

TEST(AdaptiveRate, SignalsWithinTheDebounceCountButCutOnce) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 50);
  ASSERT_TRUE(on_throttle(st, 50, kLead, 0, 0, 1).cut);
  const double held = effective_rate(st, 50, kLead);
  traffic(st, kLead, kSec / 2, 30, 10);  // still asked for 60/s, some admitted
  const ThrottleResult again = on_throttle(st, 50, kLead + 499'999, 0, 0, 1);
  EXPECT_FALSE(again.cut);
  EXPECT_FALSE(again.unconfirmed);  // the same episode, not a lack of evidence
  EXPECT_GE(st.throttled.first_at, kLead + 499'999);  // counted
  EXPECT_DOUBLE_EQ(effective_rate(st, 50, kLead + 499'999), held);
  EXPECT_TRUE(on_throttle(st, 50, kLead + kSec / 2, 0, 0, 1).cut);  // a new episode
}

// Refused again within a second of a cut, nothing admitted since: the pause after the cut ended
// before the window that refused turned (a fixed window whose start is not learned yet). That says
// nothing of the allowance (read, it would be the time since the cut, nearly all of it pause, and
// halve the rate): a pause again, no cut. Anything admitted since, or a second later, is a signal.
TEST(AdaptiveRate, RefusedBeforeTheWindowTurnedPausesAgainWithoutACut) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 20);
  const ThrottleResult first = on_throttle(st, 50, kLead, 600'000, 0, 1);
  ASSERT_TRUE(first.cut);
  const double held = effective_rate(st, 50, kLead);
  const Micros early = kLead + 620'000;  // just after the pause ended, before the window turned
  traffic(st, kLead + 600'000, 20'000, 2, 0);
  const ThrottleResult again = on_throttle(st, 50, early, 190'000, 0, 1);
  EXPECT_FALSE(again.cut);
  EXPECT_FALSE(again.unconfirmed);
  EXPECT_TRUE(again.paused);
  EXPECT_EQ(st.pause_until, early + 190'000);
  EXPECT_DOUBLE_EQ(effective_rate(st, 50, early), held);
  for (const Micros at : {Micros{700'000}, Micros{1'000'000}}) {
    AdaptiveState s2 = st;
    if (at < 1'000'000) note_admitted(s2, kLead + 650'000, 1.0);  // the window turned: admitted
    EXPECT_TRUE(on_throttle(s2, 50, kLead + at, 0, 0, 1).cut) << at;
  }
}

// After a cut the rate is held for the hold (0.5 s), then probes on T (1 + 0.05 x^3): flat for a
// second (5% up at 1 s), steep after (x3.7 at 4 s), until it reaches the rule and stops adapting.
TEST(AdaptiveRate, HoldsThenProbesOnTheCurveUpToTheRule) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 10);
  const ThrottleResult r = on_throttle(st, 50, kLead, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  const double target = r.to;
  ASSERT_DOUBLE_EQ(target, 0.95 * 25);  // half of 50: the estimate (10) was below it
  Micros now = kLead;
  for (int tenth = 1; tenth <= 60; ++tenth) {
    traffic(st, now, kSec / 10, 6, 0);  // still asked for 60/s
    now += kSec / 10;
    const double x = (static_cast<double>(now - kLead) - 500'000.0) / 1e6;
    const double expect = x <= 0 ? target : target * (1 + 0.05 * x * x * x);
    const double rate = effective_rate(st, 50, now);
    if (expect >= 50) {
      EXPECT_DOUBLE_EQ(rate, 50) << "t=" << tenth / 10.0;
      EXPECT_DOUBLE_EQ(st.target, 0);  // back to the rule
      break;
    }
    EXPECT_NEAR(rate, expect, 1e-9) << "t=" << tenth / 10.0;
  }
  EXPECT_DOUBLE_EQ(st.target, 0);
}

// The same level refused again soon after: the hold doubles (0.5, 1, 2 s), capped at 3 s. A
// different level, or a cut long after the last, starts again at 0.5 s.
TEST(AdaptiveRate, TheSameLevelRefusedAgainIsProbedLessOften) {
  AdaptiveState st;
  Micros now = 0;
  for (; now < kLead; now += kSec) second_of(st, now, 20, 20);
  std::vector<Micros> holds;
  for (int i = 0; i < 4; ++i) {  // asked for 20/s, and 20/s admitted: each cut estimates 20
    for (int k = 3; k >= 1; --k) second_of(st, now + (3 - k) * kSec, 20, 20);
    now += 3 * kSec;
    const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
    ASSERT_TRUE(r.cut) << i;
    holds.push_back(st.hold_us);
    EXPECT_EQ(st.epoch, now + st.hold_us);
  }
  EXPECT_EQ(holds, (std::vector<Micros>{500'000, 1'000'000, 2'000'000, 3'000'000}));
  for (int k = 0; k < 3; ++k) second_of(st, now + k * kSec, 10, 10);  // a different level: it dropped
  now += 3 * kSec;
  ASSERT_TRUE(on_throttle(st, 50, now, 0, 0, 1).cut);
  EXPECT_EQ(st.hold_us, 500'000);
  now += 40 * kSec;  // long after
  second_of(st, now - kSec, 10, 10);
  ASSERT_TRUE(on_throttle(st, 50, now, 0, 0, 1).cut);
  EXPECT_EQ(st.hold_us, 500'000);
}

// A low level is probed less often still: a refused probe costs about one request, so under
// 10/s the hold grows to 1 / (probe_cost x level) s less the second the probe takes to cross the
// level, up to 10 s. At 5/s: 0.5, 1, 2, 4, then 7 s (at 3 s, one request in 20 would be refused);
// at 6/s, 5.67 s (a whole microsecond: 1e6 / 0.15 - 1e6, cut down); at 2/s, 10 s; at 12/s, 3 s as
// before.
TEST(AdaptiveRate, ALowLevelIsProbedLessOftenThanAHighOne) {
  // Then asked for three times `level`, admitted `level` a second; refused at the end of the
  // first second in which the probe sent more than the level: each cut estimates `level` again.
  const auto holds_at = [](int level, int cuts) {
    AdaptiveState st;
    Micros now = 0;
    for (; now < kLead; now += kSec) second_of(st, now, level, level);  // the first cut reads `level` too
    std::vector<Micros> holds;
    for (int i = 0; i < cuts; ++i) {
      if (i > 0) {
        do {
          second_of(st, now, 3 * level, level);
          now += kSec;
        } while (effective_rate(st, 50, now) <= level);
      }
      if (!on_throttle(st, 50, now, 0, 0, 1).cut) ADD_FAILURE() << "cut " << i;
      EXPECT_DOUBLE_EQ(st.level, level) << "cut " << i;
      holds.push_back(st.hold_us);
    }
    return holds;
  };
  EXPECT_EQ(holds_at(12, 6), (std::vector<Micros>{500'000, 1'000'000, 2'000'000, 3'000'000, 3'000'000, 3'000'000}));
  EXPECT_EQ(holds_at(5, 6), (std::vector<Micros>{500'000, 1'000'000, 2'000'000, 4'000'000, 7'000'000, 7'000'000}));
  EXPECT_EQ(holds_at(6, 6).back(), 5'666'666);
  EXPECT_EQ(holds_at(2, 6).back(), 10'000'000);
}

// Refused while probing above the level the last cut estimated: the allowance is what the last
// second admitted if more (it rose), and no less than that level unless the average since the
// cut is less too (20, then 16: 18/s; the level was read high). Refused at or under that level: it
// dropped, to what was admitted a second since that cut.
TEST(AdaptiveRate, ARefusedProbeReadsTheLevelOrARiseAndADropIsFollowed) {
  for (const int last_second : {16, 22}) {
    AdaptiveState st;
    Micros now = cut_after_lead(st, 36, 20);  // sending 36/s: one cut can reach 20
    second_of(st, now, 60, 20);
    second_of(st, now + kSec, 60, last_second);
    now += 2 * kSec;
    const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
    ASSERT_TRUE(r.cut);
    ASSERT_GT(r.from, 20);  // probing above the level
    // 22 is the same level (within a quarter of 20): the mean of the two (never above the 22.2 sent).
    EXPECT_DOUBLE_EQ(st.level, last_second < 20 ? 18 : 21) << last_second;
  }
  AdaptiveState st;
  Micros now = cut_after_lead(st, 36, 20);  // sending 36/s: one cut can reach 20, held at 19 for 0.5 s...
  traffic(st, now, kSec / 2, 30, 6);                    // ...and the supplier admits 12 a second
  now += kSec / 2;
  const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  EXPECT_DOUBLE_EQ(r.from, 19);
  EXPECT_DOUBLE_EQ(st.level, 12);
  EXPECT_DOUBLE_EQ(r.to, 0.95 * 12);
}

// Refused at or under the level soon after a cut: the level was wrong, and what was admitted since
// is the allowance (16 or 12, against 20). Within a quarter of the level it is the same level found
// again, probed less often (a longer hold), but not averaged with the level it refutes (a drop
// from 20 to 12/s first read as 15.6 was held at the means, 12.9 and then 12.1, and refused again
// at each).
TEST(AdaptiveRate, AThrottleUnderTheLevelIsReadAsItIsAndTheSameLevelHeldLonger) {
  for (const int admitted : {16, 12}) {
    AdaptiveState st;
    Micros now = cut_after_lead(st, 36, 20);  // sending 36/s: one cut reaches 20, held at 19
    traffic(st, now, kSec, 40, admitted);
    now += kSec;
    const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
    ASSERT_TRUE(r.cut);
    EXPECT_LE(r.from, 20);  // at or under the level: the allowance dropped, or was read high
    EXPECT_DOUBLE_EQ(st.level, admitted);
    EXPECT_EQ(st.hold_us, admitted == 16 ? 1'000'000 : 500'000);  // 16 is within a quarter of 20
    EXPECT_DOUBLE_EQ(r.to, 0.95 * st.level);
  }
}

// A drop refused in a fixed window after a pause: the time since the last cut includes the pause,
// through which the window had nothing left to give, so the average since reads low (12 over
// 1.9 s: 6.3/s, and a cut would stop at half the rate sent, 9.5); the window that refused has
// admitted 12 so far, and that stands.
TEST(AdaptiveRate, ADropIsNoLowerThanTheWindowThatRefused) {
  AdaptiveState st;
  Micros now = cut_after_lead(st, 36, 20, kSec);  // level 20, paused to the next window
  ASSERT_FALSE(HasFailure());
  traffic(st, now + kSec, 900'000, 19, 12);                // that window: 12 admitted, then refused
  now += kSec + 900'000;
  const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  EXPECT_DOUBLE_EQ(r.from, 19);
  EXPECT_DOUBLE_EQ(st.level, 12);
  EXPECT_DOUBLE_EQ(r.to, 0.95 * 12);
}

// A probe refused soon after passing the level raises it by at most a quarter (a token bucket's
// refilled burst let it through for a while): 40 read as 25, within a quarter of the level, so
// the mean, 22.5 (no longer raised to half the rate sent, 25); one that got more than a second's
// worth through above the level found a rise, and the last second's admissions stand.
TEST(AdaptiveRate, ARefusedProbeRaisesTheLevelByAQuarterUnlessMuchWentThroughAboveIt) {
  for (const bool rose : {false, true}) {
    AdaptiveState st;
    Micros now = cut_after_lead(st, 36, 20);
    // Asked for 60/s from now on; the probe climbs. The supplier admitted 20/s, then (a burst, or a
    // rise) 40 in the last second.
    for (int k = 0; k < 3; ++k) second_of(st, now + k * kSec, 60, rose ? 40 : 20);
    second_of(st, now + 3 * kSec, 60, 40);
    now += 4 * kSec;
    const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
    ASSERT_TRUE(r.cut);
    ASSERT_GT(r.from, 40);  // sending above what it admitted
    EXPECT_DOUBLE_EQ(st.level, rose ? 40 : 22.5) << rose;
  }
}

// A refused probe's reading bounded to a quarter above the level is a reading, not a lag: the cut
// goes no lower than half of it, not half the rate sent. A token bucket's refilled burst let the
// probe climb to 35.8/s before it refused (12, 14, 16, 18 admitted a second, over a level of 12:
// not far enough above their average, 15, to be read as a drained burst); the reading, 18, is
// bounded to 15, which is within a quarter of the level: the mean, 13.5. Half the rate sent
// (17.9) held it at 17 before, over the allowance, and a new level each time.
TEST(AdaptiveRate, ABoundedReadingIsNotRaisedToHalfTheRateSent) {
  AdaptiveState st;
  Micros now = cut_after_lead(st, 12, 12);  // level 12, held at 11.4 for 0.5 s
  const int admitted[] = {12, 14, 16, 18};
  for (const int a : admitted) {
    second_of(st, now, 60, a);
    now += kSec;
  }
  const double sent = effective_rate(st, 50, now);
  ASSERT_GT(sent, 35);  // 11.4 (1 + 0.05 x 3.5^3)
  const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  EXPECT_DOUBLE_EQ(st.level, 13.5);
  EXPECT_DOUBLE_EQ(r.to, 0.95 * 13.5);
  EXPECT_EQ(st.hold_us, 1'000'000);  // the same level, refused again
}

// A token bucket's probe is refused once the burst it refilled in the hold is spent, at two or
// three times the allowance: the last whole second admitted 17 against an allowance of 12, and a
// quarter above the level (15) would still be read high, held above the allowance and refused
// again. A reading this far above the average since the last cut is that burst: the bucket was
// empty at both refusals, so the average (45 in 3.8 s) is the allowance, and replaces the bounded
// reading (13.5 without this: 15, within a quarter of the level, averaged with it; still above
// the allowance).
TEST(AdaptiveRate, ATokenBucketsDrainedBurstIsNotReadAsTheAllowance) {
  AdaptiveState st;
  Micros now = cut_after_lead(st, 20, 12);
  ASSERT_FALSE(HasFailure());
  second_of(st, now, 60, 10);  // held under 12 (the bucket refills), then the probe
  second_of(st, now + kSec, 60, 12);
  second_of(st, now + 2 * kSec, 60, 17);
  traffic(st, now + 3 * kSec, 800'000, 48, 6);
  now += 3 * kSec + 800'000;
  const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  ASSERT_GT(r.from, 30);  // probing far above the level
  EXPECT_DOUBLE_EQ(st.level, 45 / 3.8);
  EXPECT_DOUBLE_EQ(r.to, 0.95 * st.level);
}

// A quiet spell since the last cut (5 asked a second for 20 s under a level of 12) says nothing
// of the allowance: the average since the cut (6/s) is no reading of a drained burst, nor a
// reason to read the level lower. The probe, when callers ask for more again, is refused at the
// same level, read as before: the reading bounded to a quarter above the level, and the mean.
TEST(AdaptiveRate, AQuietSpellIsNoReadingOfTheAllowance) {
  AdaptiveState st;
  Micros now = cut_after_lead(st, 20, 12);
  ASSERT_FALSE(HasFailure());
  for (int k = 0; k < 20; ++k, now += kSec) {
    second_of(st, now, 5, 5);
    effective_rate(st, 50, now + kSec - 1);
  }
  // Asked for 60/s: the probe climbs (12, then 19 admitted: the bucket's burst).
  for (int k = 0; k < 20; ++k, now += kSec / 10) {
    traffic(st, now, kSec / 10, 6, k < 10 ? (k % 5 == 0 ? 2 : 1) : (k % 10 < 9 ? 2 : 1));
    effective_rate(st, 50, now + kSec / 10 - 1);
  }
  const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  ASSERT_GT(r.from, 15);  // probing above the level
  EXPECT_DOUBLE_EQ(st.level, (15 + 12) / 2.0);
}

// A fixed window refusing a probe after a pause (Retry-After): the pause is left out of the
// average the reading is compared with (its windows had nothing to give), so the full window (20)
// stands. Over the whole time since the cut the average is 16.3/s, and a reading a fifth above it
// would have been taken for a token bucket's drained burst.
TEST(AdaptiveRate, AFixedWindowsFullReadingAfterAPauseIsNotTakenForABurst) {
  AdaptiveState st;
  Micros now = cut_after_lead(st, 36, 20, 660'000);  // level 20, paused 0.66 s
  ASSERT_FALSE(HasFailure());
  traffic(st, now + 660'000, 340'000, 6, 4);  // held at 19, starting empty
  second_of(st, now + kSec, 60, 14);
  second_of(st, now + 2 * kSec, 60, 19);
  traffic(st, now + 3 * kSec, 500'000, 30, 20);  // the probe fills a window
  now += 3 * kSec + 500'000;
  const ThrottleResult r = on_throttle(st, 50, now, 0, 0, 1);
  ASSERT_TRUE(r.cut);
  ASSERT_GT(r.from, 20);  // probing above the level
  EXPECT_DOUBLE_EQ(st.level, 20);
}

// A long pause counts as one second: a supplier's bucket fills once, however long it waits.
TEST(AdaptiveRate, ALongPauseCountsAsOneSecondOfTheEstimate) {
  AdaptiveState st;
  Micros now = 0;
  for (; now < kLead; now += kSec) second_of(st, now, 60, 20);
  ASSERT_TRUE(on_throttle(st, 50, now, 0, 0, 1).cut);
  second_of(st, now, 60, 18);
  now += kSec;
  ASSERT_TRUE(on_throttle(st, 50, now, 10 * kSec, 0, 1).cut);  // paused 10 s
  EXPECT_DOUBLE_EQ(st.level, 18);
  now += 10 * kSec;  // the pause is over
  second_of(st, now, 60, 22);
  now += kSec;
  ASSERT_TRUE(on_throttle(st, 50, now, 0, 0, 1).cut);
  EXPECT_DOUBLE_EQ(st.level, 22.0 / 2);  // the last second of the pause and the one after it
}

// One caller's own throttles among other callers' requests cut nothing (counted unconfirmed);
// two callers throttled within 2 s cut; a caller that is the only one asking cuts.
TEST(AdaptiveRate, ACutNeedsEvidenceThatTheInterfaceIsThrottled) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 50, /*callers=*/6);
  for (int i = 0; i < 100; ++i) {  // caller 7's 429s, 10 a second for 10 s, among the others' traffic
    const Micros at = kLead + i * kSec / 10;
    second_of(st, at, 6, 5, 6);
    note_demand(st, at, 1.0, 7);
    const ThrottleResult r = on_throttle(st, 50, at, 1 * kSec, 0, 7);
    EXPECT_FALSE(r.cut) << i;
    EXPECT_TRUE(r.unconfirmed) << i;
    EXPECT_FALSE(r.paused) << i;
  }
  EXPECT_DOUBLE_EQ(st.target, 0);
  EXPECT_DOUBLE_EQ(effective_rate(st, 50, kLead + 10 * kSec), 50);
  // A throttle for a second caller within 2 s of caller 7's last: the interface is throttled.
  const ThrottleResult two = on_throttle(st, 50, kLead + 10 * kSec + kSec, 0, 0, 3);
  EXPECT_TRUE(two.cut);
  // The only caller asking: its throttles are the interface's.
  AdaptiveState alone;
  for (Micros t = 0; t < kLead; t += kSec) second_of(alone, t, 60, 50, 1);
  EXPECT_TRUE(on_throttle(alone, 50, kLead, 0, 0, 1).cut);
  // ...but not once another caller asked within the window.
  AdaptiveState joined;
  for (Micros t = 0; t < kLead; t += kSec) second_of(joined, t, 60, 50, 1);
  note_demand(joined, kLead - kSec, 1.0, 2);
  note_demand(joined, kLead - 1, 1.0, 1);
  EXPECT_TRUE(on_throttle(joined, 50, kLead, 0, 0, 1).unconfirmed);
}

TEST(AdaptiveRate, CappedAtDemandAndTheCurveWaitsForIt) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 29);
  Micros now = kLead;
  on_throttle(st, 50, now, 0, 0, 1);  // held at 0.95 * 29
  // The interface is now asked for 5/s only, for 20 s: the rate never shows more than that, and
  // the curve does not advance while nobody asks for it.
  for (int i = 0; i < 200; ++i) {
    traffic(st, now, kSec / 10, i % 2, 0);  // 5/s
    now += kSec / 10;
    const double rate = effective_rate(st, 50, now);
    if (i >= 10) {
      EXPECT_LE(rate, 5.0 + 1e-9) << i;
    }
  }
  EXPECT_GT(st.target, 0);  // still adapting: 20 s of a 5/s demand proved nothing above it
  second_of(st, now, 60, 0);
  now += kSec;
  const double resumed = effective_rate(st, 50, now);
  EXPECT_GT(resumed, 27);  // from where the curve stood, not from scratch...
  EXPECT_LT(resumed, 40);  // ...and not at the rule at once
}

TEST(AdaptiveRate, RetryAfterPausesWithJitterAndCapsAtTheMaximum) {
  AdaptiveState st;
  for (Micros t = 0; t < kLead; t += kSec) second_of(st, t, 60, 50);
  const ThrottleResult r = on_throttle(st, 50, kLead, 3 * kSec, 120'000, 1);
  EXPECT_TRUE(r.paused);
  EXPECT_EQ(r.pause_until, kLead + 3 * kSec + 120'000);
  EXPECT_EQ(st.epoch, r.pause_until + 500'000);  // the hold starts when sending may resume
  AdaptiveState capped;
  for (Micros t = 0; t < kLead; t += kSec) second_of(capped, t, 60, 50);
  AdaptiveParams p;
  p.max_pause_us = 10 * kSec;
  EXPECT_EQ(on_throttle(capped, 50, kLead, 3600 * kSec, 0, 1, p).pause_until, kLead + 10 * kSec);
  // A pause already longer is not shortened by a later, shorter one.
  second_of(st, kLead, 60, 0);
  const ThrottleResult shorter = on_throttle(st, 50, kLead + kSec, 1 * kSec, 0, 1);
  EXPECT_TRUE(shorter.cut);
  EXPECT_FALSE(shorter.paused);
  EXPECT_EQ(st.pause_until, kLead + 3 * kSec + 120'000);
  EXPECT_FALSE(adaptive_rested(st, kLead + 2 * kSec));
}

// A state with nothing left in it decides as a missing one: forgotten only once its counts, its
// callers' window and its last cut's recency have all run out.
TEST(AdaptiveRate, RestedOnlyOnceNothingInItCounts) {
  AdaptiveState st;
  second_of(st, 0, 10, 10);
  EXPECT_FALSE(adaptive_rested(st, kSec));
  EXPECT_FALSE(adaptive_rested(st, 2 * kSec));  // the callers' window (2 s) is not over
  EXPECT_TRUE(adaptive_rested(st, 3 * kSec));
  on_throttle(st, 50, 3 * kSec, 0, 0, 1);  // the only caller: cuts
  ASSERT_GT(st.target, 0);
  EXPECT_FALSE(adaptive_rested(st, 10 * kSec));
}

TEST(AdaptiveRate, CallerIdsAreNonZeroAndFitADouble) {
  EXPECT_NE(caller_id(""), 0u);
  EXPECT_LT(caller_id("127.0.0.1"), std::uint64_t{1} << 53);
  EXPECT_NE(caller_id("10.0.0.1"), caller_id("10.0.0.2"));
  EXPECT_EQ(caller_id("10.0.0.1"), caller_id("10.0.0.1"));
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

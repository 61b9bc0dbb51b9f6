// Where a supplier's windows start, learned from its refusals and admissions (limiter/window_phase.hpp),
// on numbers for a clock.
#include <gtest/gtest.h>

#include "tollgate/limiter/window_phase.hpp"

namespace tollgate::limiter {
namespace {

constexpr Micros kSec = 1'000'000, kMs = 1'000;

TEST(WindowPhase, UntilLearnedWindowsStartOnTheWholeSecond) {
  WindowPhase w;
  EXPECT_FALSE(w.learned());
  EXPECT_EQ(w.until_next(5 * kSec + 300 * kMs), 700 * kMs);
  EXPECT_EQ(w.until_next(5 * kSec), kSec);  // at a boundary: the next one
  EXPECT_FALSE(w.note_admitted(5 * kSec));  // no refusal to pair with
  // The window a request sent at 5.3 s was in ends at 6 s, however late its answer came.
  EXPECT_EQ(w.next_after(5 * kSec + 300 * kMs), 6 * kSec);
  EXPECT_EQ(w.next_after(-300 * kMs), 0);
}

// Two refusals less than a second apart, nothing admitted between, are one window's: windows
// starting 100 ms into the second, the first refused at .38 (the window is full), the pause to the
// whole second (nothing learned yet) ends before it turns, refused again at 1.00: the next window
// starts in (1.00, 1.38], and the pause after the second refusal ends at that arc's middle, not
// at 2.00. The admission after it narrows the arc from the other side.
TEST(WindowPhase, TwoRefusalsOfOneWindowAreAnArc) {
  WindowPhase w;
  w.note_refused(3 * kSec + 380 * kMs);
  EXPECT_FALSE(w.learned());
  w.note_refused(4 * kSec);
  ASSERT_TRUE(w.learned());
  EXPECT_EQ(w.arc_start(), 0);
  EXPECT_EQ(w.arc_width(), 380 * kMs);
  EXPECT_EQ(w.take_pair().width, 380 * kMs);  // told to the store as a pair's
  EXPECT_EQ(w.next_after(4 * kSec), 4 * kSec + 190 * kMs);
  EXPECT_TRUE(w.note_admitted(4 * kSec + 190 * kMs));  // admitted: (1.00, 1.19]
  EXPECT_EQ(w.arc_width(), 190 * kMs);
  // A second or more apart, or with an admission between, they say nothing.
  WindowPhase v;
  v.note_refused(3 * kSec + 380 * kMs);
  v.note_refused(4 * kSec + 380 * kMs);
  EXPECT_FALSE(v.learned());
  v.note_admitted(4 * kSec + 400 * kMs);  // a pair (.38, .40]
  v.note_refused(4 * kSec + 700 * kMs);
  EXPECT_EQ(v.arc_width(), 20 * kMs);
}

// The first pair: the boundary lies between the refusal and the admission after it.
TEST(WindowPhase, APairIsAnArcThatHoldsTheBoundary) {
  WindowPhase w;
  w.note_refused(7 * kSec + 430 * kMs);
  w.note_refused(7 * kSec + 480 * kMs);  // the latest refusal counts (the two: (.48, 1.43])
  EXPECT_TRUE(w.waiting());
  EXPECT_TRUE(w.note_admitted(7 * kSec + 520 * kMs));
  EXPECT_FALSE(w.waiting());
  EXPECT_EQ(w.arc_start(), 480 * kMs);
  EXPECT_EQ(w.arc_width(), 40 * kMs);
  EXPECT_EQ(w.phase(), 500 * kMs);
  EXPECT_EQ(w.until_next(8 * kSec + 100 * kMs), 400 * kMs);
  EXPECT_EQ(w.until_next(8 * kSec + 600 * kMs), 900 * kMs);
  EXPECT_EQ(w.next_after(8 * kSec + 470 * kMs), 8 * kSec + 500 * kMs);
  EXPECT_EQ(w.next_after(8 * kSec + 530 * kMs), 9 * kSec + 500 * kMs);
  // Inside the arc: the middle of what is left of it.
  EXPECT_EQ(w.next_after(8 * kSec + 500 * kMs), 8 * kSec + 510 * kMs);
}

// Windows starting 500 ms into the second, a gateway pausing to the whole second until it learns:
// the first pair is wide (a refusal mid-window after a drop, the pause to .0), the next ones narrow
// it from both sides (a refusal at a window's end; a pause to the middle that ended late, one that
// ended early), and it settles on the boundary.
TEST(WindowPhase, ArcsNarrowToTheBoundary) {
  WindowPhase w;
  w.note_refused(200 * kMs);
  ASSERT_TRUE(w.note_admitted(kSec));  // (.2, 1.0]
  EXPECT_EQ(w.phase(), 600 * kMs);
  w.note_refused(3 * kSec + 460 * kMs);
  ASSERT_TRUE(w.note_admitted(3 * kSec + 600 * kMs));  // paused to .6: admitted, late
  EXPECT_EQ(w.arc_start(), 460 * kMs);
  EXPECT_EQ(w.arc_width(), 140 * kMs);
  EXPECT_EQ(w.phase(), 530 * kMs);
  w.note_refused(6 * kSec + 490 * kMs);
  ASSERT_TRUE(w.note_admitted(6 * kSec + 530 * kMs));  // late again
  EXPECT_EQ(w.phase(), 510 * kMs);
  w.note_refused(9 * kSec + 499 * kMs);  // refused at the very end, admitted just after: narrow
  ASSERT_TRUE(w.note_admitted(9 * kSec + 501 * kMs));
  EXPECT_EQ(w.phase(), 500 * kMs);
}

// A refusal inside the arc (its middle passed): the window that refused may end within the rest of
// the arc, or a second later. The pause ends in the middle of the rest, never a second away.
TEST(WindowPhase, ARefusalInsideTheArcWaitsForItsRest) {
  WindowPhase w;
  w.note_refused(333 * kMs);
  ASSERT_TRUE(w.note_admitted(kSec + 175 * kMs));  // (.333, 1.175]: the middle .754
  EXPECT_EQ(w.phase(), 754 * kMs);
  EXPECT_EQ(w.next_after(2 * kSec + 826 * kMs), 3 * kSec + 500);  // the middle of (.826, 1.175]
  EXPECT_EQ(w.next_after(2 * kSec + 200 * kMs), 2 * kSec + 754 * kMs);  // outside the arc: its middle
}

// Across the wall clock's second, and before the epoch's: arcs are of the second, and wrap.
TEST(WindowPhase, ArcsWrapAroundTheSecond) {
  WindowPhase w;
  w.note_refused(9 * kSec + 900 * kMs);
  ASSERT_TRUE(w.note_admitted(10 * kSec + 100 * kMs));  // (.9, 1.1]
  EXPECT_EQ(w.phase(), 0);
  w.note_refused(-2 * kSec - 20 * kMs);
  ASSERT_TRUE(w.note_admitted(-2 * kSec + 40 * kMs));  // (.98, 1.04]: inside the held arc
  EXPECT_EQ(w.arc_start(), 980 * kMs);
  EXPECT_EQ(w.arc_width(), 60 * kMs);
  EXPECT_EQ(w.phase(), 10 * kMs);
  EXPECT_EQ(w.until_next(-5 * kSec + 50 * kMs), 960 * kMs);  // past the arc: its middle, .01
  EXPECT_EQ(w.until_next(-5 * kSec), 20 * kMs);  // inside the arc: the middle of (0, .04]
  w.note_refused(15 * kSec + 850 * kMs);
  ASSERT_TRUE(w.note_admitted(16 * kSec));  // (.85, 1.0]: the held arc starts inside it
  EXPECT_EQ(w.arc_start(), 980 * kMs);
  EXPECT_EQ(w.arc_width(), 20 * kMs);
  EXPECT_EQ(w.phase(), 990 * kMs);
}

// A pair whose arc misses the held one (the supplier's windows moved) starts again from it.
TEST(WindowPhase, AnArcThatMissesStartsAgain) {
  WindowPhase w;
  w.note_refused(480 * kMs);
  ASSERT_TRUE(w.note_admitted(520 * kMs));
  w.note_refused(kSec + 750 * kMs);
  ASSERT_TRUE(w.note_admitted(kSec + 800 * kMs));
  EXPECT_EQ(w.arc_start(), 750 * kMs);
  EXPECT_EQ(w.arc_width(), 50 * kMs);
  EXPECT_EQ(w.phase(), 775 * kMs);
}

// What says nothing: an admission sent before the refusal (its window was still open), and a pair a
// second or more apart (a long pause, a quiet spell: whole windows may lie between).
TEST(WindowPhase, PairsThatSayNothingTeachNothing) {
  WindowPhase w;
  w.note_refused(2 * kSec + 300 * kMs);
  EXPECT_FALSE(w.note_admitted(2 * kSec + 290 * kMs));
  EXPECT_TRUE(w.waiting());
  EXPECT_FALSE(w.note_admitted(3 * kSec + 300 * kMs));
  EXPECT_FALSE(w.waiting());  // the refusal is spent
  EXPECT_FALSE(w.learned());
  EXPECT_EQ(w.phase(), 0);
  // A later refusal replaces an earlier one; an earlier one does not.
  w.note_refused(5 * kSec + 600 * kMs);
  w.note_refused(5 * kSec + 100 * kMs);
  EXPECT_TRUE(w.note_admitted(5 * kSec + 650 * kMs));
  EXPECT_EQ(w.arc_start(), 600 * kMs);
}

// The fleet's arc: each gateway's pairs, told to the store relative to the moment it tells them
// (their clocks need not agree), narrow one arc kept on the store's clock, and each gateway adopts
// it from the reply.
TEST(WindowPhase, AFleetNarrowsOneArcWhateverItsClocksSay) {
  const Micros store_now = 50 * kSec + 200 * kMs;  // the store's clock
  WindowPhase a, b;
  // Gateway a's clock is the store's; gateway b's runs 370 ms ahead. The supplier's windows start
  // at .500 of the store's second (.870 of b's).
  a.note_refused(50 * kSec + 420 * kMs);
  ASSERT_TRUE(a.note_admitted(50 * kSec + 560 * kMs));  // (.42, .56] on a's clock
  b.note_refused(80 * kSec + 850 * kMs);
  ASSERT_TRUE(b.note_admitted(80 * kSec + 900 * kMs));  // (.85, .90] on b's: (.48, .53] on the store's
  WindowPhase::Arc fleet;
  const WindowPhase::Arc told_a = WindowPhase::relative(a.take_pair(), store_now);
  EXPECT_EQ(a.take_pair().width, 0);  // taken once
  const WindowPhase::Arc back_a = WindowPhase::share(fleet, store_now, told_a);
  EXPECT_EQ(fleet.start, 420 * kMs);
  EXPECT_EQ(fleet.width, 140 * kMs);
  EXPECT_EQ(back_a.start, 220 * kMs);  // .42 is 220 ms past now's .20
  const Micros b_now = 80 * kSec + 570 * kMs;  // the same moment on b's clock
  const WindowPhase::Arc told_b = WindowPhase::relative(b.take_pair(), b_now);
  const WindowPhase::Arc back_b = WindowPhase::share(fleet, store_now, told_b);
  EXPECT_EQ(fleet.start, 480 * kMs);
  EXPECT_EQ(fleet.width, 50 * kMs);
  b.adopt(WindowPhase::absolute(back_b, b_now));
  EXPECT_EQ(b.arc_start(), 850 * kMs);
  EXPECT_EQ(b.arc_width(), 50 * kMs);
  // Gateway a never saw b's pair, and now holds the fleet's arc on its own clock.
  a.adopt(WindowPhase::absolute(WindowPhase::share(fleet, store_now, {}), store_now));
  EXPECT_EQ(a.arc_start(), 480 * kMs);
  EXPECT_EQ(a.arc_width(), 50 * kMs);
  EXPECT_EQ(a.phase(), 505 * kMs);
  // Nothing learned yet is nothing adopted; a pair that says nothing is not kept.
  WindowPhase::Arc none;
  EXPECT_EQ(WindowPhase::share(none, store_now, {}).width, 0);
  EXPECT_EQ(WindowPhase::share(none, store_now, {100 * kMs, kSec}).width, 0);
  a.adopt({});
  EXPECT_EQ(a.arc_width(), 50 * kMs);
}

}  // namespace
}  // namespace tollgate::limiter

// The advertised allowance's arithmetic (limiter/advertised.hpp), on numbers for a clock.
#include <gtest/gtest.h>

#include "tollgate/limiter/advertised.hpp"

namespace tollgate::limiter {
namespace {

constexpr Micros kSec = 1'000'000;

// Grants `n` permits one by one with their slots at `slot`, as a store counts them.
void grant(Advertised& a, int n, Micros slot = 0) {
  for (int i = 0; i < n; ++i) advert_granted(a, 1, slot);
}

TEST(Advertised, NothingAdvertisedLimitsNothing) {
  Advertised a;
  const AdvertLimit l = advert_limit(a, 5 * kSec, 1, 5 * kSec);
  EXPECT_EQ(l.rate, 0);
  EXPECT_EQ(l.closed_until, 0);
  EXPECT_FALSE(advert_live(a, 5 * kSec));
}

// What is left is spread over the time to the reset, less every permit granted since the answer.
TEST(Advertised, WhatIsLeftIsPacedToTheReset) {
  Advertised a;
  grant(a, 3);
  note_advert(a, 10 * kSec, {3, 10, kSec, 0, 0});  // after the third grant: 10 left for 1 s
  AdvertLimit l = advert_limit(a, 10 * kSec, 1, 10 * kSec);
  EXPECT_DOUBLE_EQ(l.rate, 10);
  EXPECT_EQ(l.closed_until, 0);
  grant(a, 4);
  l = advert_limit(a, 10 * kSec + 500'000, 1, 10 * kSec + 500'000);  // 6 left for 0.5 s
  EXPECT_DOUBLE_EQ(l.rate, 12);
  // An hour's allowance is paced over the hour, not spent in its first minute.
  Advertised h;
  note_advert(h, 0, {0, 3600, 3600 * kSec, 3600, 3600 * kSec});
  EXPECT_DOUBLE_EQ(advert_limit(h, 0, 1, 0).rate, 1);
}

// A window used up closes the bucket until it ends; the next window's grants count there.
TEST(Advertised, AUsedUpWindowClosesUntilAWindowWithRoom) {
  Advertised a;
  note_advert(a, 0, {0, 2, 400'000, 0, 0});  // no limit said: nothing known after the reset
  grant(a, 2);
  AdvertLimit l = advert_limit(a, 100'000, 1, 100'000);
  EXPECT_EQ(l.closed_until, 400'000);
  EXPECT_EQ(l.rate, 0);
  // After the reset with nothing said of the next window, the advertisement lapses.
  l = advert_limit(a, 400'000, 1, 400'000);
  EXPECT_EQ(l.closed_until, 0);
  EXPECT_EQ(l.rate, 0);

  Advertised b;
  note_advert(b, 0, {0, 2, 400'000, 3, kSec});  // 3 a second, 2 left until 0.4 s
  grant(b, 2, 100'000);
  l = advert_limit(b, 100'000, 1, 100'000);
  EXPECT_EQ(l.closed_until, 400'000);  // the next window has room
  EXPECT_DOUBLE_EQ(l.rate, 3);
  grant(b, 3, 400'000);  // held for the next window: it is full too
  l = advert_limit(b, 100'000, 1, 100'000);
  EXPECT_EQ(l.closed_until, 1'400'000);
}

// At the reset the next window gives `limit`; the grants held for it count in it.
TEST(Advertised, AWindowRollsOnWithItsHeldGrants) {
  Advertised a;
  note_advert(a, 0, {0, 2, 400'000, 5, kSec});
  grant(a, 2, 100'000);
  grant(a, 2, 450'000);  // 2 in this window, 2 held for the next
  AdvertLimit l = advert_limit(a, 400'000, 1, 400'000);
  EXPECT_EQ(a.reset, 1'400'000);
  EXPECT_EQ(a.left, 5);
  EXPECT_EQ(a.seq, 2);  // the two beyond the old window's remaining are the new one's
  EXPECT_DOUBLE_EQ(l.rate, 3);  // 3 left over 1 s
  // Unused permits of a window do not carry over.
  Advertised b;
  note_advert(b, 0, {0, 5, 400'000, 5, kSec});
  grant(b, 1);
  advert_limit(b, 500'000, 1, 500'000);
  EXPECT_EQ(b.seq, 1);
  EXPECT_EQ(b.left, 5);
  // Several windows passed: everything granted before is old.
  Advertised c;
  note_advert(c, 0, {0, 1, 400'000, 5, kSec});
  grant(c, 3);
  advert_limit(c, 2'500'000, 1, 2'500'000);
  EXPECT_EQ(c.reset, 3'400'000);
  EXPECT_EQ(c.seq, 3);
  // Ten minutes after the last window ended with nobody asking, the assumed ones lapse.
  EXPECT_TRUE(advert_live(c, 3'400'000 + kAdvertForgetUs - 1));
  EXPECT_FALSE(advert_live(c, 3'400'000 + kAdvertForgetUs));
  advert_limit(c, 3'400'000 + kAdvertForgetUs, 1, 3'400'000 + kAdvertForgetUs);
  EXPECT_EQ(c.reset, 0);
}

// The newest report wins; within a window the remaining only falls, so a later reset of the same
// window (rounded up) does not move its end, and more left than known is a new window.
TEST(Advertised, TheNewestReportWinsAndAWindowKeepsItsEarlierEnd) {
  Advertised a;
  grant(a, 10);
  note_advert(a, 0, {5, 10, 700'000, 20, kSec});  // as of grant 5: 10 left, so 5 now
  EXPECT_DOUBLE_EQ(a.left - (a.granted - a.seq), 5);
  note_advert(a, 100'000, {4, 50, 900'000, 20, kSec});  // older than what is known: dropped
  EXPECT_EQ(a.seq, 5);
  EXPECT_EQ(a.left, 10);
  note_advert(a, 200'000, {8, 6, kSec, 20, kSec});  // same window (6 <= 10 - 3), its end rounded up
  EXPECT_EQ(a.reset, 700'000);
  EXPECT_EQ(a.left, 6);
  EXPECT_EQ(a.seq, 8);
  note_advert(a, 300'000, {9, 1, 200'000, 20, kSec});  // fewer left and an earlier end: taken whole
  EXPECT_EQ(a.reset, 500'000);
  note_advert(a, 400'000, {10, 19, kSec, 20, kSec});  // more left than known: a new window
  EXPECT_EQ(a.reset, 1'400'000);
  EXPECT_EQ(a.left, 19);
  // A count the store no longer has (it forgot the bucket) is its count now.
  note_advert(a, 500'000, {99, 3, kSec, 20, kSec});
  EXPECT_EQ(a.seq, 10);
  // Malformed reports change nothing.
  const Advertised before = a;
  note_advert(a, 500'000, {10, -1, kSec, 20, kSec});
  note_advert(a, 500'000, {10, 2, -5, 20, kSec});
  EXPECT_EQ(a.left, before.left);
  EXPECT_EQ(a.reset, before.reset);
}

}  // namespace
}  // namespace tollgate::limiter

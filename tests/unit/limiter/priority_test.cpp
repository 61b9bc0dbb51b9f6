// Priority classes and request cost in the bucket arithmetic (docs/priority.md): a reserve left
// for the classes above, and N permits taken in one step. Time is a plain variable.
#include <gtest/gtest.h>

#include <random>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {
namespace {

Shape ten_per_second() {
  BucketParams p;
  p.rate = 10;  // interval 100 ms
  p.burst = 10;
  return shape_of(p);
}

TEST(PriorityReserve, ALowerClassStopsAtTheReserveWhenItMayNotWait) {
  const Shape s = ten_per_second();
  BucketState st = full_state(s, 0);
  int granted = 0;
  for (int i = 0; i < 20; ++i) granted += try_acquire(st, s, Mode::pay_now, 1, 0, 0, 3.0).granted ? 1 : 0;
  EXPECT_EQ(granted, 7);  // 10 stored, 3 kept
  EXPECT_DOUBLE_EQ(st.stored, 3.0);
  const Decision refused = try_acquire(st, s, Mode::pay_now, 1, 0, 0, 3.0);
  EXPECT_FALSE(refused.granted);
  EXPECT_EQ(refused.retry_after_us, 100'000);  // one more permit makes it 4 = 1 + the reserve
  // The class above takes the reserve at once.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(try_acquire(st, s, Mode::pay_now, 1, 0, 0).wait_us, 0);
  EXPECT_FALSE(try_acquire(st, s, Mode::pay_now, 1, 0, 0).granted);
}

TEST(PriorityReserve, ALowerClassWaitsOnlyForSlotsThatLeaveTheReserve) {
  const Shape s = ten_per_second();
  BucketState st = full_state(s, 0);
  for (int i = 0; i < 7; ++i) ASSERT_EQ(try_acquire(st, s, Mode::pay_now, 1, 500'000, 0, 3.0).wait_us, 0);
  // Each further one is held until its permit and the 3 behind it exist.
  std::vector<Micros> waits;
  for (;;) {
    const Decision d = try_acquire(st, s, Mode::pay_now, 1, 500'000, 0, 3.0);
    if (!d.granted) {
      EXPECT_EQ(d.retry_after_us, 100'000);
      break;
    }
    waits.push_back(d.wait_us);
  }
  EXPECT_EQ(waits, (std::vector<Micros>{100'000, 200'000, 300'000, 400'000, 500'000}));
  // It was charged its own permits only: 10 taken, the schedule 200 ms ahead.
  EXPECT_DOUBLE_EQ(st.stored, 0.0);
  EXPECT_EQ(st.next_free, 200'000);
  // The class above queues on the bucket's own schedule, ahead of the held lower class.
  const Decision book = try_acquire(st, s, Mode::pay_now, 1, 500'000, 0);
  EXPECT_TRUE(book.granted);
  EXPECT_EQ(book.wait_us, 300'000);
}

TEST(PriorityReserve, ZeroReserveIsTodaysDecisionExactly) {
  const Shape s = ten_per_second();
  BucketState a = full_state(s, 0), b = a;
  std::mt19937 rng(7);
  Micros t = 0;
  for (int i = 0; i < 2000; ++i) {
    t += static_cast<Micros>(rng() % 90'000);
    const double permits = 1 + static_cast<double>(rng() % 3);
    const Micros timeout = static_cast<Micros>(rng() % 400'000);
    const Decision x = try_acquire(a, s, Mode::pay_now, permits, timeout, t);
    const Decision y = try_acquire(b, s, Mode::pay_now, permits, timeout, t, 0.0);
    ASSERT_EQ(x.granted, y.granted);
    ASSERT_EQ(x.wait_us, y.wait_us);
    ASSERT_EQ(x.retry_after_us, y.retry_after_us);
    ASSERT_EQ(a.next_free, b.next_free);
    ASSERT_EQ(a.stored, b.stored);
  }
}

TEST(PriorityReserve, TheReserveHoldsForTheClassAboveUnderAFlood) {
  // look floods at 100/s, book asks at 3/s; book never waits past its window, and in any window
  // the two together never take more than burst + rate * T.
  const Shape s = ten_per_second();
  BucketState st = full_state(s, 0);
  int book_refused = 0, book_granted = 0, total = 0;
  for (Micros t = 0; t < 20'000'000; t += 10'000) {
    if (try_acquire(st, s, Mode::pay_now, 1, 500'000, t, 3.0).granted) ++total;
    if (t % 330'000 == 0) {
      const Decision d = try_acquire(st, s, Mode::pay_now, 1, 500'000, t);
      if (d.granted) ++book_granted, ++total;
      else ++book_refused;
    }
  }
  EXPECT_EQ(book_refused, 0);
  EXPECT_GT(book_granted, 55);
  EXPECT_LE(total, 10 + 10 * 20.5);  // the last grants hold up to the 0.5 s window past the end
  EXPECT_GE(total, 10 * 20 - 10);  // look takes what book leaves
}

TEST(RequestCost, APairTakesEachBucketsOwnPermits) {
  // An interface of cost 1 whose channelCost is 5, on a channel of 10/s.
  const Shape iface = ten_per_second();
  const Shape channel = ten_per_second();
  BucketState a = full_state(iface, 0), b = full_state(channel, 0);
  const PairAsk ask{1, 5, 0, 0};
  EXPECT_EQ(try_acquire_pair(a, iface, b, channel, Mode::pay_now, ask, 0, 0).combined.granted, true);
  EXPECT_EQ(try_acquire_pair(a, iface, b, channel, Mode::pay_now, ask, 0, 0).combined.granted, true);
  EXPECT_DOUBLE_EQ(a.stored, 8.0);
  EXPECT_DOUBLE_EQ(b.stored, 0.0);
  const PairDecision third = try_acquire_pair(a, iface, b, channel, Mode::pay_now, ask, 0, 0);
  EXPECT_FALSE(third.combined.granted);
  EXPECT_EQ(third.bound, 1);                         // the channel refused it
  EXPECT_EQ(third.combined.retry_after_us, 500'000);  // five permits at 100 ms
  const PairDecision held = try_acquire_pair(a, iface, b, channel, Mode::pay_now, ask, 500'000, 0);
  EXPECT_TRUE(held.combined.granted);
  EXPECT_EQ(held.combined.wait_us, 500'000);
  EXPECT_DOUBLE_EQ(a.stored, 7.0);
  EXPECT_EQ(b.next_free, 500'000);
}

TEST(RequestCost, NPermitsInOneStepWaitForTheLastOne) {
  const Shape s = ten_per_second();
  BucketState st = full_state(s, 0);
  EXPECT_TRUE(try_acquire(st, s, Mode::pay_now, 8, 0, 0).granted);
  const Decision refused = try_acquire(st, s, Mode::pay_now, 5, 200'000, 0);
  EXPECT_FALSE(refused.granted);
  EXPECT_EQ(refused.retry_after_us, 100'000);  // its last permit exists at 300 ms
  const Decision d = try_acquire(st, s, Mode::pay_now, 5, 300'000, 0);
  EXPECT_TRUE(d.granted);
  EXPECT_EQ(d.wait_us, 300'000);
  EXPECT_DOUBLE_EQ(d.spent, 2.0);
  EXPECT_EQ(d.cost_us, 300'000);
}

}  // namespace
}  // namespace tollgate::limiter

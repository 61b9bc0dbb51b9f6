// The bucket arithmetic (docs/design.md), to the microsecond. Time is a plain variable:
// these tests never read a clock or sleep.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {
namespace {

using Initial = TokenBucket::Initial;

BucketParams bursty(double rate, Mode mode = Mode::pay_now) {
  BucketParams p;
  p.rate = rate;
  p.mode = mode;
  return p;
}

TEST(TokenBucket, FivePerSecondSpacesRequests200msApart) {
  // Guava: RateLimiter.create(5) with a stopwatch that advances by each sleep.
  TokenBucket b(bursty(5, Mode::pay_later), 0, Initial::empty);
  Micros t = 0;
  std::vector<Micros> waits;
  for (int i = 0; i < 4; ++i) {
    const Decision d = b.acquire(1, t);
    waits.push_back(d.wait_us);
    t += d.wait_us;
  }
  EXPECT_EQ(waits, (std::vector<Micros>{0, 200000, 200000, 200000}));
}

TEST(TokenBucket, PayLaterFirstAcquireIsFreeEvenForManyPermits) {
  TokenBucket b(bursty(5, Mode::pay_later), 0, Initial::empty);
  EXPECT_EQ(b.acquire(10, 0).wait_us, 0);        // paid by the next caller
  EXPECT_EQ(b.acquire(1, 0).wait_us, 2'000'000);  // 10 permits at 200 ms each
}

TEST(TokenBucket, PayNowEmptyBucketWaitsForItsOwnPermit) {
  TokenBucket b(bursty(5), 0, Initial::empty);
  EXPECT_EQ(b.acquire(1, 0).wait_us, 200000);
  EXPECT_EQ(b.acquire(1, 0).wait_us, 400000);
}

TEST(TokenBucket, FullBucketBurstsThenPaces) {
  TokenBucket b(bursty(5), 0, Initial::full);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.acquire(1, 0).wait_us, 0) << i;
  EXPECT_EQ(b.acquire(1, 0).wait_us, 200000);
  EXPECT_EQ(b.acquire(1, 0).wait_us, 400000);
  // next_free is 400 ms; by 600 ms one permit has been stored again, and only one.
  EXPECT_EQ(b.acquire(1, 600000).wait_us, 0);
  EXPECT_EQ(b.acquire(1, 600000).wait_us, 200000);
}

TEST(TokenBucket, TimeoutAdmitsExactlyTheRequestsWhoseSlotFits) {
  TokenBucket b(bursty(5), 0, Initial::full);
  std::vector<Micros> granted;
  int rejected = 0;
  for (int i = 0; i < 20; ++i) {
    const Decision d = b.try_acquire(1, 500000, 0);
    if (d.granted) {
      granted.push_back(d.wait_us);
    } else {
      ++rejected;
      // The 8th slot is at 600 ms; it fits a 500 ms window from 100 ms on. State is unchanged by rejections.
      EXPECT_EQ(d.retry_after_us, 100000);
    }
  }
  EXPECT_EQ(granted, (std::vector<Micros>{0, 0, 0, 0, 0, 200000, 400000}));
  EXPECT_EQ(rejected, 13);
  // At exactly retry_after the same request fits, with a wait of exactly the window.
  const Decision late = b.try_acquire(1, 500000, 100000);
  EXPECT_TRUE(late.granted);
  EXPECT_EQ(late.wait_us, 500000);
  // One microsecond earlier it would not have.
  TokenBucket c(bursty(5), 0, Initial::full);
  for (int i = 0; i < 7; ++i) c.try_acquire(1, 500000, 0);
  EXPECT_FALSE(c.try_acquire(1, 500000, 99999).granted);
}

TEST(TokenBucket, ZeroTimeoutGrantsOnlyImmediatePermits) {
  TokenBucket b(bursty(2), 0, Initial::full);
  EXPECT_TRUE(b.try_acquire(1, 0, 0).granted);
  EXPECT_TRUE(b.try_acquire(1, 0, 0).granted);
  const Decision d = b.try_acquire(1, 0, 0);
  EXPECT_FALSE(d.granted);
  EXPECT_EQ(d.retry_after_us, 500000);
}

TEST(TokenBucket, PayLaterRejectsWhenThePreviousReservationIsBeyondTheTimeout) {
  TokenBucket b(bursty(5, Mode::pay_later), 0, Initial::empty);
  EXPECT_TRUE(b.try_acquire(1, 0, 0).granted);   // free; next_free = 200 ms
  const Decision d = b.try_acquire(1, 100000, 0);
  EXPECT_FALSE(d.granted);
  EXPECT_EQ(d.retry_after_us, 100000);  // next_free - timeout - now
  EXPECT_TRUE(b.try_acquire(1, 100000, 100000).granted);
}

TEST(TokenBucket, FractionsOfStoredPermitsAreKept) {
  BucketParams p = bursty(3);
  TokenBucket b(p, 0, Initial::empty);
  // 100 ms at 3/s stores 0.3 permits; the rest costs 0.7 * 333333.33 us, truncated.
  const Decision d = b.acquire(1, 100000);
  EXPECT_EQ(d.wait_us, 233333);
  EXPECT_DOUBLE_EQ(b.state().stored, 0.0);
}

TEST(TokenBucket, FractionalPermits) {
  TokenBucket b(bursty(5), 0, Initial::empty);
  EXPECT_EQ(b.acquire(0.5, 0).wait_us, 100000);
  EXPECT_EQ(b.acquire(0.25, 0).wait_us, 150000);
}

TEST(TokenBucket, PermitsBeyondMaxPermits) {
  TokenBucket now(bursty(5), 0, Initial::full);
  EXPECT_EQ(now.acquire(10, 0).wait_us, 1'000'000);  // 5 stored + 5 fresh
  EXPECT_EQ(now.acquire(1, 0).wait_us, 1'200'000);
  TokenBucket later(bursty(5, Mode::pay_later), 0, Initial::full);
  EXPECT_EQ(later.acquire(10, 0).wait_us, 0);
  EXPECT_EQ(later.acquire(1, 0).wait_us, 1'000'000);
}

TEST(TokenBucket, StoredPermitsNeverExceedMaxPermits) {
  BucketParams p = bursty(5);
  p.burst = 2;
  TokenBucket b(p, 0, Initial::empty);
  b.acquire(1, 0);  // next_free = 200 ms
  // An hour idle stores only 2.
  EXPECT_EQ(b.acquire(1, 3'600'000'000LL).wait_us, 0);
  EXPECT_EQ(b.acquire(1, 3'600'000'000LL).wait_us, 0);
  EXPECT_EQ(b.acquire(1, 3'600'000'000LL).wait_us, 200000);
}

TEST(TokenBucket, WarmUpIntervalsFallFromColdToStable) {
  // Guava's testWarmUp: create(2.0, 4000 ms, cold factor 3), a stopwatch advanced by each sleep.
  BucketParams p = bursty(2, Mode::pay_later);
  p.warmup_us = 4'000'000;
  TokenBucket b(p, 0, Initial::full);  // a warming bucket starts cold (full)
  EXPECT_DOUBLE_EQ(b.shape().max_permits, 8.0);
  EXPECT_DOUBLE_EQ(b.shape().threshold, 4.0);
  Micros t = 0;
  auto eight = [&] {
    std::vector<Micros> w;
    for (int i = 0; i < 8; ++i) {
      const Decision d = b.acquire(1, t);
      w.push_back(d.wait_us);
      t += d.wait_us;
    }
    return w;
  };
  const std::vector<Micros> cold{0, 1375000, 1125000, 875000, 625000, 500000, 500000, 500000};
  EXPECT_EQ(eight(), cold);
  t += 500000 + 4'000'000;  // repay the last acquire, then rest until cold again
  EXPECT_EQ(eight(), cold);
  t += 500000 + 2'000'000;  // not cold yet: it would take 2 s more
  EXPECT_EQ(eight(), (std::vector<Micros>{0, 500000, 500000, 500000, 500000, 500000, 500000, 500000}));
}

TEST(TokenBucket, WarmUpWithOtherColdFactor) {
  BucketParams p = bursty(1, Mode::pay_later);
  p.warmup_us = 2'000'000;
  p.cold_factor = 5;  // interval 1 s, cold 5 s: threshold 1, max 1 + 2*2/6 = 1.667
  TokenBucket b(p, 0, Initial::full);
  EXPECT_NEAR(b.shape().max_permits, 1.0 + 4.0 / 6.0, 1e-12);
  EXPECT_EQ(b.acquire(1, 0).wait_us, 0);
  // Took 0.667 above the threshold (cost from 5 s down to 1 s: mean 3 s * 0.667 = 2 s) + 0.333 stable.
  // In doubles the first term is 1999999.9999999998 and truncates to 1999999, as Java's (long) does.
  EXPECT_EQ(b.acquire(1, 0).wait_us, 1'999'999 + 333333);
}

TEST(TokenBucket, SetRateKeepsTheReservationAlreadyMade) {
  TokenBucket b(bursty(5, Mode::pay_later), 0, Initial::empty);
  EXPECT_EQ(b.acquire(1, 0).wait_us, 0);
  b.set_rate(10, 0);
  EXPECT_EQ(b.acquire(1, 0).wait_us, 200000);       // the first permit was paid at 5/s
  EXPECT_EQ(b.acquire(1, 200000).wait_us, 100000);  // then 10/s
}

// A full bucket stays exactly full across a rate change: the new maximum, as a store that forgot
// the rested bucket would start it, not old * new / old rounded one ulp below.
TEST(TokenBucket, RescaleKeepsAFullBucketExactlyFull) {
  for (double from : {3.0, 7.0, 49.999, 50.0}) {
    for (double to : {0.3, 1.1, 13.7, 35.000000001, 49.9}) {
      BucketParams a, b;
      a.rate = from;
      b.rate = to;
      const Shape sa = shape_of(a), sb = shape_of(b);
      BucketState st = full_state(sa, 1'000);
      rescale(st, sa, sb, 5'000'000);
      EXPECT_EQ(st.stored, sb.max_permits) << from << " -> " << to;
    }
  }
}

TEST(TokenBucket, SetRateRescalesStoredPermitsToTheNewMaximum) {
  TokenBucket b(bursty(5), 0, Initial::full);
  for (int i = 0; i < 3; ++i) b.acquire(1, 0);  // 2 of 5 left
  b.set_rate(10, 0);                            // 2/5 of 10 = 4 stored, interval 100 ms
  EXPECT_DOUBLE_EQ(b.state().stored, 4.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.acquire(1, 0).wait_us, 0) << i;
  EXPECT_EQ(b.acquire(1, 0).wait_us, 100000);
}

TEST(TokenBucket, SetRateResyncsWithTheOldRateFirst) {
  TokenBucket b(bursty(2), 0, Initial::empty);
  b.set_rate(4, 500000);  // 500 ms at 2/s stored 1 of 2; rescaled: 2 of 4
  EXPECT_DOUBLE_EQ(b.state().stored, 2.0);
}

TEST(TokenBucket, ExplicitBurstStaysOnSetRate) {
  BucketParams p = bursty(5);
  p.burst = 3;
  TokenBucket b(p, 0, Initial::full);
  b.set_rate(50, 0);
  EXPECT_DOUBLE_EQ(b.shape().max_permits, 3.0);
  EXPECT_DOUBLE_EQ(b.state().stored, 3.0);
}

TEST(TokenBucket, TinyRates) {
  TokenBucket b(bursty(0.001), 0, Initial::empty);  // one permit per 1000 s
  EXPECT_EQ(b.acquire(1, 0).wait_us, 1'000'000'000LL);
  const Decision d = b.try_acquire(1, 1'000'000, 0);
  EXPECT_FALSE(d.granted);
  EXPECT_EQ(d.retry_after_us, 2'000'000'000LL - 1'000'000);
}

TEST(TokenBucket, HugeRates) {
  TokenBucket b(bursty(1e6), 0, Initial::empty);  // one permit per microsecond
  EXPECT_EQ(b.acquire(1, 0).wait_us, 1);
  EXPECT_EQ(b.acquire(1000, 0).wait_us, 1001);
  // Above 1e6/s a single permit truncates to 0 us, exactly as Guava's (long) casts do.
  TokenBucket g(bursty(1e9), 0, Initial::empty);
  EXPECT_EQ(g.acquire(1, 0).wait_us, 0);
  EXPECT_EQ(g.acquire(1e6, 0).wait_us, 1000);
}

TEST(TokenBucket, SaturatesInsteadOfWrapping) {
  TokenBucket b(bursty(1e-12), 0, Initial::empty);  // interval 1e18 us
  const Decision d = b.acquire(100, 0);           // cost 1e20 us: beyond int64
  EXPECT_TRUE(d.granted);
  EXPECT_EQ(b.state().next_free, kInfinite);
  const Decision r = b.try_acquire(1, 0, 5);
  EXPECT_FALSE(r.granted);
  EXPECT_GT(r.retry_after_us, 0);
  EXPECT_EQ(saturating_add(kInfinite, 1), kInfinite);
  EXPECT_EQ(truncate_micros(1e30), kInfinite);
  EXPECT_EQ(truncate_micros(2.9), 2);
}

TEST(TokenBucket, ClockGoingBackwardsChangesNothing) {
  TokenBucket b(bursty(5), 1'000'000, Initial::empty);
  const Decision d = b.acquire(1, 500000);  // earlier than creation: no permits stored
  EXPECT_EQ(d.wait_us, 700000);             // released at 1.2 s
}

TEST(TokenBucket, RejectsInvalidParameters) {
  EXPECT_THROW(shape_of(bursty(0)), std::invalid_argument);
  EXPECT_THROW(shape_of(bursty(-1)), std::invalid_argument);
  BucketParams p = bursty(1);
  p.burst = -1;
  EXPECT_THROW(shape_of(p), std::invalid_argument);
  TokenBucket b(bursty(1), 0);
  EXPECT_THROW(b.try_acquire(0, 0, 0), std::invalid_argument);
}

// The fleet guarantee (docs/design.md): over any interval of length T the permits released number at most
// maxPermits + rate * T + 1, whatever the arrival pattern and wait window.
TEST(TokenBucket, NeverReleasesMoreThanBurstPlusRateTimesT) {
  for (int seed = 1; seed <= 5; ++seed) {
    std::mt19937_64 rng(seed);
    const double rate = 1 + static_cast<double>(rng() % 50);
    const Micros window = static_cast<Micros>(rng() % 1'000'000);
    BucketParams p = bursty(rate);
    p.burst = 1 + static_cast<double>(rng() % 20);
    TokenBucket b(p, 0, Initial::full);
    std::vector<Micros> releases;
    Micros t = 0;
    for (int i = 0; i < 3000; ++i) {
      t += static_cast<Micros>(rng() % static_cast<std::uint64_t>(1e6 / rate));  // ~2x the rate
      const Decision d = b.try_acquire(1, window, t);
      if (d.granted) releases.push_back(t + d.wait_us);
    }
    std::sort(releases.begin(), releases.end());
    for (std::size_t i = 0; i < releases.size(); ++i) {
      for (std::size_t j = i; j < releases.size(); ++j) {
        const double T = static_cast<double>(releases[j] - releases[i]) / 1e6;
        if (T > 5) break;
        ASSERT_LE(static_cast<double>(j - i + 1), *p.burst + rate * T + 1) << "seed " << seed << " at " << i;
      }
    }
    // And close to it: over the whole run it admitted at least the rate.
    const double span = static_cast<double>(releases.back() - releases.front()) / 1e6;
    EXPECT_GE(static_cast<double>(releases.size()), rate * span * 0.99) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tollgate::limiter

namespace tollgate::limiter {
namespace {

// A grant that reached no upstream: its permits come back as stored permits, up to the burst,
// whether or not later grants followed it.
TEST(Restore, UnusedPermitsComeBackAsStoredUpToTheBurst) {
  BucketParams p;
  p.rate = 10;  // burst 10 (one second)
  const Shape s = shape_of(p);
  BucketState st = full_state(s, 0);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(try_acquire(st, s, Mode::pay_now, 1, 0, 0).granted);
  EXPECT_DOUBLE_EQ(st.stored, 0);
  ASSERT_TRUE(try_acquire(st, s, Mode::pay_now, 1, 500'000, 0).granted);  // a fresh permit, a queue ahead
  const Micros queued_until = st.next_free;
  EXPECT_TRUE(restore(st, s, 1));
  EXPECT_DOUBLE_EQ(st.stored, 1);
  EXPECT_EQ(st.next_free, queued_until);  // later reservations keep their slots
  // As in Guava, stored permits are reached only at the bucket's next free slot: the next request
  // takes the one given back there, and adds no time after it.
  EXPECT_FALSE(try_acquire(st, s, Mode::pay_now, 1, 0, 1000).granted);
  const Decision d = try_acquire(st, s, Mode::pay_now, 1, 1'000'000, 1000);
  EXPECT_TRUE(d.granted);
  EXPECT_EQ(st.next_free, queued_until);
  EXPECT_DOUBLE_EQ(st.stored, 0);
  // Never above the burst: a full bucket takes nothing back.
  BucketState full = full_state(s, 0);
  EXPECT_FALSE(restore(full, s, 1));
  EXPECT_DOUBLE_EQ(full.stored, 10);
  full.stored = 9.5;
  EXPECT_TRUE(restore(full, s, 3));
  EXPECT_DOUBLE_EQ(full.stored, 10);
}

}  // namespace
}  // namespace tollgate::limiter

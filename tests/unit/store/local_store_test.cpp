#include <gtest/gtest.h>

#include <thread>

#include "support/manual_clock.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::store {
namespace {

using testing::ManualClock;

BucketParams rate(double r) {
  BucketParams p;
  p.rate = r;
  return p;
}

TEST(LocalStore, MissingStateIsAFullRestedBucket) {
  ManualClock clock;
  LocalStore s(clock);
  for (int i = 0; i < 5; ++i) {
    auto d = s.decide({{"/a", rate(5)}, {}, {}, 1, 500000});
    EXPECT_TRUE(d.decision.granted);
    EXPECT_EQ(d.decision.wait_us, 0);
  }
  auto sixth = s.decide({{"/a", rate(5)}, {}, {}, 1, 500000});
  EXPECT_EQ(sixth.decision.wait_us, 200000);
  EXPECT_DOUBLE_EQ(sixth.max_permits, 5);
}

TEST(LocalStore, BucketsAreIndependent) {
  ManualClock clock;
  LocalStore s(clock);
  for (int i = 0; i < 2; ++i) s.decide({{"/a", rate(2)}, {}, {}, 1, 0});
  EXPECT_FALSE(s.decide({{"/a", rate(2)}, {}, {}, 1, 0}).decision.granted);
  EXPECT_TRUE(s.decide({{"/b", rate(2)}, {}, {}, 1, 0}).decision.granted);
}

TEST(LocalStore, ChangedRateRescalesInsteadOfRefilling) {
  ManualClock clock;
  LocalStore s(clock);
  for (int i = 0; i < 5; ++i) s.decide({{"/a", rate(5)}, {}, {}, 1, 0});  // drained
  // The operator doubles the rate: the drained bucket stays drained (no fresh burst).
  auto d = s.decide({{"/a", rate(10)}, {}, {}, 1, 1'000'000});
  EXPECT_TRUE(d.decision.granted);
  EXPECT_EQ(d.decision.wait_us, 100000);
}

// An adaptive bucket follows the allowance the supplier advertises: what is left is spread over the
// time to the reset, never more is granted before it, and a used-up window refuses (or holds) until
// it ends; then, nothing being said of the next window, the rule's own rate applies again.
TEST(LocalStore, AnAdaptiveBucketFollowsTheAdvertisedAllowance) {
  ManualClock clock;
  clock.set(1'000'000'000);
  LocalStore s(clock);
  AcquireRequest req{{"/a", rate(100)}, {}, {}, 1, 0};
  req.adaptive = limiter::Adaptive::on;
  StoreDecision d = s.decide(req);
  ASSERT_TRUE(d.decision.granted);
  EXPECT_EQ(d.grant_seq, 1);
  req.advert = limiter::AdvertReport{1, 4, 500'000, 0, 0};  // its answer: 4 left for 0.5 s
  d = s.decide(req);
  ASSERT_TRUE(d.decision.granted);
  EXPECT_DOUBLE_EQ(d.effective_rate, 8);  // 4 over 0.5 s
  EXPECT_EQ(d.grant_seq, 2);
  req.advert.reset();
  int granted = 1;
  for (int i = 0; i < 20; ++i) {
    clock.advance(10'000);
    d = s.decide(req);
    if (!d.decision.granted) break;
    ++granted;
  }
  EXPECT_EQ(granted, 4);  // never more than advertised
  EXPECT_FALSE(d.decision.granted);
  EXPECT_GE(d.decision.retry_after_us, 500'000 - 30'000);  // not before the reset
  AcquireRequest waits = req;
  waits.timeout_us = 1'000'000;
  d = s.decide(waits);
  ASSERT_TRUE(d.decision.granted);
  EXPECT_GE(d.decision.wait_us, 500'000 - 30'000);  // held for the reset
  clock.advance(500'000);
  d = s.decide(req);
  EXPECT_EQ(d.effective_rate, 100);  // lapsed: the rule's own rate
}

// Shadow follows the advertisement but decides at the configured rate.
TEST(LocalStore, AShadowBucketOnlyReportsTheAdvertisedPace) {
  ManualClock clock;
  clock.set(1'000'000'000);
  LocalStore s(clock);
  AcquireRequest req{{"/a", rate(100)}, {}, {}, 1, 0};
  req.adaptive = limiter::Adaptive::shadow;
  s.decide(req);
  req.advert = limiter::AdvertReport{1, 0, 500'000, 0, 0};  // nothing left
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(s.decide(req).decision.granted);
}

// An adaptive bucket decides at its adapted rate; a pause empties it until it ends, and
// callers who leave cannot bring a slot back inside the pause.
TEST(LocalStore, AnAdaptiveBucketPausesAndARefundNeverReopensThePause) {
  ManualClock clock;
  LocalStore s(clock);
  AcquireRequest req{{"/a", rate(10)}, {}, {}, 1, 2'000'000};
  req.adaptive = limiter::Adaptive::on;
  std::vector<Reservation> held;
  for (int i = 0; i < 25; ++i) {  // 10 at once, then a queue 1.5 s long
    const StoreDecision d = s.decide(req);
    ASSERT_TRUE(d.decision.granted);
    EXPECT_EQ(d.effective_rate, 10);
    if (d.decision.wait_us > 0) held.push_back(d.reservation);
  }
  const AdaptOutcome o = s.adapt(req, 1'000'000, 0);  // Retry-After: 1
  ASSERT_TRUE(o.ok);
  EXPECT_TRUE(o.result.cut && o.result.paused);
  EXPECT_EQ(o.pause_left_us, 1'000'000);
  // Every held caller leaves, newest first: the queue's slots come back, but not inside the pause.
  for (auto it = held.rbegin(); it != held.rend(); ++it) s.give_back_slots(req, *it);
  AcquireRequest now_only = req;
  now_only.timeout_us = 0;
  const StoreDecision refused = s.decide(now_only);
  EXPECT_FALSE(refused.decision.granted);
  EXPECT_GE(refused.decision.retry_after_us, 1'000'000 - 1);  // not before the pause ends
  EXPECT_EQ(refused.paused_us, 1'000'000);
  clock.advance(1'000'000);
  const StoreDecision after = s.decide(req);  // the pause is over: a slot at the adapted rate
  EXPECT_TRUE(after.decision.granted);
  EXPECT_LT(after.effective_rate, 10);
  EXPECT_EQ(after.paused_us, 0);
}

TEST(LocalStore, EvictionOfRestedBucketsChangesNoDecision) {
  ManualClock clock;
  LocalStore s(clock);
  // Many buckets used once, then enough time for all of them to refill.
  constexpr int kKeys = 100000;  // enough for every shard to reach its sweep threshold
  for (int i = 0; i < kKeys; ++i) s.decide({{"/k" + std::to_string(i), rate(1)}, {}, {}, 1, 0});
  EXPECT_EQ(s.size(), static_cast<std::size_t>(kKeys));
  clock.advance(2'000'000);
  for (int i = 0; i < kKeys; ++i) {
    auto d = s.decide({{"/n" + std::to_string(i), rate(1)}, {}, {}, 1, 0});
    ASSERT_TRUE(d.decision.granted);
  }
  EXPECT_LT(s.size(), static_cast<std::size_t>(2 * kKeys) * 3 / 4);  // rested buckets were swept
  // An evicted bucket answers as a full one: exactly one free permit at rate 1, burst 1.
  EXPECT_TRUE(s.decide({{"/k1", rate(1)}, {}, {}, 1, 0}).decision.granted);
  EXPECT_FALSE(s.decide({{"/k1", rate(1)}, {}, {}, 1, 0}).decision.granted);
}

TEST(LocalStore, ChannelAndInterfaceAreAllOrNothing) {
  ManualClock clock;
  LocalStore s(clock);
  const BucketRef channel{"channel:IBE+", rate(3)};
  auto both = [&](const char* url) { return s.decide({{url, rate(10)}, channel, "IBE+", 1, 0}); };
  // The channel's 3 permits are shared by every interface of the channel.
  EXPECT_TRUE(both("/a").decision.granted);
  EXPECT_TRUE(both("/b").decision.granted);
  EXPECT_TRUE(both("/a").decision.granted);
  const StoreDecision d = both("/b");
  EXPECT_FALSE(d.decision.granted);
  EXPECT_TRUE(d.parent_bound);
  EXPECT_EQ(d.decision.retry_after_us, 333333);
  // Nothing was taken from /b by the rejection: it still has 9 of its 10.
  auto view = s.inspect({"/b", rate(10)}, "");
  EXPECT_DOUBLE_EQ(view->stored, 9);
  // The wait is the later of the two slots: the channel's next permit, although /a has stored ones.
  const StoreDecision w = s.decide({{"/a", rate(10)}, channel, "IBE+", 1, 1'000'000});
  EXPECT_TRUE(w.decision.granted);
  EXPECT_TRUE(w.parent_bound);
  EXPECT_EQ(w.decision.wait_us, 333333);
}

TEST(LocalStore, RefundGivesBackOnlyWhatNoLiveReservationFollows) {
  ManualClock clock;
  LocalStore s(clock);
  AcquireRequest req{{"/r", rate(1)}, {}, {}, 1, 5'000'000};
  EXPECT_EQ(s.decide(req).decision.wait_us, 0);           // the stored permit
  const StoreDecision b = s.decide(req);                  // held 1 s
  EXPECT_EQ(b.decision.wait_us, 1'000'000);
  EXPECT_TRUE(s.give_back(req, b.reservation));            // newest: given back
  EXPECT_EQ(s.decide(req).decision.wait_us, 1'000'000);   // the next caller takes its place
  const StoreDecision d = s.decide(req);                   // 2 s
  const StoreDecision e = s.decide(req);                   // 3 s, now the newest
  EXPECT_FALSE(s.give_back(req, d.reservation));           // not the newest: e keeps its place
  EXPECT_EQ(s.inspect(req.bucket, "")->next_free - clock.now_us(), 3'000'000);  // and d's stays taken
  EXPECT_TRUE(s.give_back(req, e.reservation));            // e goes, and d (remembered) with it
  EXPECT_EQ(s.decide(req).decision.wait_us, 2'000'000);   // behind the live caller held 1 s
}

TEST(LocalStore, RefundSlotsSaysWhatCameBack) {
  ManualClock clock;
  LocalStore s(clock);
  AcquireRequest req{{"/r", rate(1)}, {}, {}, 1, 10'000'000};
  s.decide(req);
  std::vector<Reservation> res;
  for (int i = 0; i < 4; ++i) res.push_back(s.decide(req).reservation);
  RefundResult r = s.give_back_slots(req, res[1]);
  EXPECT_EQ(r.bucket, 0u);
  EXPECT_TRUE(r.remembered);
  r = s.give_back_slots(req, res[2]);
  EXPECT_TRUE(r.remembered);
  EXPECT_EQ(s.inspect(req.bucket, "")->abandoned, 2u);
  r = s.give_back_slots(req, res[3]);  // the newest: it, 3 and 2 come back; 1 is live
  EXPECT_EQ(r.bucket, 3u);
  EXPECT_EQ(r.parent, 0u);
  EXPECT_FALSE(r.remembered);
  EXPECT_EQ(r.reservations(), 3u);
  EXPECT_EQ(s.inspect(req.bucket, "")->abandoned, 0u);
  // A pair: counted per bucket.
  const BucketRef channel{"channel:X", rate(1)};
  AcquireRequest pair{{"/p", rate(1)}, channel, "X", 1, 10'000'000};
  s.decide(pair);
  const Reservation p1 = s.decide(pair).reservation, p2 = s.decide(pair).reservation;
  EXPECT_TRUE(s.give_back_slots(pair, p1).remembered);
  r = s.give_back_slots(pair, p2);
  EXPECT_EQ(r.bucket, 2u);
  EXPECT_EQ(r.parent, 2u);
  EXPECT_EQ(r.reservations(), 2u);
}

// At the bound the slot with the earliest release is forgotten: it stays taken, and a give-back
// from the tail stops at it as at a live reservation. The bucket never admits more for the bound.
TEST(LocalStore, AbandonedSlotsAreBoundedPerBucket) {
  ManualClock clock;
  LocalStore s(clock, LocalStore::kDefaultMaxClientKeys, 3);
  AcquireRequest req{{"/r", rate(1)}, {}, {}, 1, 10'000'000};
  s.decide(req);
  const Micros t0 = clock.now_us();
  std::vector<Reservation> res;
  for (int i = 0; i < 6; ++i) res.push_back(s.decide(req).reservation);  // slots at 1..6 s
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(s.give_back_slots(req, res[static_cast<std::size_t>(i)]).remembered);
  EXPECT_EQ(s.inspect(req.bucket, "")->abandoned, 3u);  // 1 s and 2 s were forgotten
  const RefundResult r = s.give_back_slots(req, res[5]);
  EXPECT_EQ(r.bucket, 4u);  // 6, 5, 4, 3
  EXPECT_EQ(s.inspect(req.bucket, "")->next_free, t0 + 2'000'000);

  // Full, and the newcomer is the earliest: it is the one forgotten.
  LocalStore t(clock, LocalStore::kDefaultMaxClientKeys, 2);
  t.decide(req);
  std::vector<Reservation> more;
  for (int i = 0; i < 4; ++i) more.push_back(t.decide(req).reservation);
  EXPECT_TRUE(t.give_back_slots(req, more[2]).remembered);
  EXPECT_TRUE(t.give_back_slots(req, more[1]).remembered);
  EXPECT_FALSE(t.give_back_slots(req, more[0]).remembered);
  EXPECT_EQ(t.give_back_slots(req, more[3]).bucket, 3u);
  EXPECT_EQ(t.inspect(req.bucket, "")->next_free, clock.now_us() + 1'000'000);
}

// A reservation that takes no time (a tiny permit) shares its release with the held one before it.
// Plain bucket: in any order of leaving, all come back. Warm-up bucket (stored permits cost time, a
// tiny one costs nothing but takes 1e-7 stored permits): whatever order the three sharing one
// release leave in before the newest, every stored permit comes back, the zero-cost ones first.
TEST(LocalStore, ZeroCostSlotsComeBackWithTheSlotTheyShare) {
  BucketParams warm = rate(1);
  warm.warmup_us = 2'000'000;  // 2 stored permits, the one above the threshold costs 2 s
  for (const BucketParams& p : {rate(1), warm}) {
    std::vector<int> order{0, 1, 2, 3};
    do {
      if (p.warmup_us > 0 && order[3] != 3) continue;
      ManualClock clock;
      LocalStore s(clock), never(clock);
      AcquireRequest req{{"/z", p}, {}, {}, 1, 10'000'000};
      AcquireRequest tiny = req;
      tiny.permits = 1e-7;  // 0.1 us of fresh permits (or 0.1 us of stored ones): costs nothing
      if (p.warmup_us == 0) {
        s.decide(req);
        never.decide(req);
      }
      const Reservation g1 = s.decide(req).reservation;
      const Reservation z1 = s.decide(tiny).reservation, z2 = s.decide(tiny).reservation;
      const Reservation g2 = s.decide(req).reservation;
      ASSERT_GT(g1.release, clock.now_us());
      ASSERT_EQ(z1.cost, 0);
      ASSERT_EQ(z2.release, g1.release);
      ASSERT_GT(g2.cost, 0);
      if (p.warmup_us > 0) {
        ASSERT_GT(z1.spent, 0);
      }
      const std::pair<const AcquireRequest*, Reservation> all[] = {{&req, g1}, {&tiny, z1}, {&tiny, z2}, {&req, g2}};
      for (int i : order) s.give_back(*all[i].first, all[i].second);
      const auto got = s.inspect(req.bucket, ""), want = never.inspect(req.bucket, "");
      SCOPED_TRACE(std::to_string(order[0]) + std::to_string(order[1]) + std::to_string(order[2]));
      EXPECT_EQ(got->next_free, want->next_free);
      EXPECT_NEAR(got->stored, want->stored, 1e-12);  // what a 1e-7 slot left behind would show
      EXPECT_EQ(got->abandoned, 0u);
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

TEST(LocalStore, InspectShowsDebt) {
  ManualClock clock;
  LocalStore s(clock);
  auto fresh = s.inspect({"/a", rate(5)}, "");
  ASSERT_TRUE(fresh);
  EXPECT_FALSE(fresh->tracked);
  EXPECT_DOUBLE_EQ(fresh->stored, 5);
  for (int i = 0; i < 7; ++i) s.decide({{"/a", rate(5)}, {}, {}, 1, 1'000'000});
  auto v = s.inspect({"/a", rate(5)}, "");
  EXPECT_TRUE(v->tracked);
  EXPECT_EQ(v->next_free - v->now, 400000);
}

TEST(LocalStore, TwoThreadsOnOneBucketGrantExactlyTheBurst) {
  ManualClock clock;  // time stands still: only the 100 stored permits may be granted at once
  LocalStore s(clock);
  std::atomic<int> granted{0};
  auto worker = [&] {
    for (int i = 0; i < 10000; ++i)
      if (s.decide({{"/hot", rate(100)}, {}, {}, 1, 0}).decision.granted) ++granted;
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  EXPECT_EQ(granted.load(), 100);
}

}  // namespace
}  // namespace tollgate::store

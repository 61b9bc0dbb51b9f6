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

TEST(LocalStore, RefundGivesBackTheNewestReservationOnly) {
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
  EXPECT_TRUE(s.give_back(req, e.reservation));
  EXPECT_EQ(s.decide(req).decision.wait_us, 3'000'000);
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

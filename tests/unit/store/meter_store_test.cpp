// A rule's three-colour meter in the in-process store (limiter/three_color through LocalStore):
// colours in the RFCs' order, all-or-nothing with a channel bucket and quotas, waiting for a green,
// a changed rule, and a rested meter forgotten. Time is a manual clock.
#include <gtest/gtest.h>

#include "support/manual_clock.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::store {
namespace {

using limiter::Color;
using testing::ManualClock;

AcquireRequest srtcm(limiter::SrtcmParams p, Micros timeout_us = 0, bool wait_green = false) {
  AcquireRequest req{{"/m", BucketParams{}}, {}, "/m", 1.0, timeout_us};
  req.use_bucket = false;
  req.meter = MeterRef{"/m", false, p, {}, Color::green, wait_green};
  return req;
}

AcquireRequest trtcm(limiter::TrtcmParams p) {
  AcquireRequest req{{"/t", BucketParams{}}, {}, "/t", 1.0, 0};
  req.use_bucket = false;
  req.meter = MeterRef{"/t", true, {}, p, Color::green, false};
  return req;
}

TEST(MeterStore, SrtcmGreenThenYellowThenRed) {
  ManualClock clock(1'000'000);
  LocalStore s(clock);
  const AcquireRequest req = srtcm({10, 5, 10});  // cir 10/s, cbs 5, ebs 10
  std::string colours;
  for (int i = 0; i < 16; ++i) {
    const StoreDecision d = s.decide(req);
    colours += "GYR"[static_cast<int>(d.color)];
    EXPECT_EQ(d.decision.granted, d.color != Color::red);
  }
  EXPECT_EQ(colours, "GGGGGYYYYYYYYYYR");
  const StoreDecision red = s.decide(req);
  EXPECT_EQ(red.decision.retry_after_us, 100'000);  // C has one permit again after 100 ms
  EXPECT_EQ(red.bound, Bound::bucket);
  EXPECT_DOUBLE_EQ(red.max_permits, 5);  // RateLimit speaks of the committed burst
  clock.advance(100'000);
  EXPECT_EQ(s.decide(req).color, Color::green);
}

TEST(MeterStore, TrtcmRedWhenThePeakIsSpent) {
  ManualClock clock(1'000'000);
  LocalStore s(clock);
  const AcquireRequest req = trtcm({10, 5, 20, 10});
  std::string colours;
  for (int i = 0; i < 11; ++i) colours += "GYR"[static_cast<int>(s.decide(req).color)];
  EXPECT_EQ(colours, "GGGGGYYYYYR");
  EXPECT_EQ(s.decide(req).decision.retry_after_us, 50'000);  // P at 20/s
}

TEST(MeterStore, APreColourFromTheClass) {
  ManualClock clock(1'000'000);
  LocalStore s(clock);
  AcquireRequest look = srtcm({10, 5, 10});
  look.meter->pre = Color::yellow;  // a lower class: never green
  EXPECT_EQ(s.decide(look).color, Color::yellow);
  AcquireRequest book = srtcm({10, 5, 10});
  EXPECT_EQ(s.decide(book).color, Color::green);
}

TEST(MeterStore, WaitingForAGreenQueuesBehindTheDebt) {
  ManualClock clock(1'000'000);
  LocalStore s(clock);
  const AcquireRequest req = srtcm({10, 2, 0}, 300'000, true);
  std::vector<Micros> waits;
  for (int i = 0; i < 6; ++i) {
    const StoreDecision d = s.decide(req);
    if (!d.decision.granted) break;
    EXPECT_EQ(d.color, Color::green);
    waits.push_back(d.decision.wait_us);
  }
  EXPECT_EQ(waits, (std::vector<Micros>{0, 0, 100'000, 200'000, 300'000}));
}

TEST(MeterStore, AllOrNothingWithTheChannelBucket) {
  ManualClock clock(1'000'000);
  LocalStore s(clock);
  AcquireRequest req = srtcm({10, 5, 0});
  BucketParams channel;
  channel.rate = 2;
  req.parent = BucketRef{"channel:X", channel};
  EXPECT_TRUE(s.decide(req).decision.granted);
  EXPECT_TRUE(s.decide(req).decision.granted);
  const StoreDecision refused = s.decide(req);  // the channel's two permits are gone
  EXPECT_FALSE(refused.decision.granted);
  EXPECT_EQ(refused.bound, Bound::parent);
  // The meter was not charged for the refusal: three more greens fill its committed burst.
  req.parent.reset();
  std::string colours;
  for (int i = 0; i < 4; ++i) colours += "GYR"[static_cast<int>(s.decide(req).color)];
  EXPECT_EQ(colours, "GGGR");
}

TEST(MeterStore, AChangedRuleKeepsTheCountsWithinItsSizes) {
  ManualClock clock(1'000'000);
  LocalStore s(clock);
  for (int i = 0; i < 2; ++i) s.decide(srtcm({10, 5, 10}));  // C 3 of 5
  // The committed burst shrinks to 2: C is kept at most 2 (not refilled, not reset).
  std::string colours;
  for (int i = 0; i < 3; ++i) colours += "GYR"[static_cast<int>(s.decide(srtcm({10, 2, 10})).color)];
  EXPECT_EQ(colours, "GGY");
}

TEST(MeterStore, ARestedMeterIsForgotten) {
  ManualClock clock(1'000'000);
  LocalStore s(clock);
  for (int i = 0; i < 3; ++i) s.decide(srtcm({10, 5, 10}));
  EXPECT_EQ(s.size(), 1u);
  // Other traffic sweeps idle entries once a shard fills (1024 entries): a meter full again holds
  // nothing and goes; the buckets just used stay.
  clock.advance(10'000'000);
  BucketParams p;
  p.rate = 1;
  for (int i = 0; i < 80'000; ++i) s.decide({{"/k" + std::to_string(i), p}, {}, {}, 1.0, 0});
  EXPECT_EQ(s.size(), 80'000u);
  EXPECT_EQ(s.decide(srtcm({10, 5, 10})).decision.remaining, 4);  // a full meter, less this one
}

}  // namespace
}  // namespace tollgate::store

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "support/manual_clock.hpp"
#include "tollgate/store/failure_policy_store.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::store {
namespace {

using testing::ManualClock;

// A shared store that is up or down as the test says, and remembers what it was asked.
class FakeShared final : public BucketStore {
 public:
  bool up = true;
  int decisions = 0, refunds = 0;
  boost::asio::awaitable<StoreDecision> try_acquire(AcquireRequest) override {
    ++decisions;
    StoreDecision out;
    if (up) {
      out.decision.granted = true;
      out.decision.wait_us = 7;
    } else {
      out.status = StoreStatus::unavailable;
      out.error = "redis: connection lost";
    }
    co_return out;
  }
  boost::asio::awaitable<bool> refund(AcquireRequest, Reservation) override {
    ++refunds;
    co_return true;
  }
  std::optional<BucketSnapshot> inspect(const BucketRef&, std::string_view) override { return std::nullopt; }
  std::string name() const override { return "fake"; }
  bool shared_by_fleet() const override { return true; }
  boost::asio::awaitable<Micros> last_cut(const AcquireRequest&) override { co_return up ? 1'700'000'000'000'000 : 0; }
};

struct Rig {
  ManualClock clock{1'000'000};
  FakeShared* shared = nullptr;
  unsigned instances = 1;
  std::unique_ptr<FailurePolicyStore> store;
  Rig(FailurePolicy policy, unsigned divisor = 0) {
    auto s = std::make_unique<FakeShared>();
    shared = s.get();
    store = std::make_unique<FailurePolicyStore>(std::move(s), std::make_unique<LocalStore>(clock), policy, divisor,
                                                 [this] { return instances; });
  }
  StoreDecision decide(const AcquireRequest& req) {
    boost::asio::io_context ctx;
    StoreDecision out;
    boost::asio::co_spawn(ctx, [&]() -> boost::asio::awaitable<void> { out = co_await store->try_acquire(req); },
                          boost::asio::detached);
    ctx.run();
    return out;
  }
  // Immediate grants (timeout 0) the request gets in a row, at one instant.
  int granted_in_a_row(const AcquireRequest& req) {
    int n = 0;
    while (n < 1000 && decide(req).decision.granted) ++n;
    return n;
  }
};

AcquireRequest bucket(double rate, double timeout_s = 0) {
  BucketParams p;
  p.rate = rate;
  return {{"/a", p}, {}, {}, 1.0, static_cast<Micros>(timeout_s * 1e6)};
}

TEST(FailurePolicyStore, ASharedDecisionPassesThroughUntouched) {
  for (FailurePolicy policy : {FailurePolicy::fail_open, FailurePolicy::fail_closed, FailurePolicy::local}) {
    Rig rig(policy);
    const StoreDecision d = rig.decide(bucket(10));
    EXPECT_EQ(d.status, StoreStatus::ok);
    EXPECT_TRUE(d.decision.granted);
    EXPECT_EQ(d.decision.wait_us, 7);
    EXPECT_FALSE(d.degraded);
    EXPECT_EQ(rig.store->policy_decisions(), 0u);
  }
}

// A held request asks the shared store for its bucket's last cut (another gateway's); while the
// shared store is down nothing newer is known (the fallback's buckets are this gateway's own).
TEST(FailurePolicyStore, TheLastCutIsTheSharedStores) {
  Rig rig(FailurePolicy::local);
  EXPECT_TRUE(rig.store->shared_by_fleet());
  const AcquireRequest req = bucket(10);
  auto ask = [&] {
    boost::asio::io_context ctx;
    Micros out = -1;
    boost::asio::co_spawn(ctx, [&]() -> boost::asio::awaitable<void> { out = co_await rig.store->last_cut(req); },
                          boost::asio::detached);
    ctx.run();
    return out;
  };
  EXPECT_EQ(ask(), 1'700'000'000'000'000);
  rig.shared->up = false;
  EXPECT_EQ(ask(), 0);
  EXPECT_FALSE(LocalStore(rig.clock).shared_by_fleet());
}

TEST(FailurePolicyStore, FailOpenAndFailClosedNameTheirAnswer) {
  Rig open(FailurePolicy::fail_open), closed(FailurePolicy::fail_closed);
  open.shared->up = closed.shared->up = false;
  const StoreDecision o = open.decide(bucket(10));
  const StoreDecision c = closed.decide(bucket(10));
  EXPECT_EQ(o.status, StoreStatus::unavailable_open);
  EXPECT_EQ(c.status, StoreStatus::unavailable_closed);
  EXPECT_EQ(o.error, "redis: connection lost");
  EXPECT_EQ(c.error, "redis: connection lost");
  EXPECT_EQ(open.store->policy_decisions(), 1u);
  EXPECT_EQ(closed.store->policy_decisions(), 1u);
}

TEST(FailurePolicyStore, LocalDecidesWithAFixedShareOfTheRate) {
  Rig rig(FailurePolicy::local, /*divisor=*/2);
  rig.shared->up = false;
  const StoreDecision d = rig.decide(bucket(10));
  EXPECT_EQ(d.status, StoreStatus::ok);
  EXPECT_TRUE(d.degraded);
  EXPECT_EQ(d.error, "redis: connection lost");
  EXPECT_DOUBLE_EQ(d.max_permits, 5);  // burst 10 / 2
  EXPECT_EQ(rig.granted_in_a_row(bucket(10)), 4);  // the other 4 of the halved burst
  // The next permit of the halved rate comes 1 / 5 s later.
  const StoreDecision next = rig.decide(bucket(10, 1));
  EXPECT_TRUE(next.decision.granted);
  EXPECT_EQ(next.decision.wait_us, 200'000);
  EXPECT_EQ(rig.store->policy_decisions(), 6u + 1u);
}

TEST(FailurePolicyStore, LocalFollowsTheLiveInstanceCountWithoutADivisor) {
  Rig rig(FailurePolicy::local);
  rig.shared->up = false;
  rig.instances = 4;
  EXPECT_EQ(rig.granted_in_a_row(bucket(20)), 5);  // burst 20 / 4
  rig.instances = 0;  // never below one instance
  AcquireRequest other = bucket(3);
  other.bucket.name = "/b";
  EXPECT_EQ(rig.granted_in_a_row(other), 3);
}

TEST(FailurePolicyStore, RecoveryGoesBackToTheSharedStore) {
  Rig rig(FailurePolicy::local, 1);
  rig.shared->up = false;
  EXPECT_TRUE(rig.decide(bucket(10)).degraded);
  rig.shared->up = true;
  const StoreDecision d = rig.decide(bucket(10));
  EXPECT_FALSE(d.degraded);
  EXPECT_EQ(d.decision.wait_us, 7);
  EXPECT_EQ(rig.shared->decisions, 2);
}

TEST(FailurePolicyStore, RefundsGoToTheSharedStore) {
  Rig rig(FailurePolicy::local, 1);
  boost::asio::io_context ctx;
  bool back = false;
  boost::asio::co_spawn(
      ctx, [&]() -> boost::asio::awaitable<void> { back = co_await rig.store->refund(bucket(1), Reservation{}); },
      boost::asio::detached);
  ctx.run();
  EXPECT_TRUE(back);
  EXPECT_EQ(rig.shared->refunds, 1);
}

TEST(FailurePolicyStore, LocalShareDividesBucketsParentsAndQuotas) {
  AcquireRequest req = bucket(10);
  req.bucket.params.burst = 3;
  BucketParams channel;
  channel.rate = 100;
  req.parent = BucketRef{"channel:IBE+", channel};
  req.quotas = {{"q:1:a", {60'000'000, 5, limiter::WindowAlgorithm::fixed}, false},
                {"q:2:a", {1'000'000, 1, limiter::WindowAlgorithm::sliding}, false}};
  const AcquireRequest s = local_share(req, 4);
  EXPECT_DOUBLE_EQ(s.bucket.params.rate, 2.5);
  EXPECT_DOUBLE_EQ(*s.bucket.params.burst, 1.0);  // 3 / 4, but never below one permit
  EXPECT_DOUBLE_EQ(s.parent->params.rate, 25);
  EXPECT_FALSE(s.parent->params.burst.has_value());  // the default (one second of the shared rate)
  EXPECT_EQ(s.quotas[0].params.limit, 1);             // 5 / 4, whole requests
  EXPECT_EQ(s.quotas[1].params.limit, 1);             // never below one
  EXPECT_EQ(s.bucket.name, "/a");
  EXPECT_EQ(s.parent->name, "channel:IBE+");
}

TEST(FailurePolicyStore, LocalShareCapsACostItsShareCouldNeverGive) {
  AcquireRequest req = bucket(10);  // burst 10, 10/s
  req.timeout_us = 500'000;
  req.permits = 12;  // fits the whole bucket within the window (10 + 5)
  BucketParams channel;
  channel.rate = 40;
  req.parent = BucketRef{"channel:IBE+", channel};
  req.parent_permits = 20;
  const AcquireRequest s = local_share(req, 4);
  EXPECT_DOUBLE_EQ(s.permits, 3);          // a quarter: 2.5 stored + 1.25 in 0.5 s
  EXPECT_DOUBLE_EQ(s.parent_permits, 15);  // 10 stored + 5 in 0.5 s
  req.permits = 2;
  req.parent_permits = 4;
  const AcquireRequest t = local_share(req, 4);
  EXPECT_DOUBLE_EQ(t.permits, 2);  // what fits is left as it is
  EXPECT_DOUBLE_EQ(t.parent_permits, 4);
  // A meter: its own sizes shared and the cost capped by them, not by the placeholder bucket.
  AcquireRequest m = bucket(1);
  m.use_bucket = false;
  m.permits = 5;
  m.meter = MeterRef{"/m", false, {20, 40, 8}, {}, limiter::Color::green, false};
  const AcquireRequest u = local_share(m, 4);
  EXPECT_DOUBLE_EQ(u.meter->sr.cir, 5);
  EXPECT_DOUBLE_EQ(u.meter->sr.cbs, 10);
  EXPECT_DOUBLE_EQ(u.meter->sr.ebs, 2);
  EXPECT_DOUBLE_EQ(u.permits, 5);
  m.permits = 12;
  EXPECT_DOUBLE_EQ(local_share(m, 4).permits, 10);  // never red for its size alone
}

TEST(FailurePolicyStore, LocalWithoutAFallbackStoreFailsOpen) {
  auto shared = std::make_unique<FakeShared>();
  shared->up = false;
  FailurePolicyStore store(std::move(shared), nullptr, FailurePolicy::local, 0, {});
  EXPECT_EQ(store.policy(), FailurePolicy::fail_open);
}

}  // namespace
}  // namespace tollgate::store

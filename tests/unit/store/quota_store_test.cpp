// Quotas, per-client buckets and maxShare in the in-process store, on a manual clock.
// The Redis script answers the same sequences the same way: tests/integration/redis_store_test.cpp.
#include <gtest/gtest.h>

#include "support/manual_clock.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::store {
namespace {

using testing::ManualClock;
using limiter::WindowAlgorithm;
constexpr Micros kSecond = 1'000'000;

QuotaRef quota(std::string key, std::int64_t limit, std::int64_t period_s, bool shared = false,
               WindowAlgorithm a = WindowAlgorithm::fixed) {
  return {std::move(key), {period_s * kSecond, limit, a}, shared};
}

// A quota-only request (no token bucket), as a rule with rateLimit NULL makes.
AcquireRequest quotas_only(std::vector<QuotaRef> q) {
  AcquireRequest r{{"/login", {}}, {}, {}, 1.0, 0};
  r.use_bucket = false;
  r.quotas = std::move(q);
  return r;
}

// The original example: per client IP 3/s and 20/min; for IP + /login 2/s and 5/min.
std::vector<QuotaRef> per_ip(const std::string& ip) {
  return {quota("q:1:" + ip, 3, 1), quota("q:2:" + ip, 20, 60)};
}
std::vector<QuotaRef> login(const std::string& ip) {
  auto q = per_ip(ip);
  q.push_back(quota("q:3:" + ip + " /login", 2, 1));
  q.push_back(quota("q:4:" + ip + " /login", 5, 60));
  return q;
}

int admitted(LocalStore& s, const AcquireRequest& r, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += s.decide(r).decision.granted ? 1 : 0;
  return ok;
}

TEST(Quotas, TheOriginalExampleGivesExactlyItsCounts) {
  ManualClock clock(60 * kSecond * 1000);  // on a minute boundary
  LocalStore s(clock);
  // 3 per second, then nothing more that second.
  EXPECT_EQ(admitted(s, quotas_only(per_ip("127.0.0.1")), 10), 3);
  // The rest of the minute, 10 calls a second: 20 in all (3 + 3 + ... until the minute's 20 are used).
  auto rest_of_minute = [&](const AcquireRequest& r) {
    int n = 0;
    for (int sec = 1; sec < 60; ++sec) {
      clock.advance(kSecond);
      n += admitted(s, r, 10);
    }
    return n;
  };
  EXPECT_EQ(3 + rest_of_minute(quotas_only(per_ip("127.0.0.1"))), 20);
  // /login: 2 per second and 5 per minute, on top of the per-IP pair (a new minute).
  clock.set(60 * kSecond * 1001);
  EXPECT_EQ(admitted(s, quotas_only(login("127.0.0.1")), 10), 2);
  EXPECT_EQ(2 + rest_of_minute(quotas_only(login("127.0.0.1"))), 5);
  // A rejection names the quota that bound and when it admits again.
  const auto d = s.decide(quotas_only(login("127.0.0.1")));
  EXPECT_FALSE(d.decision.granted);
  EXPECT_EQ(d.bound, Bound::quota);
  EXPECT_EQ(d.bound_quota, 3u);  // the 5-per-minute /login quota
  EXPECT_EQ(d.decision.retry_after_us, kSecond);  // 59 s into the minute: 1 s left
}

TEST(Quotas, ClientKeysAreIsolated) {
  ManualClock clock(5 * kSecond);
  LocalStore s(clock);
  EXPECT_EQ(admitted(s, quotas_only(per_ip("10.0.0.1")), 5), 3);
  EXPECT_EQ(admitted(s, quotas_only(per_ip("10.0.0.2")), 5), 3);
  EXPECT_EQ(admitted(s, quotas_only(per_ip("10.0.0.1")), 1), 0);
}

TEST(Quotas, NothingIsChargedWhenAnyCheckRejects) {
  ManualClock clock(7 * kSecond);
  LocalStore s(clock);
  BucketParams p;
  p.rate = 1;
  p.burst = 1;
  // Bucket with one permit, quota of 5: the second request is refused by the bucket, and the
  // quota must not count it.
  AcquireRequest r{{"/b", p}, {}, {}, 1.0, 0};
  r.quotas = {quota("q:9:x", 5, 60)};
  EXPECT_TRUE(s.decide(r).decision.granted);
  for (int i = 0; i < 10; ++i) {
    const auto d = s.decide(r);
    EXPECT_FALSE(d.decision.granted);
    EXPECT_EQ(d.bound, Bound::bucket);
    EXPECT_TRUE(d.quotas.at(0).admitted);
  }
  // Four quota slots are left: one per second from the bucket.
  int ok = 0;
  for (int i = 0; i < 10; ++i) {
    clock.advance(kSecond);
    ok += s.decide(r).decision.granted ? 1 : 0;
  }
  EXPECT_EQ(ok, 4);
  // And the other way round: a quota refusal takes no permit from the bucket.
  clock.advance(10 * kSecond);  // bucket full again; the quota's minute is not over
  const auto q = s.decide(r);
  EXPECT_FALSE(q.decision.granted);
  EXPECT_EQ(q.bound, Bound::quota);
  r.quotas.clear();
  EXPECT_TRUE(s.decide(r).decision.granted);  // the bucket's one permit was still there
}

TEST(Quotas, FixedAndSlidingAtABoundary) {
  ManualClock clock(60 * kSecond * 10 - 1);  // one microsecond before a minute boundary
  LocalStore s(clock);
  auto fixed = quotas_only({quota("q:1:", 10, 60, true)});
  auto sliding = quotas_only({quota("q:2:", 10, 60, true, WindowAlgorithm::sliding)});
  EXPECT_EQ(admitted(s, fixed, 10), 10);
  EXPECT_EQ(admitted(s, sliding, 10), 10);
  clock.advance(1);
  EXPECT_EQ(admitted(s, fixed, 10), 10);   // 2x burst across the boundary
  EXPECT_EQ(admitted(s, sliding, 10), 0);  // sliding smooths it
  clock.advance(30 * kSecond);
  EXPECT_EQ(admitted(s, sliding, 10), 5);  // 10 * 0.5 + 4 + 1 <= 10: the fifth still fits
}

TEST(Quotas, AnEditedQuotaStartsOver) {
  ManualClock clock(3 * kSecond);
  LocalStore s(clock);
  EXPECT_EQ(admitted(s, quotas_only({quota("q:1:a", 2, 60)}), 5), 2);
  EXPECT_EQ(admitted(s, quotas_only({quota("q:1:a", 4, 60)}), 5), 4);  // the limit was raised
}

TEST(PerClientBucket, EachKeyHasItsOwnBucket) {
  ManualClock clock;
  LocalStore s(clock);
  BucketParams p;
  p.rate = 2;
  auto req = [&](const std::string& key) {
    AcquireRequest r{{key, p}, {}, "/api", 1.0, 0};
    r.per_client_bucket = true;
    return r;
  };
  EXPECT_EQ(admitted(s, req("c:1:alice"), 5), 2);
  EXPECT_EQ(admitted(s, req("c:1:bob"), 5), 2);
  EXPECT_EQ(s.client_keys(), 2u);
}

// A 10/s bucket with one stored permit and a 1 s wait window (10 queued permits), for `client`
// allowed `max_held` waiting grants (maxShare 0.3 of that window: 3).
AcquireRequest shared_search(const std::string& client, std::int64_t max_held) {
  BucketParams p;
  p.rate = 10;
  p.burst = 1;
  AcquireRequest r{{"/search", p}, {}, {}, 1.0, kSecond};
  r.share = ShareRef{"s:1:" + client, max_held};
  return r;
}

TEST(MaxShare, OneCallerCannotFillTheSharedWaitWindow) {
  ManualClock clock;
  LocalStore s(clock);
  auto req = [](const std::string& client) { return shared_search(client, 3); };
  EXPECT_EQ(s.decide(req("heavy")).decision.wait_us, 0);  // the stored permit: not held
  for (int i = 0; i < 3; ++i) EXPECT_GT(s.decide(req("heavy")).decision.wait_us, 0);
  const auto refused = s.decide(req("heavy"));
  EXPECT_FALSE(refused.decision.granted);
  EXPECT_EQ(refused.bound, Bound::share);
  EXPECT_EQ(refused.decision.retry_after_us, 100'000);  // its first held grant is released then
  // Another caller still queues, behind the heavy one's three.
  const auto other = s.decide(req("light"));
  EXPECT_TRUE(other.decision.granted);
  EXPECT_EQ(other.decision.wait_us, 400'000);
  // Once heavy's first grant is released, it may queue one more.
  clock.advance(100'000);
  EXPECT_TRUE(s.decide(req("heavy")).decision.granted);
}

TEST(MaxShare, ACallerWhoLeavesFreesItsShare) {
  ManualClock clock;
  LocalStore s(clock);
  const AcquireRequest r = shared_search("heavy", 2);
  s.decide(r);  // the stored permit
  s.decide(r);
  const auto last = s.decide(r);
  ASSERT_GT(last.decision.wait_us, 0);
  EXPECT_EQ(last.reservation.share_release, clock.now_us() + last.decision.wait_us);
  EXPECT_FALSE(s.decide(r).decision.granted);  // two waiting: its share is used
  EXPECT_TRUE(s.give_back(r, last.reservation));  // the last one's client hangs up
  EXPECT_TRUE(s.decide(r).decision.granted);      // and the caller may queue one again
}

TEST(ClientTable, HundredThousandKeysStayWithinTheCap) {
  ManualClock clock;
  LocalStore s(clock, 10'000);
  for (int i = 0; i < 100'000; ++i) {
    ASSERT_TRUE(s.decide(quotas_only({quota("q:1:" + std::to_string(i), 1, 60)})).decision.granted);
    ASSERT_LE(s.client_keys(), s.max_client_keys());
  }
  EXPECT_LE(s.client_keys(), 10'000u);
  EXPECT_GT(s.client_keys(), 9'000u);
}

TEST(ClientTable, AnEvictedKeyComesBackWithAtMostAFullAllowance) {
  ManualClock clock;
  LocalStore s(clock, 64 * 8);  // the smallest table: 8 per shard
  auto q = [](const std::string& k) {
    std::string key = "q:1:";
    key += k;
    return quotas_only({quota(key, 3, 60)});
  };
  EXPECT_EQ(admitted(s, q("victim"), 5), 3);
  for (int i = 0; i < 10'000; ++i) s.decide(q(std::to_string(i)));  // push it out
  EXPECT_EQ(admitted(s, q("victim"), 5), 3);  // back as new: a full allowance, never more
  EXPECT_EQ(admitted(s, q("victim"), 5), 0);
}

TEST(ClientTable, ARequestWithMoreKeysInOneShardThanItsCapIsDecidedWhole) {
  // 12 client quotas whose keys all fall in one shard of a table with 8 entries per shard: every
  // entry the decision uses stays alive until it is done (ASan checks), then the shard is trimmed.
  ManualClock clock;
  LocalStore s(clock, 512);
  std::vector<QuotaRef> q;
  const std::size_t shard = std::hash<std::string_view>{}("q:0:c") % 64;
  for (int i = 0; q.size() < 12; ++i) {
    std::string key = "q:" + std::to_string(i) + ":c";
    if (std::hash<std::string_view>{}(key) % 64 == shard) q.push_back(quota(key, 2, 60));
  }
  const auto req = quotas_only(q);
  // The first decision creates 12 counters, 8 survive the trim; the second finds those 8 at 1 and
  // 4 new ones (evicted keys come back with a full allowance): admitted; then the 8 are at 2.
  EXPECT_EQ(admitted(s, req, 3), 2);
  EXPECT_LE(s.client_keys(), 8u);
  EXPECT_EQ(s.decide(req).quotas.size(), 12u);
}

TEST(ClientTable, SharedStateIsNeverEvictedByClientKeys) {
  ManualClock clock;
  LocalStore s(clock, 64 * 8);
  auto shared = quotas_only({quota("q:7:", 3, 60, true)});
  EXPECT_EQ(admitted(s, shared, 3), 3);
  for (int i = 0; i < 10'000; ++i) s.decide(quotas_only({quota("q:1:k" + std::to_string(i), 3, 60)}));
  EXPECT_EQ(admitted(s, shared, 3), 0);  // a flood of client keys cannot reset a shared counter
}

}  // namespace
}  // namespace tollgate::store

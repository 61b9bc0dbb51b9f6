// Held requests whose callers leave: their slots come back from the tail, in any order of leaving,
// until a live reservation is at the tail (limiter::abandon). Written against decide/give_back/
// inspect only. The Redis script answers the same sequences the same way:
// tests/integration/redis_store_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "support/manual_clock.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::store {
namespace {

using testing::ManualClock;
constexpr Micros kSecond = 1'000'000;

BucketParams rate(double r) {
  BucketParams p;
  p.rate = r;
  return p;
}

AcquireRequest held(const char* name, BucketParams p, Micros timeout = 60 * kSecond) {
  return {{name, p}, {}, {}, 1.0, timeout};
}

struct State {
  Micros next_free = 0;
  double stored = 0;
};
State state_of(LocalStore& s, const BucketRef& b) {
  const auto v = s.inspect(b, "");
  return {v->next_free, v->stored};
}

// Later callers see the same bucket: the same answers, at the same times, for both stores.
void expect_same_future(LocalStore& a, LocalStore& b, ManualClock& clock, const AcquireRequest& req) {
  for (int i = 0; i < 12; ++i) {
    const StoreDecision x = a.decide(req), y = b.decide(req);
    ASSERT_EQ(x.decision.granted, y.decision.granted) << "request " << i;
    ASSERT_EQ(x.decision.wait_us, y.decision.wait_us) << "request " << i;
    ASSERT_EQ(x.decision.retry_after_us, y.decision.retry_after_us) << "request " << i;
    ASSERT_EQ(x.decision.remaining, y.decision.remaining) << "request " << i;
    clock.advance(137'000);
  }
}

// 1 permit/s, burst 1: the first request takes the stored permit, the next five are held 1..5 s.
// Their callers leave in every one of the 120 orders; each time the bucket ends as if only the first
// had come, and a refund reports success exactly when no live reservation followed the slot.
TEST(AbandonedSlots, EveryOrderOfLeavingGivesEverySlotBack) {
  std::vector<int> order{0, 1, 2, 3, 4};
  int orders = 0;
  do {
    ManualClock clock;
    LocalStore s(clock), never(clock);
    const AcquireRequest req = held("/r", rate(1));
    ASSERT_EQ(s.decide(req).decision.wait_us, 0);
    ASSERT_EQ(never.decide(req).decision.wait_us, 0);
    std::vector<Reservation> res;
    for (int i = 0; i < 5; ++i) {
      const StoreDecision d = s.decide(req);
      ASSERT_EQ(d.decision.wait_us, (i + 1) * kSecond);
      res.push_back(d.reservation);
    }
    std::vector<bool> left(5, false);
    for (int i : order) {
      clock.advance(1000);  // they leave within their wait
      left[static_cast<std::size_t>(i)] = true;
      const bool newest = std::all_of(left.begin() + i + 1, left.end(), [](bool b) { return b; });
      EXPECT_EQ(s.give_back(req, res[static_cast<std::size_t>(i)]), newest) << "caller " << i;
    }
    const State st = state_of(s, req.bucket), ref = state_of(never, req.bucket);
    EXPECT_EQ(st.next_free, ref.next_free);
    EXPECT_EQ(st.stored, ref.stored);
    ASSERT_NO_FATAL_FAILURE(expect_same_future(s, never, clock, req));
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 120);
}

// The order of the issue: 2, 3, 1, 5, 4 (1-based). Nothing comes back until the newest leaves;
// then everything does, and the next caller waits for the first slot, not behind five ghosts.
TEST(AbandonedSlots, SlotsComeBackWhenTheNewestLeaves) {
  ManualClock clock;
  LocalStore s(clock);
  const AcquireRequest req = held("/r", rate(1));
  s.decide(req);
  const Micros t0 = clock.now_us();
  std::vector<Reservation> res;
  for (int i = 0; i < 5; ++i) res.push_back(s.decide(req).reservation);
  EXPECT_FALSE(s.give_back(req, res[1]));
  EXPECT_FALSE(s.give_back(req, res[2]));
  EXPECT_FALSE(s.give_back(req, res[0]));
  EXPECT_EQ(state_of(s, req.bucket).next_free, t0 + 5 * kSecond);
  EXPECT_TRUE(s.give_back(req, res[4]));  // 5 goes; 4 is live: the tail stops at it
  EXPECT_EQ(state_of(s, req.bucket).next_free, t0 + 4 * kSecond);
  EXPECT_TRUE(s.give_back(req, res[3]));  // 4 goes, and 3, 2, 1 with it
  EXPECT_EQ(state_of(s, req.bucket).next_free, t0);
  EXPECT_EQ(s.decide(req).decision.wait_us, kSecond);
}

// A live reservation in the middle keeps its slot and every abandoned slot before it; the ones after
// it come back. When it leaves too, the rest follow.
TEST(AbandonedSlots, ALiveReservationStopsTheCollapse) {
  ManualClock clock;
  LocalStore s(clock);
  const AcquireRequest req = held("/r", rate(1));
  s.decide(req);
  const Micros t0 = clock.now_us();
  std::vector<Reservation> res;
  for (int i = 0; i < 5; ++i) res.push_back(s.decide(req).reservation);
  for (int i : {1, 0, 3, 4}) s.give_back(req, res[static_cast<std::size_t>(i)]);  // caller 3 (index 2) stays
  EXPECT_EQ(state_of(s, req.bucket).next_free, t0 + 3 * kSecond);
  // The next caller queues right behind the live one.
  const StoreDecision next = s.decide(req);
  EXPECT_EQ(next.decision.wait_us, 4 * kSecond);
  EXPECT_TRUE(s.give_back(req, next.reservation));
  EXPECT_TRUE(s.give_back(req, res[2]));
  EXPECT_EQ(state_of(s, req.bucket).next_free, t0);
}

// A slot whose time has come was released: it is not given back, newest or not.
TEST(AbandonedSlots, ReleasedSlotsAreNotGivenBack) {
  ManualClock clock;
  LocalStore s(clock);
  const AcquireRequest req = held("/r", rate(1));
  s.decide(req);
  const Micros t0 = clock.now_us();
  const Reservation a = s.decide(req).reservation;  // t0 + 1 s
  clock.advance(kSecond);                           // its slot is now
  EXPECT_FALSE(s.give_back(req, a));
  EXPECT_EQ(state_of(s, req.bucket).next_free, t0 + kSecond);
  EXPECT_EQ(s.decide(req).decision.wait_us, kSecond);
}

// Caller 1 leaves early, its slot passes before the ones after it are gone: the tail stops there.
TEST(AbandonedSlots, ARememberedSlotThatIsReleasedStopsTheCollapse) {
  ManualClock clock;
  LocalStore s(clock);
  const AcquireRequest req = held("/r", rate(1));
  s.decide(req);
  const Micros t0 = clock.now_us();
  std::vector<Reservation> res;
  for (int i = 0; i < 3; ++i) res.push_back(s.decide(req).reservation);
  EXPECT_FALSE(s.give_back(req, res[0]));
  clock.advance(kSecond + 500'000);  // slot 1 passed
  EXPECT_TRUE(s.give_back(req, res[2]));
  EXPECT_TRUE(s.give_back(req, res[1]));
  // next_free went back to slot 1 (t0 + 1 s), not to t0: half a permit has accrued since, not one.
  EXPECT_EQ(clock.now_us(), t0 + 1'500'000);
  EXPECT_EQ(state_of(s, req.bucket).stored, 0.5);
  EXPECT_EQ(s.decide(req).decision.wait_us, 500'000);
}

// The numbers: 4,900 held requests (150/s, 40 s window) whose callers all leave, oldest
// first, before any slot: the bucket ends with no debt at all, as after its first burst.
TEST(AbandonedSlots, ThousandsLeavingOldestFirstLeaveNoDebt) {
  ManualClock clock;
  LocalStore s(clock), never(clock);
  const AcquireRequest req = held("/search", rate(150), 40 * kSecond);
  for (int i = 0; i < 150; ++i) {
    ASSERT_EQ(s.decide(req).decision.wait_us, 0);
    never.decide(req);
  }
  std::vector<Reservation> res;
  for (int i = 0; i < 4900; ++i) {
    const StoreDecision d = s.decide(req);
    ASSERT_TRUE(d.decision.granted);
    res.push_back(d.reservation);
  }
  EXPECT_GT(state_of(s, req.bucket).next_free - clock.now_us(), 32 * kSecond);
  int refunded = 0;
  for (const Reservation& r : res) {
    clock.advance(1);  // all gone within 4.9 ms, before the first slot (6.6 ms)
    refunded += s.give_back(req, r);
  }
  EXPECT_EQ(refunded, 1);  // one call gave everything back
  const State st = state_of(s, req.bucket), ref = state_of(never, req.bucket);
  EXPECT_EQ(st.next_free, ref.next_free);
  EXPECT_LE(st.next_free, clock.now_us());
  EXPECT_EQ(st.stored, ref.stored);
  ASSERT_NO_FATAL_FAILURE(expect_same_future(s, never, clock, req));
}

// Random runs of held grants (plain, warm-up, fractional permits, channel pairs) of which a random
// subset of callers leave in a random order: each bucket ends exactly as it was right after the
// last of its grants that stays (every later one given back), or as before all of them. In a
// bucket, a grant stays if its caller stays or if its slot there is already due (release <= now:
// it took stored permits only, the wait came from the other bucket).
TEST(AbandonedSlots, RandomDeparturesCollapseFromTheTail) {
  std::mt19937_64 rng(2024);
  BucketParams warm = rate(4);
  warm.warmup_us = 2 * kSecond;
  const BucketParams params[] = {rate(3), warm, rate(7)};
  const BucketRef channel{"channel:X", rate(5)};
  int collapsed = 0;
  for (int run = 0; run < 400; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    ManualClock clock;
    LocalStore s(clock);
    const int kind = static_cast<int>(rng() % 3);
    const BucketRef bucket{"/x", params[kind]};
    const bool pair = rng() % 2 == 0;
    auto request = [&] {
      AcquireRequest r{bucket, {}, "X", 1.0, 60 * kSecond};
      if (pair) r.parent = channel;
      const double sizes[] = {1.0, 0.5, 2.0, 1.5};
      r.permits = sizes[rng() % 4];
      return r;
    };
    const int staying = static_cast<int>(rng() % 4);  // a few grants before the run
    for (int i = 0; i < staying; ++i) s.decide(request());
    const int n = 2 + static_cast<int>(rng() % 9);
    std::vector<AcquireRequest> reqs;
    std::vector<Reservation> res;
    std::vector<State> before_a, before_b;  // each bucket's state before grant i
    for (int i = 0; i < n; ++i) {
      before_a.push_back(state_of(s, bucket));
      before_b.push_back(state_of(s, channel));
      reqs.push_back(request());
      const StoreDecision d = s.decide(reqs.back());
      ASSERT_TRUE(d.decision.granted);
      res.push_back(d.reservation);
    }
    before_a.push_back(state_of(s, bucket));
    before_b.push_back(state_of(s, channel));
    std::vector<int> leaving(static_cast<std::size_t>(n));
    std::iota(leaving.begin(), leaving.end(), 0);
    std::shuffle(leaving.begin(), leaving.end(), rng);
    leaving.resize(static_cast<std::size_t>(1 + rng() % static_cast<std::uint64_t>(n)));
    std::vector<bool> left(static_cast<std::size_t>(n), false);
    for (int i : leaving) {
      left[static_cast<std::size_t>(i)] = true;
      s.give_back(reqs[static_cast<std::size_t>(i)], res[static_cast<std::size_t>(i)]);
    }
    const Micros now = clock.now_us();
    auto expect_tail = [&](const BucketRef& ref, const std::vector<State>& before, Micros Reservation::*release) {
      std::size_t tail = static_cast<std::size_t>(n);
      while (tail > 0 && left[tail - 1] && res[tail - 1].*release > now) --tail;
      collapsed += tail < static_cast<std::size_t>(n);
      const State got = state_of(s, ref);
      EXPECT_EQ(got.next_free, before[tail].next_free) << ref.name << " tail " << tail << " of " << n;
      EXPECT_EQ(got.stored, before[tail].stored) << ref.name << " tail " << tail << " of " << n;
    };
    expect_tail(bucket, before_a, &Reservation::release);
    if (pair) expect_tail(channel, before_b, &Reservation::parent_release);
  }
  EXPECT_GT(collapsed, 200);
}

// Two interfaces of one channel: the channel's tail collapses across both interfaces' reservations,
// each interface's own tail on its own.
TEST(AbandonedSlots, ChannelBucketCollapsesAcrossInterfaces) {
  ManualClock clock;
  LocalStore s(clock), never(clock);
  const BucketRef channel{"channel:X", rate(2)};
  BucketParams one = rate(10);
  one.burst = 1;  // each interface's own slots are ahead too (100 ms apart), inside the channel's wait
  AcquireRequest a{{"/a", one}, channel, "X", 1.0, 60 * kSecond};
  AcquireRequest b{{"/b", one}, channel, "X", 1.0, 60 * kSecond};
  for (auto* st : {&s, &never}) {
    st->decide(a);
    st->decide(b);  // the channel's two stored permits
  }
  std::vector<std::pair<AcquireRequest, Reservation>> res;
  for (int i = 0; i < 6; ++i) {
    const AcquireRequest& r = i % 3 == 1 ? b : a;
    const StoreDecision d = s.decide(r);
    ASSERT_EQ(d.decision.wait_us, (i + 1) * 500'000);
    res.push_back({r, d.reservation});
  }
  clock.advance(1000);
  for (int i : {0, 4, 2, 1, 5, 3}) s.give_back(res[static_cast<std::size_t>(i)].first, res[static_cast<std::size_t>(i)].second);
  for (const BucketRef& ref : {channel, a.bucket, b.bucket}) {
    const State st = state_of(s, ref), want = state_of(never, ref);
    EXPECT_EQ(st.next_free, want.next_free) << ref.name;
    EXPECT_EQ(st.stored, want.stored) << ref.name;
  }
  ASSERT_NO_FATAL_FAILURE(expect_same_future(s, never, clock, a));
  ASSERT_NO_FATAL_FAILURE(expect_same_future(s, never, clock, b));
}

}  // namespace
}  // namespace tollgate::store

// The Redis script against the in-process store: one random sequence of decisions (rate changes,
// channel pairs, warm-up, fractions, refunds of departed callers in any order) replayed against both
// must give the same answers, double for double. Redis gets each step's time as the scripts' `now`
// override. Each replay runs through the general script alone, through the lean one wherever it
// applies (as the store sends them), and through either at random, so that both scripts share keys.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <gtest/gtest.h>

#include <deque>
#include <hiredis/hiredis.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <future>
#include <random>
#include <thread>

#include "support/manual_clock.hpp"
#include "support/process.hpp"
#include "support/redis.hpp"
#include "tollgate/store/redis_lua.hpp"
#include "support/redis_cluster.hpp"
#include "tollgate/store/cluster_slot.hpp"
#include "tollgate/store/failure_policy_store.hpp"
#include "tollgate/store/local_store.hpp"
#include "tollgate/store/redis_codec.hpp"
#include "tollgate/store/redis_store.hpp"

namespace tollgate::store {
namespace {

using testing::ManualClock;
using testing::RedisServer;

class Sync {
 public:
  explicit Sync(int port) { c_ = redisConnect("127.0.0.1", port); }
  ~Sync() {
    if (c_) redisFree(c_);
  }
  bool ok() const { return c_ && !c_->err; }
  redisReply* cmd(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    return static_cast<redisReply*>(redisCommandArgv(c_, static_cast<int>(args.size()), argv.data(), lens.data()));
  }

 private:
  redisContext* c_ = nullptr;
};

std::string str(const redisReply* e) {
  return e->type == REDIS_REPLY_INTEGER ? std::to_string(e->integer) : std::string(e->str, e->len);
}

// The fields both replays compare: the decision, the bucket size, and what a grant reserved.
void expect_same(const StoreDecision& l, const StoreDecision& r) {
  ASSERT_EQ(l.decision.granted, r.decision.granted);
  ASSERT_EQ(l.decision.wait_us, r.decision.wait_us);
  ASSERT_EQ(l.decision.retry_after_us, r.decision.retry_after_us);
  ASSERT_EQ(l.decision.remaining, r.decision.remaining);  // exactly: same operations in the same order
  ASSERT_EQ(l.max_permits, r.max_permits);
  ASSERT_EQ(l.parent_bound, r.parent_bound);
  if (!l.decision.granted) return;
  ASSERT_EQ(l.reservation.release, r.reservation.release);
  ASSERT_EQ(l.reservation.cost, r.reservation.cost);
  ASSERT_EQ(l.reservation.spent, r.reservation.spent);
  ASSERT_EQ(l.reservation.parent_release, r.reservation.parent_release);
  ASSERT_EQ(l.reservation.share_release, r.reservation.share_release);
}

void expect_same_refund(const RefundResult& l, const RefundResult& r) {
  ASSERT_EQ(l.bucket, r.bucket);
  ASSERT_EQ(l.parent, r.parent);
  ASSERT_EQ(l.remembered, r.remembered);
}

class RedisScript : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
    RedisServer::shared().flush();
    redis = std::make_unique<Sync>(RedisServer::shared().port());
    ASSERT_TRUE(redis->ok());
  }
  std::vector<std::string> items(redisReply* r) {
    std::vector<std::string> out;
    for (std::size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) out.push_back(str(r->element[i]));
    return out;
  }
  // Which acquire script a replay sends a request that the lean one covers: always the general
  // one, always the lean one (as the store does), or either at random (both on one key).
  enum class Route { general, lean, mixed };
  static constexpr Route kRoutes[] = {Route::general, Route::lean, Route::mixed};
  static const char* route_name(Route r) {
    return r == Route::general ? "general script" : r == Route::lean ? "lean script" : "both scripts";
  }
  // An adaptive (on) request for a bucket of 10/s, waiting up to `timeout_us`.
  static AcquireRequest adaptive_request(Micros timeout_us) {
    BucketParams p;
    p.rate = 10;
    AcquireRequest req{{"/a", p}, {}, "", 1.0, timeout_us};
    req.adaptive = limiter::Adaptive::on;
    return req;
  }
  // `n` decisions at `now` in both stores, alike; the reservations of those held go to `held`.
  void queue(LocalStore& local, const AcquireRequest& req, int n, Micros now, std::vector<Reservation>& held) {
    for (int i = 0; i < n; ++i) {
      const StoreDecision l = local.decide(req);
      ASSERT_NO_FATAL_FAILURE(expect_same(l, acquire(req, now)));
      ASSERT_TRUE(l.decision.granted);
      if (l.decision.wait_us > 0) held.push_back(l.reservation);
    }
  }
  // A throttle signal in both stores at `now`: the outcomes are the same, double for double; the
  // in-process store's is returned.
  AdaptOutcome adapt_both(LocalStore& local, const AcquireRequest& req, Micros pause_us, Micros jitter_us, Micros now) {
    const AdaptOutcome l = local.adapt(req, pause_us, jitter_us);
    std::vector<std::string> args{"EVAL", adapt_script()};
    for (auto& a : adapt_call(req, "t:", pause_us, jitter_us, std::to_string(now))) args.push_back(a);
    redisReply* r = redis->cmd(args);
    const auto rr = parse_adapt_reply(items(r), now);
    if (r) freeReplyObject(r);
    EXPECT_TRUE(rr.has_value());
    EXPECT_TRUE(l.ok);
    if (!rr) return l;
    EXPECT_EQ(l.result.cut, rr->result.cut);
    EXPECT_EQ(l.result.from, rr->result.from);
    EXPECT_EQ(l.result.to, rr->result.to);
    EXPECT_EQ(l.result.paused, rr->result.paused);
    EXPECT_EQ(l.result.unconfirmed, rr->result.unconfirmed);
    EXPECT_EQ(l.pause_left_us, rr->pause_left_us);
    EXPECT_EQ(l.effective_rate, rr->effective_rate);
    EXPECT_EQ(l.last_cut_us, rr->last_cut_us);
    EXPECT_EQ(l.windows.start, rr->windows.start);
    EXPECT_EQ(l.windows.width, rr->windows.width);
    return l;
  }
  // A throttle signal with a pause, in both stores: both cut and pause.
  void cut(LocalStore& local, const AcquireRequest& req, Micros pause_us, Micros now) {
    const AdaptOutcome lo = adapt_both(local, req, pause_us, 0, now);
    ASSERT_TRUE(lo.result.cut);
    ASSERT_TRUE(lo.result.paused);
  }
  // A fresh start for one route of a replay.
  void begin(Route r) {
    route = r;
    RedisServer::shared().flush();
    lean_calls = 0;
  }
  StoreDecision acquire(const AcquireRequest& req, Micros now) {
    const bool lean = lean_request(req) && (route == Route::lean || (route == Route::mixed && coin() % 2 == 0));
    std::vector<std::string> args{"EVAL", lean ? lean_acquire_script() : acquire_script()};
    for (auto& a : lean ? lean_acquire_call(req, "t:", std::to_string(now)) : acquire_call(req, "t:", std::to_string(now)))
      args.push_back(a);
    redisReply* r = redis->cmd(args);
    EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->str ? r->str : "no reply");
    auto d = lean ? parse_lean_acquire_reply(req, items(r))
                  : parse_acquire_reply(items(r), req.quotas.size(), req.adaptive != limiter::Adaptive::off,
                                        req.meter.has_value());
    EXPECT_TRUE(d.has_value()) << "malformed reply";
    if (r) freeReplyObject(r);
    lean_calls += lean;
    return d.value_or(StoreDecision{});
  }
  // A lean batch through EVAL at `now`: one answer per entry (empty when the reply is malformed).
  std::vector<LeanAnswer> lean_batch(const std::vector<LeanEntry>& entries, Micros now,
                                     std::size_t max_abandoned = limiter::kMaxAbandoned) {
    std::vector<std::string> args{"EVAL", lean_acquire_script()};
    for (auto& a : lean_batch_call(entries, "t:", std::to_string(now), max_abandoned)) args.push_back(a);
    redisReply* r = redis->cmd(args);
    EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->str ? r->str : "no reply");
    std::vector<ReplyItem> views;  // as the connection reads them: integers, and text viewed in place
    for (std::size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      views.push_back(e->type == REDIS_REPLY_INTEGER ? ReplyItem{true, e->integer, {}}
                                                     : ReplyItem{false, 0, std::string_view(e->str, e->len)});
    }
    auto out = parse_lean_batch_reply(entries, views.data(), views.size());
    EXPECT_TRUE(out.has_value()) << "malformed reply";
    if (r) freeReplyObject(r);
    return out.value_or(std::vector<LeanAnswer>{});
  }
  // A refund: through the lean script (as the store sends a lean request's) when the route takes
  // it there, else through the refund script.
  RefundResult give_back(const AcquireRequest& req, const Reservation& res, Micros now,
                         std::size_t max_abandoned = limiter::kMaxAbandoned) {
    if (lean_request(req) && (route == Route::lean || (route == Route::mixed && coin() % 2 == 0))) {
      ++lean_calls;
      const auto answers = lean_batch({{&req, &res}}, now, max_abandoned);
      return answers.size() == 1 ? answers.front().refund : RefundResult{};
    }
    std::vector<std::string> args{"EVAL", refund_script()};
    for (auto& a : refund_call(req, "t:", res, std::to_string(now), max_abandoned)) args.push_back(a);
    redisReply* r = redis->cmd(args);
    EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->str ? r->str : "no reply");
    auto out = parse_refund_reply(req, items(r));
    EXPECT_TRUE(out.has_value()) << "malformed reply";
    if (r) freeReplyObject(r);
    return out.value_or(RefundResult{});
  }
  // A granted request's unused permits through the restore script at `now`.
  RefundResult restore(const AcquireRequest& req, Micros now) {
    std::vector<std::string> args{"EVAL", restore_script()};
    for (auto& a : restore_call(req, "t:", std::to_string(now))) args.push_back(a);
    redisReply* r = redis->cmd(args);
    EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->str ? r->str : "no reply");
    auto out = parse_restore_reply(req, items(r));
    EXPECT_TRUE(out.has_value()) << "malformed reply";
    if (r) freeReplyObject(r);
    return out.value_or(RefundResult{});
  }
  // The bucket's state in Redis as the in-process store's inspect shows it: resynced to `now` with
  // the shape it was saved with, and the abandoned slots still ahead.
  BucketSnapshot snapshot(std::string_view tag, std::string_view name, Micros now) {
    BucketSnapshot out;
    redisReply* h = redis->cmd({"HMGET", redis_key("t:", tag, name), "s", "n", "m", "c"});
    if (h && h->type == REDIS_REPLY_ARRAY && h->element[0]->type == REDIS_REPLY_STRING) {
      limiter::BucketState st{std::stod(str(h->element[0])), static_cast<Micros>(std::stod(str(h->element[1])))};
      limiter::Shape shape;
      shape.max_permits = std::stod(str(h->element[2]));
      shape.cool_down_us = std::stod(str(h->element[3]));
      limiter::resync(st, shape, now);
      out.stored = st.stored;
      out.next_free = st.next_free;
      out.tracked = true;
    }
    if (h) freeReplyObject(h);
    redisReply* n = redis->cmd({"ZCOUNT", abandoned_key("t:", tag, name), "(" + std::to_string(now), "+inf"});
    if (n && n->type == REDIS_REPLY_INTEGER) out.abandoned = static_cast<std::size_t>(n->integer);
    if (n) freeReplyObject(n);
    return out;
  }
  std::unique_ptr<Sync> redis;
  Route route = Route::general;
  std::mt19937_64 coin{99};  // its own sequence: the replays' draws stay as they are
  int lean_calls = 0;
};

// The replays' interface buckets, /a, /b and /w: 5/s; 3/s with a burst of 2; 2/s warming up over 3 s.
std::vector<BucketParams> replay_buckets(limiter::Mode mode) {
  std::vector<BucketParams> params(3);
  params[0].rate = 5;
  params[1].rate = 3;
  params[1].burst = 2;
  params[2].rate = 2;
  params[2].warmup_us = 3'000'000;
  for (BucketParams& p : params) p.mode = mode;
  return params;
}

// The fleet's shared token (shared_token.lua): one lease at a time, a put only by the lease's
// holder, the lease kept one token interval after a put or a failure, a failure seen by the
// others, a refused token deleted for all, and a token due within before_ms (or half its life).
TEST_F(RedisScript, TheSharedTokenHasOneLeaseHolderAndOnlyItsPutCounts) {
  std::string script;
  for (const lua::LuaFile& f : lua::files())
    if (f.name == "shared_token.lua") script = f.text;
  ASSERT_FALSE(script.empty());
  const std::string key = "t:{auth:ndc:fp}:token";
  const auto call = [&](std::vector<std::string> argv) {
    std::vector<std::string> args{"EVAL", script, "1", key};
    args.insert(args.end(), argv.begin(), argv.end());
    redisReply* r = redis->cmd(args);
    std::vector<std::string> out = r && r->type == REDIS_REPLY_INTEGER ? std::vector<std::string>{str(r)} : items(r);
    if (r) freeReplyObject(r);
    return out;
  };
  using V = std::vector<std::string>;
  // Nothing yet: A takes the lease, B does not; B's put is refused; A's goes in.
  EXPECT_EQ(call({"get", "A", "5000", "60000", ""}), (V{"", "0", "1", "1", "0", "0"}));
  EXPECT_EQ(call({"get", "B", "5000", "60000", ""}), (V{"", "0", "0", "1", "0", "0"}));
  EXPECT_EQ(call({"get", "A", "5000", "60000", ""})[2], "1");  // its own lease: still its
  EXPECT_EQ(call({"put", "B", "tok-b", "600000", "1000"}), V{"0"});
  EXPECT_EQ(call({"put", "A", "tok-a", "600000", "1000"}), V{"1"});
  // Fresh: everyone takes it, nobody leases.
  V got = call({"get", "B", "5000", "60000", ""});
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0], "tok-a");
  EXPECT_GT(std::stoll(got[1]), 590000);
  EXPECT_EQ(got[2], "0");
  EXPECT_EQ(got[3], "0");
  // Refused by a supplier: deleted for all; the lease is still A's for its token interval, so B
  // waits its turn, and sees no token.
  got = call({"get", "B", "5000", "60000", "tok-a"});
  EXPECT_EQ(got[0], "");
  EXPECT_EQ(got[2], "0");
  EXPECT_EQ(call({"get", "C", "5000", "60000", ""})[0], "");
  // A's next request fails: the failure stands for its hold, seen by the others.
  EXPECT_EQ(call({"get", "A", "5000", "60000", ""})[2], "1");
  EXPECT_EQ(call({"fail", "A", "1000"}), V{"1"});
  got = call({"get", "B", "5000", "60000", ""});
  EXPECT_EQ(got[2], "0");
  EXPECT_GT(std::stoll(got[5]), 0);
  EXPECT_LE(std::stoll(got[5]), 1000);
  // A token with less than before_ms left (or half its lifetime) is due: given with the lease.
  EXPECT_EQ(call({"fail", "B", "1"}), V{"0"});  // not B's lease: nothing changes
  if (redisReply* r = redis->cmd({"DEL", key})) freeReplyObject(r);
  EXPECT_EQ(call({"get", "A", "5000", "60000", ""})[2], "1");
  EXPECT_EQ(call({"put", "A", "tok-short", "10000", "1"}), V{"1"});  // 10 s: due from 5 s left
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  got = call({"get", "B", "5000", "60000", ""});
  EXPECT_EQ(got[0], "tok-short");
  EXPECT_EQ(got[3], "0");  // 10 s left of 10: not due yet
  EXPECT_EQ(got[4], "10000");
  // The key expires with what it holds.
  redisReply* ttl = redis->cmd({"PTTL", key});
  ASSERT_NE(ttl, nullptr);
  EXPECT_GT(ttl->integer, 5000);
  EXPECT_LE(ttl->integer, 10000);
  freeReplyObject(ttl);
}

TEST_F(RedisScript, ReplaysTheSameAsTheLocalStore) {
  for (const limiter::Mode mode : {limiter::Mode::pay_now, limiter::Mode::pay_later}) {
    for (const Route rt : kRoutes) {
      SCOPED_TRACE(std::string(route_name(rt)) + (mode == limiter::Mode::pay_now ? ", pay now" : ", pay later"));
      begin(rt);
      ManualClock clock(1'700'000'000'000'000);
      LocalStore local(clock);
      std::mt19937_64 rng(42);
      // Three interface buckets, one of them warming up, and a channel bucket over two of them.
      std::vector<BucketParams> params = replay_buckets(mode);
      params.push_back(params[0]);
      params[3].rate = 4;  // the channel
      const char* names[] = {"/a", "/b", "/w"};
      int granted = 0, rejected = 0, refunded = 0;
      std::vector<std::pair<AcquireRequest, Reservation>> held;
      for (int step = 0; step < 3000; ++step) {
        clock.advance(static_cast<Micros>(rng() % 300'000));
        if (rng() % 100 == 0) params[rng() % 4].rate = 1 + static_cast<double>(rng() % 9);  // an operator edit
        const int b = static_cast<int>(rng() % 3);
        // /a and /b belong to channel X (the gateway tags their keys with the channel), /w to none.
        AcquireRequest req{{names[b], params[b]}, {}, b < 2 ? "X" : names[b], 1.0,
                           static_cast<Micros>(rng() % 1'500'000)};
        if (b < 2 && rng() % 2) req.parent = BucketRef{"channel:X", params[3]};
        if (rng() % 5 == 0) req.permits = 0.5 + static_cast<double>(rng() % 3);
        const StoreDecision l = local.decide(req);
        const StoreDecision r = acquire(req, clock.now_us());
        SCOPED_TRACE("step " + std::to_string(step));
        if (std::getenv("REPLAY_DEBUG"))
          std::fprintf(stderr, "%d %s parent=%d permits=%g timeout=%lld rate=%g | L g=%d w=%lld rem=%.17g | R g=%d w=%lld rem=%.17g\n", step,
                       names[b], req.parent ? 1 : 0, req.permits, (long long)req.timeout_us, req.bucket.params.rate,
                       l.decision.granted, (long long)l.decision.wait_us, l.decision.remaining, r.decision.granted,
                       (long long)r.decision.wait_us, r.decision.remaining);
        ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
        if (l.decision.granted) {
          ++granted;
          if (l.decision.wait_us > 0) held.push_back({req, l.reservation});
        } else {
          ++rejected;
        }
        if (!held.empty() && rng() % 7 == 0) {  // a held caller leaves
          auto [hreq, res] = held.back();
          held.pop_back();
          const RefundResult lb = local.give_back_slots(hreq, res);
          ASSERT_NO_FATAL_FAILURE(expect_same_refund(lb, give_back(hreq, res, clock.now_us())));
          refunded += lb.any();
        }
      }
      EXPECT_GT(granted, 500);
      EXPECT_GT(rejected, mode == limiter::Mode::pay_now ? 500 : 250);  // pay later waits less: fewer rejections
      EXPECT_GT(refunded, 10);
      if (rt != Route::general) {
        EXPECT_GT(lean_calls, rt == Route::lean ? 1000 : 500);
      }
    }
  }
}

// Adaptive buckets decide the same in both stores. Arrivals at random rates from three callers,
// throttle signals at random moments (some with a pause, some within the debounce of the last,
// some without the evidence to cut), an operator
// edit now and then: every decision, effective rate, pause and signal outcome is the in-process
// store's, double for double.
TEST_F(RedisScript, ReplaysAdaptiveBucketsTheSameAsTheLocalStore) {
  for (const limiter::Adaptive mode : {limiter::Adaptive::on, limiter::Adaptive::shadow}) {
    SCOPED_TRACE(limiter::adaptive_name(mode));
    begin(Route::general);
    ManualClock clock(1'700'000'000'000'000);
    LocalStore local(clock);
    std::mt19937_64 rng(7);
    BucketParams params;
    params.rate = 50;
    int cuts = 0, pauses = 0, granted = 0, rejected = 0, refunded = 0, unconfirmed = 0, windows_learned = 0, unturned = 0;
    bool quiet = false;
    double lowest = 50;
    std::vector<std::pair<AcquireRequest, Reservation>> held;
    for (int step = 0; step < 4000; ++step) {
      clock.advance(static_cast<Micros>(rng() % 40'000));
      if (rng() % 800 == 0) {  // an operator edit: a new rate, sometimes an explicit burst
        params.rate = 20 + static_cast<double>(rng() % 60);
        params.burst = rng() % 2 ? std::optional<double>(params.rate * 2) : std::nullopt;
      }
      AcquireRequest req{{"/ibe/search", params}, {}, "", 1.0, static_cast<Micros>(rng() % 800'000)};
      req.adaptive = mode;
      // Three callers, one of them most of the time: some throttles cut, some lack evidence.
      req.caller = rng() % 8 == 0 ? limiter::caller_id("10.0.0.2") : rng() % 16 == 0 ? 3 : limiter::caller_id("10.0.0.1");
      SCOPED_TRACE("step " + std::to_string(step));
      if (rng() % 20 == 0) {
        const Micros pause = rng() % 3 == 0 ? static_cast<Micros>(rng() % 3'000'000) : 0;
        const Micros jitter = static_cast<Micros>(rng() % 100'000);
        req.admitted = quiet ? 0 : static_cast<double>(rng() % 3);  // the throttling gateway's own, told with it
        req.admitted_before = req.admitted > 0 ? static_cast<double>(rng() % 2) : 0;
        // The pair of where the supplier's windows start its gateway learned (most of them near
        // .3 of the second, now and then one that misses; some say nothing, some none).
        const Micros near = rng() % 6 == 0 ? static_cast<Micros>(rng() % 1'000'000) : 300'000;
        const Micros width = rng() % 4 == 0 ? 0 : static_cast<Micros>(rng() % 400'000) + (rng() % 50 == 0 ? 900'000 : 1);
        req.window_pair = {limiter::WindowPhase::within_second(near - static_cast<Micros>(rng() % 200'000) -
                                                               clock.now_us()), width};
        const AdaptOutcome l = adapt_both(local, req, pause, jitter, clock.now_us());
        ASSERT_FALSE(HasFailure());
        windows_learned += l.windows.width > 0 && l.windows.width < 100'000;
        // Refused again past the debounce, no cut: nothing admitted since (the window not turned).
        unturned += !l.result.cut && !l.result.unconfirmed && clock.now_us() - l.last_cut_us >= 500'000;
        cuts += l.result.cut;
        pauses += l.result.paused;
        unconfirmed += l.result.unconfirmed;
        continue;
      }
      // The supplier's admissions this gateway reports (none in a quiet spell: a pause, a window
      // that has not turned); now and then a request asking again.
      if (rng() % 40 == 0) quiet = !quiet;
      req.admitted = quiet ? 0 : static_cast<double>(rng() % 3);
      req.admitted_before = req.admitted > 0 ? static_cast<double>(rng() % 2) : 0;  // heard last second
      req.again = rng() % 30 == 0;
      if (rng() % 10 == 0) {  // a pair of where the windows start, told with a decision
        const Micros near = rng() % 6 == 0 ? static_cast<Micros>(rng() % 1'000'000) : 300'000;
        req.window_pair = {limiter::WindowPhase::within_second(near - static_cast<Micros>(rng() % 200'000) -
                                                               clock.now_us()),
                           static_cast<Micros>(rng() % 400'000) + 1};
      }
      const StoreDecision l = local.decide(req);
      const StoreDecision r = acquire(req, clock.now_us());
      ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
      ASSERT_EQ(l.effective_rate, r.effective_rate);
      ASSERT_EQ(l.paused_us, r.paused_us);
      ASSERT_EQ(l.last_cut_us, r.last_cut_us);
      ASSERT_EQ(l.windows.start, r.windows.start);
      ASSERT_EQ(l.windows.width, r.windows.width);
      lowest = std::min(lowest, l.effective_rate);
      (l.decision.granted ? granted : rejected)++;
      if (l.decision.granted && l.decision.wait_us > 0) held.push_back({req, l.reservation});
      if (!held.empty() && rng() % 5 == 0) {  // a held caller leaves: never reopens a pause
        auto [hreq, res] = held.back();
        held.pop_back();
        const RefundResult lb = local.give_back_slots(hreq, res);
        ASSERT_NO_FATAL_FAILURE(expect_same_refund(lb, give_back(hreq, res, clock.now_us())));
        refunded += lb.any();
      }
      if (held.size() > 64) held.erase(held.begin());
    }
    EXPECT_GT(refunded, 20);
    EXPECT_GT(cuts, 20);
    EXPECT_GT(unconfirmed, 3);
    EXPECT_GT(pauses, 5);
    EXPECT_GT(granted, 500);
    EXPECT_GT(rejected, mode == limiter::Adaptive::on ? 500 : 0);
    EXPECT_LT(lowest, 20);  // the rate did come down
    EXPECT_GT(windows_learned, 20);  // the arcs narrowed
    EXPECT_GT(unturned, 0);
  }
}

// The supplier's advertised allowance (limiter/advertised.hpp), drawn at random against both
// stores: reports newer and older than what is known, the same window and new ones, malformed
// ones, limits said and not, requests held across a reset, throttles between; decision for
// decision the same doubles, the same pace and the same grant counts.
TEST_F(RedisScript, ReplaysAdvertisedAllowancesTheSameAsTheLocalStore) {
  begin(Route::general);
  ManualClock clock(1'700'000'000'000'000);
  LocalStore local(clock);
  std::mt19937_64 rng(11);
  BucketParams params;
  params.rate = 50;
  int granted = 0, rejected = 0, paced = 0;
  double seq = 0;
  for (int step = 0; step < 3000; ++step) {
    clock.advance(static_cast<Micros>(rng() % 30'000));
    AcquireRequest req{{"/ibe/search", params}, {}, "", 1.0 + static_cast<double>(rng() % 4 == 0),
                       static_cast<Micros>(rng() % 3 == 0 ? rng() % 1'500'000 : 0)};
    req.adaptive = rng() % 10 == 0 ? limiter::Adaptive::shadow : limiter::Adaptive::on;
    req.caller = limiter::caller_id(rng() % 2 ? "10.0.0.1" : "10.0.0.2");
    if (rng() % 12 == 0) {
      limiter::AdvertReport a;
      a.seq = rng() % 5 == 0 ? seq - static_cast<double>(rng() % 10) : seq + static_cast<double>(rng() % 3);
      a.left = rng() % 50 == 0 ? -1 : static_cast<double>(rng() % 40);
      a.reset_in = rng() % 50 == 0 ? -3 : static_cast<Micros>(rng() % 2'000'000);
      a.limit = rng() % 3 == 0 ? 0 : 20;
      a.window = a.limit > 0 && rng() % 4 != 0 ? (rng() % 2 ? 1'000'000 : 10'000'000) : 0;
      req.advert = a;
    }
    SCOPED_TRACE("step " + std::to_string(step));
    if (rng() % 40 == 0) {
      ASSERT_NO_FATAL_FAILURE(adapt_both(local, req, static_cast<Micros>(rng() % 1'000'000), 0, clock.now_us()));
      continue;
    }
    const StoreDecision l = local.decide(req);
    const StoreDecision r = acquire(req, clock.now_us());
    ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
    ASSERT_EQ(l.effective_rate, r.effective_rate);
    ASSERT_EQ(l.paused_us, r.paused_us);
    if (l.decision.granted) {
      ASSERT_EQ(l.grant_seq, r.grant_seq);
      seq = l.grant_seq;
    }
    paced += l.effective_rate < params.rate;
    (l.decision.granted ? granted : rejected)++;
  }
  std::printf("advertised replay: %d granted, %d refused, %d paced\n", granted, rejected, paced);
  EXPECT_GT(granted, 100);  // most are paced hard: a limit of 20 over 10 s is 2/s
  EXPECT_GT(rejected, 300);
  EXPECT_GT(paced, 300);
}

// A supplier of fixed windows (1 s, starting 370 ms into the wall clock's second, 20 a window)
// that advertises on every answer what is left and when its window ends, in whole seconds rounded
// up as the IETF fields are sent: 60 requests a second offered to a 50/s rule, answered at once,
// each answer's fields told with the next decision. Both stores, decision for decision the same;
// past the first window, the supplier refuses nothing, and at least 90% of its allowance is used.
TEST_F(RedisScript, ReplaysAnAdvertisingSupplierTheSameAsTheLocalStore) {
  for (const Micros timeout : {Micros{0}, Micros{500'000}}) {
    SCOPED_TRACE("wait " + std::to_string(timeout));
    begin(Route::general);
    ManualClock clock(1'700'000'000'000'000);
    LocalStore local(clock);
    BucketParams params;
    params.rate = 50;
    constexpr Micros kOffset = 370'000, kWindow = 1'000'000;
    constexpr int kAllowance = 20, kSeconds = 20;
    const std::int64_t first = (clock.now_us() - kOffset) / kWindow;
    std::int64_t window = -1;
    int used = 0, received = 0, refused = 0, accepted = 0;
    std::optional<limiter::AdvertReport> told;
    std::vector<std::pair<Micros, double>> held;  // when a held grant goes, and its count
    auto answer = [&](Micros at, double seq) {
      const std::int64_t w = (at - kOffset) / kWindow;
      if (w != window) window = w, used = 0;
      const bool ok = used < kAllowance;
      used += ok;
      const bool counted = w >= first + 2;  // past the first whole window
      received += counted;
      refused += counted && !ok;
      accepted += counted && ok;
      const Micros end = (w + 1) * kWindow + kOffset;
      const Micros t = (end - at + 999'999) / 1'000'000 * 1'000'000;  // whole seconds, rounded up
      told = limiter::AdvertReport{seq, static_cast<double>(kAllowance - used), t, kAllowance, kWindow};
    };
    for (int step = 0; step < kSeconds * 60; ++step) {
      clock.advance(1'000'000 / 60);
      const Micros now = clock.now_us();
      std::sort(held.begin(), held.end());
      while (!held.empty() && held.front().first <= now) {
        answer(held.front().first, held.front().second);
        held.erase(held.begin());
      }
      AcquireRequest req{{"/ibe/search", params}, {}, "", 1.0, timeout};
      req.adaptive = limiter::Adaptive::on;
      req.advert = told;
      told.reset();
      SCOPED_TRACE("step " + std::to_string(step));
      const StoreDecision l = local.decide(req);
      const StoreDecision r = acquire(req, now);
      ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
      ASSERT_EQ(l.effective_rate, r.effective_rate);
      if (!l.decision.granted) continue;
      ASSERT_EQ(l.grant_seq, r.grant_seq);
      if (l.decision.wait_us > 0) held.push_back({now + l.decision.wait_us, l.grant_seq});
      else answer(now, l.grant_seq);
    }
    std::printf("advertising supplier, wait %lld us: %d received, %d refused, %d of %d accepted\n",
                static_cast<long long>(timeout), received, refused, accepted, kAllowance * (kSeconds - 2));
    EXPECT_EQ(refused, 0) << "of " << received;
    EXPECT_GE(accepted, 0.9 * kAllowance * (kSeconds - 3)) << "of " << kAllowance * (kSeconds - 3);
  }
}

// The replay above draws its signals at random; this one plays a supplier against both stores,
// so that every step of the estimate is taken: a fixed window's full window, a token bucket's
// drained burst, drops and rises, with a pause (the supplier's reset: when it has room again)
// and without. 60 requests a second are offered to a 50/s rule (5 a second for the first 8 s of
// a fourth phase: a quiet spell); the supplier allows 20, then 12, then 30/s, then 4/s for two
// minutes, per calendar second or in a bucket of one second's burst; what it admits is told with
// the next decision, those heard in an earlier second as such, as the gateways do. The stores
// follow it: in each phase but the quiet one, at least three quarters of the allowance used, and
// in each at most a tenth of what the supplier received refused (without adapting, most of it
// would be), counted from the fifth second; at 4/s, from its 13th second, at most 3% refused (its
// steady level probed no more often than its refusal budget allows: with a 3 s hold at every
// level, 5.6%).
TEST_F(RedisScript, ReplaysAdaptiveBucketsAgainstASupplierTheSameAsTheLocalStore) {
  for (const bool window : {true, false}) {
    for (const bool reset : {false, true}) {
      SCOPED_TRACE(std::string(window ? "fixed window" : "token bucket") + (reset ? ", with its reset" : ", bare"));
      begin(Route::general);
      ManualClock clock(1'700'000'000'000'000);
      LocalStore local(clock);
      BucketParams params;
      params.rate = 50;
      double tokens = 20;
      Micros refilled = clock.now_us();
      std::int64_t window_sec = 0, heard_sec = 0;
      int in_window = 0, cuts = 0;
      double heard = 0, heard_before = 0;  // admissions not told yet: all, and those of an earlier second
      // The allowance, the phase's seconds, those of a quiet spell at its start (5 requests a
      // second: no reading of the allowance), from which second it is counted, and the share of
      // what the supplier received that it may refuse: a low allowance for two minutes last, whose
      // steady level must be probed no more often than its refusal budget allows.
      struct Phase {
        double allowance;
        int seconds, quiet, counted_from;
        double most_refused;
      };
      const Phase phases[] = {{20, 12, 0, 4, 0.1}, {12, 12, 0, 4, 0.1}, {30, 12, 0, 4, 0.1}, {30, 12, 8, 4, 0.1},
                              {4, 120, 0, 12, 0.03}};
      constexpr int kPhases = std::size(phases);
      int received[kPhases] = {}, refused[kPhases] = {};  // per phase, from its counted second
      int phase = 0, phase_step = 0;
      for (int step = 0; phase < kPhases; ++step, ++phase_step) {
        if (phase_step == phases[phase].seconds * 60) {
          if (++phase == kPhases) break;
          phase_step = 0;
        }
        clock.advance(1'000'000 / 60);
        const Micros now = clock.now_us();
        const std::int64_t sec = now / 1'000'000;
        const bool counted = phase_step >= phases[phase].counted_from * 60;
        const double allowance = phases[phase].allowance;
        if (phase_step < phases[phase].quiet * 60 && step % 12 != 0) continue;
        if (sec != heard_sec) heard_before = heard;
        AcquireRequest req{{"/ibe/search", params}, {}, "", 1.0, 0};
        req.adaptive = limiter::Adaptive::on;
        req.caller = limiter::caller_id("10.0.0.1");
        req.admitted = heard;
        req.admitted_before = heard_before;
        heard = heard_before = 0;
        heard_sec = sec;
        SCOPED_TRACE("step " + std::to_string(step));
        const StoreDecision l = local.decide(req);
        const StoreDecision r = acquire(req, now);
        ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
        ASSERT_EQ(l.effective_rate, r.effective_rate);
        if (!l.decision.granted) continue;
        // The supplier answers at once.
        bool ok = false;
        if (window) {
          if (sec != window_sec) window_sec = sec, in_window = 0;
          ok = in_window < allowance;
          in_window += ok;
        } else {
          tokens = std::min(allowance, tokens + allowance * static_cast<double>(now - refilled) / 1e6);
          refilled = now;
          ok = tokens >= 1;
          tokens -= ok;
        }
        received[phase] += counted;
        if (ok) {
          heard += 1;
          continue;
        }
        refused[phase] += counted;
        AcquireRequest signal = req;
        signal.admitted = signal.admitted_before = 0;  // this decision told them
        // When the supplier says it has room again: its next window, or its next token.
        const Micros pause = !reset ? 0
                             : window ? 1'000'000 - now % 1'000'000
                                      : static_cast<Micros>((1 - tokens) / allowance * 1e6) + 1;
        cuts += adapt_both(local, signal, pause, 0, now).result.cut;
        ASSERT_FALSE(HasFailure());
      }
      EXPECT_GE(cuts, 8);
      for (int i = 0; i < kPhases; ++i) {
        const Phase& p = phases[i];
        if (p.quiet == 0) {
          EXPECT_GE(received[i] - refused[i], 0.75 * p.allowance * (p.seconds - p.counted_from)) << "phase " << i;
        }
        EXPECT_LE(refused[i], p.most_refused * received[i]) << "phase " << i;
      }
    }
  }
}

// A pause (1 s) applied to a bucket with a queue 1.5 s long, then every held caller leaves: no
// refund reopens the bucket inside the pause, in the script (the bucket's 'f') as in the local
// store. (The cut voided the queue: a refund gives back only the bucket's newest slot, here the
// one that fell on the restart itself.)
TEST_F(RedisScript, ARefundNeverReopensAPause) {
  begin(Route::general);
  ManualClock clock(1'700'000'000'000'000);
  LocalStore local(clock);
  const AcquireRequest req = adaptive_request(2'000'000);
  std::vector<Reservation> held;
  ASSERT_NO_FATAL_FAILURE(queue(local, req, 25, clock.now_us(), held));
  ASSERT_NO_FATAL_FAILURE(cut(local, req, 1'000'000, clock.now_us()));
  int given = 0;
  for (auto it = held.rbegin(); it != held.rend(); ++it) {
    const RefundResult lb = local.give_back_slots(req, *it);
    ASSERT_NO_FATAL_FAILURE(expect_same_refund(lb, give_back(req, *it, clock.now_us())));
    given += static_cast<int>(lb.bucket);
  }
  EXPECT_EQ(given, 1);  // the slot that fell on the restart (pause end) itself
  AcquireRequest now_only = req;
  now_only.timeout_us = 0;
  const StoreDecision l = local.decide(now_only);
  const StoreDecision rr = acquire(now_only, clock.now_us());
  ASSERT_NO_FATAL_FAILURE(expect_same(l, rr));
  EXPECT_FALSE(rr.decision.granted);  // nothing before the pause ends
  EXPECT_GE(rr.decision.retry_after_us, 1'000'000 - 1);
}

// A cut voids the slots granted before it, at the old rate (their holders ask again when they
// wake): a bucket with a queue 2.5 s long, cut with a pause of 1 s, restarts empty at the new rate
// when the pause ends, not behind the old queue; both stores alike. The decision says when the cut
// was (last_cut_us), for the holders' check.
TEST_F(RedisScript, ACutVoidsTheQueue) {
  begin(Route::general);
  ManualClock clock(1'700'000'000'000'000);
  LocalStore local(clock);
  const AcquireRequest req = adaptive_request(3'000'000);
  std::vector<Reservation> held;
  ASSERT_NO_FATAL_FAILURE(queue(local, req, 35, clock.now_us(), held));
  ASSERT_EQ(held.size(), 25u);  // all granted: 10 at once, 25 held
  ASSERT_NO_FATAL_FAILURE(cut(local, req, 1'000'000, clock.now_us()));
  clock.advance(1'000'000);
  AcquireRequest soon = req;
  soon.timeout_us = 300'000;
  const StoreDecision l = local.decide(soon);
  const StoreDecision r = acquire(soon, clock.now_us());
  ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
  // The first permit of the restarted (empty) bucket: one interval of the new rate (4.75/s) away.
  EXPECT_TRUE(r.decision.granted);
  EXPECT_EQ(r.effective_rate, 4.75);
  EXPECT_EQ(r.decision.wait_us, 210'526);
  EXPECT_EQ(l.last_cut_us, clock.now_us() - 1'000'000);
  EXPECT_EQ(r.last_cut_us, clock.now_us() - 1'000'000);
}

// Coalesced decisions: the requests for one bucket that arrive while its call is in flight go in one
// lean call and are decided in order at one instant, with the refunds of held callers who left
// in their places. Random batches (1 to 8 requests, random permits and timeouts, refunds of random
// held reservations between them, interleaved across buckets), rate edits between batches (a
// refund ahead of the edit's first decision sees the old shape), warm-up, both modes, the default
// bound of remembered slots and one small enough to be reached, refunds and general-script calls
// alone on the same keys: every decision and every refund is the in-process store's, double for
// double, as if each had been its own call.
TEST_F(RedisScript, ReplaysBatchesTheSameAsTheLocalStore) {
  int remembered_unbounded = -1;
  for (const auto& [mode, cap] : {std::pair{limiter::Mode::pay_now, limiter::kMaxAbandoned},
                                  std::pair{limiter::Mode::pay_later, limiter::kMaxAbandoned},
                                  std::pair{limiter::Mode::pay_now, std::size_t{3}}}) {
    SCOPED_TRACE(std::string(mode == limiter::Mode::pay_now ? "pay now" : "pay later") + ", bound " +
                 std::to_string(cap));
    begin(Route::general);
    ManualClock clock(1'700'000'000'000'000);
    LocalStore local(clock, LocalStore::kDefaultMaxClientKeys, cap);
    std::mt19937_64 rng(7);
    std::vector<BucketParams> params = replay_buckets(mode);
    const char* names[] = {"/a", "/b", "/w"};
    int granted = 0, rejected = 0, refunded = 0, refunded_in_batch = 0, remembered_in_batch = 0, batches = 0,
        largest = 0;
    std::vector<std::pair<AcquireRequest, Reservation>> held[3];  // per bucket
    for (int step = 0; step < 1500; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      clock.advance(static_cast<Micros>(rng() % 400'000));
      if (rng() % 40 == 0) params[rng() % 3].rate = 1 + static_cast<double>(rng() % 9);  // an operator edit
      const int b = static_cast<int>(rng() % 3);
      std::vector<AcquireRequest> reqs(1 + rng() % 8,
                                       AcquireRequest{{names[b], params[b]}, {}, b < 2 ? "X" : names[b], 1.0, 0});
      for (AcquireRequest& r : reqs) {
        r.timeout_us = static_cast<Micros>(rng() % 1'500'000);
        if (rng() % 5 == 0) r.permits = 0.5 + static_cast<double>(rng() % 3);
      }
      // Callers of this bucket that leave while held join the batch at random places.
      std::deque<std::pair<AcquireRequest, Reservation>> leaving;  // stays where it is as it grows
      std::vector<LeanEntry> entries;
      for (const AcquireRequest& r : reqs) {
        while (!held[b].empty() && rng() % 2 == 0) {
          const std::size_t k = rng() % held[b].size();
          leaving.push_back(held[b][k]);
          held[b].erase(held[b].begin() + static_cast<std::ptrdiff_t>(k));
          entries.push_back({&leaving.back().first, &leaving.back().second});
        }
        entries.push_back({&r});
      }
      const std::vector<LeanAnswer> answers = lean_batch(entries, clock.now_us(), cap);
      ASSERT_EQ(answers.size(), entries.size());
      ++batches;
      largest = std::max(largest, static_cast<int>(entries.size()));
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (entries[i].give_back) {
          const RefundResult lb = local.give_back_slots(*entries[i].req, *entries[i].give_back);
          ASSERT_NO_FATAL_FAILURE(expect_same_refund(lb, answers[i].refund)) << "refund " << i << " of " << entries.size();
          refunded_in_batch += lb.any();
          remembered_in_batch += lb.remembered;
          continue;
        }
        const StoreDecision l = local.decide(*entries[i].req);
        ASSERT_NO_FATAL_FAILURE(expect_same(l, answers[i].decision)) << "decision " << i << " of " << entries.size();
        if (l.decision.granted) {
          ++granted;
          if (l.decision.wait_us > 0) held[b].push_back({*entries[i].req, l.reservation});
        } else {
          ++rejected;
        }
      }
      if (rng() % 4 == 0) {  // a single request through the general script, on the same key
        AcquireRequest one{{names[b], params[b]}, {}, b < 2 ? "X" : names[b], 1.0, 300'000};
        ASSERT_NO_FATAL_FAILURE(expect_same(local.decide(one), acquire(one, clock.now_us())));
      }
      if (!held[b].empty() && rng() % 5 == 0) {  // a held caller leaves, through the refund script
        auto [hreq, res] = held[b].back();
        held[b].pop_back();
        const RefundResult lb = local.give_back_slots(hreq, res);
        ASSERT_NO_FATAL_FAILURE(expect_same_refund(lb, give_back(hreq, res, clock.now_us(), cap)));
        refunded += lb.any();
      }
    }
    std::printf("bound %zu: batches %d (largest %d): granted %d, rejected %d, refunded %d alone and %d in batches "
                "(%d remembered)\n",
                cap, batches, largest, granted, rejected, refunded, refunded_in_batch, remembered_in_batch);
    EXPECT_GT(granted, 1000);
    EXPECT_GT(rejected, 1000);
    EXPECT_GT(refunded, 10);
    EXPECT_GT(refunded_in_batch, 50);
    EXPECT_GT(remembered_in_batch, 50);
    EXPECT_GE(largest, 8);
    // The same seed with the small bound: the run goes another way once the bound is reached.
    if (cap != limiter::kMaxAbandoned) {
      EXPECT_NE(remembered_in_batch, remembered_unbounded) << "the bound of " << cap << " was never reached";
    } else if (mode == limiter::Mode::pay_now) {
      remembered_unbounded = remembered_in_batch;
    }
  }
}

// Held requests whose callers leave in random order, one by one or in crowds, some after their
// slot: the script remembers and gives back exactly what the in-process store does, and both leave
// every bucket in the same state (stored permits, next_free, remembered slots), with the default
// bound and with a bound small enough to be reached all the time.
TEST_F(RedisScript, ReplaysAbandonedSlotsTheSameAsTheLocalStore) {
  for (const Route rt : kRoutes) {
    SCOPED_TRACE(route_name(rt));
    for (const std::size_t cap : {limiter::kMaxAbandoned, std::size_t{3}}) {
      SCOPED_TRACE("bound " + std::to_string(cap));
      begin(rt);
      ManualClock clock(1'700'000'000'000'000);
      LocalStore local(clock, LocalStore::kDefaultMaxClientKeys, cap);
      std::mt19937_64 rng(cap);
      std::vector<BucketParams> params(4);
      params[0].rate = 5;
      params[1].rate = 3;
      params[1].burst = 2;
      params[2].rate = 2;
      params[2].warmup_us = 3'000'000;
      params[3].rate = 4;  // the channel of /a and /b
      const char* names[] = {"/a", "/b", "/w"};
      int remembered = 0, collapses = 0, given = 0, late = 0;
      std::vector<std::pair<AcquireRequest, Reservation>> held;
      for (int step = 0; step < 6000; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        clock.advance(static_cast<Micros>(rng() % 60'000));
        if (rng() % 400 == 0) params[rng() % 4].rate = 1 + static_cast<double>(rng() % 9);  // an operator edit
        if (rng() % 5 < 3) {
          const int b = static_cast<int>(rng() % 3);
          AcquireRequest req{{names[b], params[b]}, {}, b < 2 ? "X" : names[b], 1.0,
                             static_cast<Micros>(rng() % 8'000'000)};
          if (b < 2 && rng() % 2) req.parent = BucketRef{"channel:X", params[3]};
          switch (rng() % 8) {
            case 0: req.permits = 0.5 + static_cast<double>(rng() % 3); break;
            case 1: req.permits = 1e-7; break;  // takes no time: shares the release before it
            default: break;
          }
          const StoreDecision l = local.decide(req);
          const StoreDecision r = acquire(req, clock.now_us());
          ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
          if (l.decision.granted && l.decision.wait_us > 0) held.push_back({req, l.reservation});
          continue;
        }
        // Callers leave: one, or a crowd (oldest first, newest first, or any order).
        const std::size_t crowd = rng() % 4 == 0 ? 1 + rng() % 12 : 1;
        const int how = static_cast<int>(rng() % 3);
        for (std::size_t k = 0; k < crowd && !held.empty(); ++k) {
          const std::size_t pick = how == 0 ? 0 : how == 1 ? held.size() - 1 : rng() % held.size();
          auto [hreq, res] = held[pick];
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
          late += std::max(res.release, res.parent_release) <= clock.now_us();
          const RefundResult l = local.give_back_slots(hreq, res);
          ASSERT_NO_FATAL_FAILURE(expect_same_refund(l, give_back(hreq, res, clock.now_us(), cap)));
          remembered += l.remembered;
          collapses += l.bucket > 1 || l.parent > 1;
          given += static_cast<int>(l.bucket + l.parent);
        }
        // Every bucket the same in both stores, remembered slots included.
        for (const auto& [tag, ref] : {std::pair<std::string_view, BucketRef>{"X", {"/a", params[0]}},
                                       {"X", {"/b", params[1]}}, {"/w", {"/w", params[2]}},
                                       {"X", {"channel:X", params[3]}}}) {
          const auto l = local.inspect(ref, tag);
          const BucketSnapshot r = snapshot(tag, ref.name, clock.now_us());
          if (!r.tracked) continue;  // not used yet (the in-process store may have swept nothing)
          ASSERT_EQ(l->stored, r.stored) << ref.name;
          ASSERT_EQ(l->next_free, r.next_free) << ref.name;
          ASSERT_EQ(l->abandoned, r.abandoned) << ref.name;
        }
      }
      std::printf("bound %zu: remembered %d, collapses %d, slots given back %d, left after their slot %d\n", cap,
                  remembered, collapses, given, late);
      EXPECT_GT(remembered, 300);
      EXPECT_GT(collapses, 50);
      EXPECT_GT(late, 50);
    }
  }
}

// Granted requests that reached no upstream give their permits back (return_unused): the same
// in both stores, double for double, whatever the bucket is doing (queued, full, warming up, with
// a channel bucket), and the bucket afterwards decides the same.
TEST_F(RedisScript, ReplaysUnusedPermitsTheSameAsTheLocalStore) {
  begin(Route::general);
  ManualClock clock(1'700'000'000'000'000);
  LocalStore local(clock);
  std::mt19937_64 rng(7);
  std::vector<BucketParams> params = replay_buckets(limiter::Mode::pay_now);
  params.push_back(BucketParams{});
  params[3].rate = 4;  // the channel of /a and /b
  const char* names[] = {"/a", "/b", "/w"};
  int returned = 0, full = 0;
  std::vector<AcquireRequest> granted;
  for (int step = 0; step < 4000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    clock.advance(static_cast<Micros>(rng() % 80'000));
    if (rng() % 3 != 0 || granted.empty()) {
      const int b = static_cast<int>(rng() % 3);
      AcquireRequest req{{names[b], params[b]}, {}, b < 2 ? "X" : names[b], 1.0, static_cast<Micros>(rng() % 2'000'000)};
      if (b < 2 && rng() % 2) req.parent = BucketRef{"channel:X", params[3]};
      if (rng() % 6 == 0) req.permits = 0.5 + static_cast<double>(rng() % 3);
      const StoreDecision l = local.decide(req);
      ASSERT_NO_FATAL_FAILURE(expect_same(l, acquire(req, clock.now_us())));
      if (l.decision.granted) granted.push_back(req);
      continue;
    }
    const std::size_t pick = rng() % granted.size();
    const AcquireRequest req = granted[pick];
    granted.erase(granted.begin() + static_cast<std::ptrdiff_t>(pick));
    const RefundResult l = local.give_back_unused(req);
    ASSERT_NO_FATAL_FAILURE(expect_same_refund(l, restore(req, clock.now_us())));
    returned += static_cast<int>(l.bucket + l.parent);
    full += l.bucket == 0;
    for (const auto& [tag, ref] : {std::pair<std::string_view, BucketRef>{"X", {"/a", params[0]}},
                                   {"X", {"/b", params[1]}}, {"/w", {"/w", params[2]}},
                                   {"X", {"channel:X", params[3]}}}) {
      const auto ls = local.inspect(ref, tag);
      const BucketSnapshot rs = snapshot(tag, ref.name, clock.now_us());
      if (!rs.tracked) continue;
      ASSERT_EQ(ls->stored, rs.stored) << ref.name;
      ASSERT_EQ(ls->next_free, rs.next_free) << ref.name;
    }
  }
  std::printf("permits returned %d, to a full bucket (nothing to give) %d\n", returned, full);
  EXPECT_GT(returned, 300);
  EXPECT_GT(full, 20);
}

// Request costs and priority classes decide the same in both stores: each bucket its own permits
// (cost, channelCost) and its own reserve for the classes above the request's, in one step, a
// rejection of either charging neither; and unused permits come back per bucket.
TEST_F(RedisScript, ReplaysCostsAndClassesTheSameAsTheLocalStore) {
  begin(Route::general);
  ManualClock clock(1'700'000'000'000'000);
  LocalStore local(clock);
  std::mt19937_64 rng(2697);
  std::vector<BucketParams> params = replay_buckets(limiter::Mode::pay_now);
  params.push_back(BucketParams{});
  params[3].rate = 10;  // the channel of /a and /b
  params[3].burst = 10;
  const char* names[] = {"/a", "/b", "/w"};
  const double shares[] = {0, 0, 0.3, 0.5};
  int granted = 0, rejected = 0, lower_held = 0, returned = 0;
  std::vector<AcquireRequest> unused;
  for (int step = 0; step < 4000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    clock.advance(static_cast<Micros>(rng() % 150'000));
    if (rng() % 50 == 0) params[rng() % 2].rate = 1 + static_cast<double>(rng() % 9);  // an operator edit
    if (rng() % 5 == 0 && !unused.empty()) {
      const AcquireRequest req = unused.back();
      unused.pop_back();
      const RefundResult l = local.give_back_unused(req);
      ASSERT_NO_FATAL_FAILURE(expect_same_refund(l, restore(req, clock.now_us())));
      returned += static_cast<int>(l.bucket + l.parent);
      continue;
    }
    const int b = static_cast<int>(rng() % 3);
    AcquireRequest req{{names[b], params[b]}, {}, b < 2 ? "X" : names[b], 1.0, static_cast<Micros>(rng() % 1'000'000)};
    req.permits = 1 + static_cast<double>(rng() % 3);
    if (b < 2) {  // classes only on the SmoothBursty buckets, as the config allows
      req.reserve_share = shares[rng() % 4];
      if (rng() % 2) {
        req.parent = BucketRef{"channel:X", params[3]};
        req.parent_permits = 1 + static_cast<double>(rng() % 5);
        req.parent_reserve_share = shares[rng() % 4];
      }
    }
    const StoreDecision l = local.decide(req);
    ASSERT_NO_FATAL_FAILURE(expect_same(l, acquire(req, clock.now_us())));
    if (l.decision.granted) {
      ++granted;
      lower_held += (req.reserve_share > 0 || req.parent_reserve_share > 0) && l.decision.wait_us > 0;
      if (rng() % 3 == 0) unused.push_back(req);
    } else {
      ++rejected;
    }
  }
  std::printf("granted %d (lower classes held %d), rejected %d, returned %d\n", granted, lower_held, rejected, returned);
  EXPECT_GT(granted, 800);
  EXPECT_GT(rejected, 400);
  EXPECT_GT(lower_held, 50);
  EXPECT_GT(returned, 50);
}

// Three-colour meters decide the same in both stores: srTCM and trTCM, colour-blind and aware,
// forwarding yellows or waiting for a green, costs, a channel bucket and a quota in the same step,
// and operator edits of their rates and sizes: every colour, wait, retry and count double for double.
TEST_F(RedisScript, ReplaysMetersTheSameAsTheLocalStore) {
  begin(Route::general);
  ManualClock clock(1'700'000'000'000'000);
  LocalStore local(clock);
  std::mt19937_64 rng(2698);
  limiter::SrtcmParams sr{10, 5, 10};
  limiter::TrtcmParams tr{8, 4, 20, 12};
  BucketParams channel;
  channel.rate = 12;
  int colours[3] = {0, 0, 0}, held = 0;
  for (int step = 0; step < 4000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    clock.advance(static_cast<Micros>(rng() % 4 == 0 ? 0 : rng() % 250'000));
    if (rng() % 60 == 0) sr = {1 + static_cast<double>(rng() % 20), static_cast<double>(rng() % 8), 1 + static_cast<double>(rng() % 12)};
    if (rng() % 60 == 0) {
      const double cir = 1 + static_cast<double>(rng() % 15);
      tr = {cir, 1 + static_cast<double>(rng() % 6), cir + static_cast<double>(rng() % 10), 1 + static_cast<double>(rng() % 14)};
    }
    const bool two = rng() % 2;
    const std::string name = two ? "/t" : "/m";
    AcquireRequest req{{name, BucketParams{}}, {}, "X", 1 + static_cast<double>(rng() % 3),
                       static_cast<Micros>(rng() % 800'000)};
    req.use_bucket = false;
    req.meter = MeterRef{two ? "/t" : "/m", two, sr, tr, static_cast<limiter::Color>(rng() % 5 == 0 ? rng() % 3 : 0),
                         rng() % 2 == 0};
    if (rng() % 3 == 0) req.parent = BucketRef{"channel:X", channel};
    if (rng() % 5 == 0) req.quotas.push_back({"q:9:", {1'000'000, 7, limiter::WindowAlgorithm::fixed}, true});
    const StoreDecision l = local.decide(req);
    const StoreDecision r = acquire(req, clock.now_us());
    if (std::getenv("REPLAY_DEBUG"))
      std::fprintf(stderr, "%d %s sr=%g/%g/%g cost=%g pre=%d wait=%d parent=%d quota=%zu | L g=%d c=%d w=%lld r=%lld rem=%.17g mc=%.17g | R g=%d c=%d w=%lld r=%lld rem=%.17g mc=%.17g\n",
                   step, name.c_str(), sr.cir, sr.cbs, sr.ebs, req.permits, (int)req.meter->pre, (int)req.meter->wait_green, req.parent ? 1 : 0,
                   req.quotas.size(), l.decision.granted, (int)l.color, (long long)l.decision.wait_us,
                   (long long)l.decision.retry_after_us, l.decision.remaining, l.meter_committed, r.decision.granted,
                   (int)r.color, (long long)r.decision.wait_us, (long long)r.decision.retry_after_us,
                   r.decision.remaining, r.meter_committed);
    ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
    ASSERT_EQ(l.color, r.color);
    ASSERT_EQ(l.bound, r.bound);
    if (l.decision.granted || l.color == limiter::Color::red) {
      ASSERT_EQ(l.meter_committed, r.meter_committed);
      ASSERT_EQ(l.meter_excess, r.meter_excess);
    }
    ++colours[static_cast<int>(l.color)];
    held += l.decision.granted && l.decision.wait_us > 0;
  }
  std::printf("green %d, yellow %d, red %d, held for a green %d\n", colours[0], colours[1], colours[2], held);
  EXPECT_GT(colours[0], 500);
  EXPECT_GT(colours[1], 300);
  EXPECT_GT(colours[2], 300);
  EXPECT_GT(held, 100);
}

// The same replay with everything a request can carry: per-client buckets, quota-only
// rules, fixed and sliding quotas (shared and per client), maxShare, a channel bucket, quota edits.
TEST_F(RedisScript, ReplaysQuotasSharesAndClientBucketsTheSameAsTheLocalStore) {
  for (const Route rt : kRoutes) {
    SCOPED_TRACE(route_name(rt));
    begin(rt);
    ManualClock clock(1'700'000'000'000'000);
    LocalStore local(clock);
    std::mt19937_64 rng(7);
    const std::string clients[] = {"10.0.0.1", "10.0.0.2", "h=key-a"};
    const std::string client_buckets[] = {"c:5:10.0.0.1", "c:5:10.0.0.2", "c:5:h=key-a"};
    BucketParams bucket, channel;
    bucket.rate = 5;
    bucket.burst = 2;
    channel.rate = 8;
    std::int64_t limits[] = {6, 12, 60};
    int granted = 0, by_quota = 0, by_share = 0, by_bucket = 0, refunded = 0;
    std::vector<std::pair<AcquireRequest, Reservation>> held;
    for (int step = 0; step < 8000; ++step) {
      clock.advance(static_cast<Micros>(rng() % 100'000));
      if (rng() % 300 == 0) limits[rng() % 3] = 3 + static_cast<std::int64_t>(rng() % 40);  // an operator edit
      const int c = static_cast<int>(rng() % 3);
      AcquireRequest req{{"/a", bucket}, {}, "X", 1.0, static_cast<Micros>(rng() % 1'000'000)};
      switch (rng() % 3) {
        case 0: break;                                                   // the shared bucket
        case 1: req.bucket.name = client_buckets[c]; req.per_client_bucket = true; break;
        case 2: req.use_bucket = false; break;                           // quotas only
      }
      if (rng() % 3 == 0) req.parent = BucketRef{"channel:X", channel};
      if (rng() % 2 != 0) req.quotas.push_back({"q:1:" + clients[c], {1'000'000, limits[0], limiter::WindowAlgorithm::fixed}, false});
      if (rng() % 2 == 0) req.quotas.push_back({"q:2:" + clients[c], {3'000'000, limits[1], limiter::WindowAlgorithm::sliding}, false});
      if (rng() % 3 == 0) req.quotas.push_back({"q:3:", {10'000'000, limits[2], limiter::WindowAlgorithm::sliding}, true});
      if (req.use_bucket && rng() % 4 != 0) req.share = ShareRef{"s:5:" + clients[c], 1 + static_cast<std::int64_t>(rng() % 2)};
      const StoreDecision l = local.decide(req);
      const StoreDecision r = acquire(req, clock.now_us());
      SCOPED_TRACE("step " + std::to_string(step));
      ASSERT_NO_FATAL_FAILURE(expect_same(l, r));
      ASSERT_EQ(static_cast<int>(l.bound), static_cast<int>(r.bound));
      ASSERT_EQ(l.quotas.size(), r.quotas.size());
      for (std::size_t i = 0; i < l.quotas.size(); ++i) {
        ASSERT_EQ(l.quotas[i].admitted, r.quotas[i].admitted) << "quota " << i;
        ASSERT_EQ(l.quotas[i].used, r.quotas[i].used) << "quota " << i;
        ASSERT_EQ(l.quotas[i].remaining, r.quotas[i].remaining) << "quota " << i;
        ASSERT_EQ(l.quotas[i].retry_after_us, r.quotas[i].retry_after_us) << "quota " << i;
        ASSERT_EQ(l.quotas[i].reset_us, r.quotas[i].reset_us) << "quota " << i;
      }
      if (l.decision.granted) {
        ++granted;
        if (l.decision.wait_us > 0) held.push_back({req, l.reservation});
        if (!held.empty() && rng() % 8 == 0) {  // a held caller leaves (often the newest): its slot and its share come back
          const std::size_t pick = rng() % 2 ? held.size() - 1 : rng() % held.size();
          auto [hreq, res] = held[pick];
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
          const RefundResult lb = local.give_back_slots(hreq, res);
          ASSERT_NO_FATAL_FAILURE(expect_same_refund(lb, give_back(hreq, res, clock.now_us())));
          refunded += lb.any();
        }
      } else {
        ASSERT_EQ(l.bound_quota, r.bound_quota);
        by_quota += l.bound == Bound::quota;
        by_share += l.bound == Bound::share;
        by_bucket += l.bound == Bound::bucket || l.bound == Bound::parent;
      }
    }
    // The sequence exercised every kind of outcome.
    std::printf("granted %d, bound by quota %d, share %d, bucket %d, refunded %d\n", granted, by_quota, by_share,
                by_bucket, refunded);
    EXPECT_GT(granted, 1000);
    EXPECT_GT(by_quota, 100);
    EXPECT_GT(by_share, 20);
    EXPECT_GT(by_bucket, 100);
    EXPECT_GT(refunded, 20);
    if (rt != Route::general) {  // most requests here carry a quota, a share or a channel bucket
      EXPECT_GT(lean_calls, rt == Route::lean ? 100 : 40);
    }
  }
}

TEST_F(RedisScript, QuotaKeysExpireWithTheirWindow) {
  AcquireRequest req{{"/q", {}}, {}, "/q", 1.0, 0};
  req.use_bucket = false;
  req.quotas = {{"q:1:a", {60'000'000, 5, limiter::WindowAlgorithm::fixed}, false},
                {"q:2:a", {60'000'000, 5, limiter::WindowAlgorithm::sliding}, false}};
  const Micros now = 1'700'000'000'000'000 + 15'000'000;  // 15 s into a minute... of the epoch's minutes
  ASSERT_TRUE(acquire(req, now).decision.granted);
  auto ttl = [&](const char* key) {
    redisReply* r = redis->cmd({"PTTL", redis_key("t:", "/q", key)});
    const long long v = r ? r->integer : -3;
    if (r) freeReplyObject(r);
    return v;
  };
  const long long window_end_ms = (60'000'000 - now % 60'000'000) / 1000;
  EXPECT_NEAR(ttl("q:1:a"), window_end_ms, 50);           // fixed: the end of its window
  EXPECT_NEAR(ttl("q:2:a"), window_end_ms + 60'000, 50);  // sliding: read as "previous" one more window
}

TEST_F(RedisScript, StateExpiresWhenTheBucketWouldBeFullAnyway) {
  for (const Route rt : {Route::general, Route::lean}) {
    SCOPED_TRACE(route_name(rt));
    begin(rt);
    BucketParams p;
    p.rate = 10;  // 100 ms per permit, 10 stored
    AcquireRequest req{{"/ttl", p}, {}, {}, 1.0, 0};
    const Micros now = 1'700'000'000'000'000;
    for (int i = 0; i < 4; ++i) acquire(req, now);
    redisReply* r = redis->cmd({"PTTL", redis_key("t:", "", "/ttl")});
    ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
    // 4 permits to refill at 100 ms each: 400 ms, plus the one second of margin.
    EXPECT_GE(r->integer, 1300);
    EXPECT_LE(r->integer, 1400);
    freeReplyObject(r);
  }
}

// How many times Redis ran `command` (scripts' calls included) since the last CONFIG RESETSTAT.
long long command_calls(Sync& redis, const std::string& command) {
  redisReply* r = redis.cmd({"INFO", "commandstats"});
  long long n = 0;
  if (r && r->type == REDIS_REPLY_STRING) {
    const std::string text(r->str, r->len);
    const std::string tag = "cmdstat_" + command + ":calls=";
    if (const auto at = text.find(tag); at != std::string::npos) n = std::stoll(text.substr(at + tag.size()));
  }
  if (r) freeReplyObject(r);
  return n;
}

// The lean script reads the bucket once, writes it once on a grant (HSET, PEXPIRE), and writes
// nothing on a rejection, unless the rule changed: then the rescaled state is kept, as the
// in-process store keeps it, and the next decisions agree with that store's.
TEST_F(RedisScript, LeanScriptWritesOnlyGrantsAndRescales) {
  begin(Route::lean);
  ManualClock clock(1'700'000'000'000'000);
  LocalStore local(clock);
  BucketParams p;
  p.rate = 2;  // 500 ms per permit, 2 stored
  AcquireRequest req{{"/lean", p}, {}, {}, 1.0, 0};
  auto decide = [&](const AcquireRequest& x) {
    const StoreDecision l = local.decide(x);
    const StoreDecision r = acquire(x, clock.now_us());
    EXPECT_NO_FATAL_FAILURE(expect_same(l, r));
    return r;
  };
  freeReplyObject(redis->cmd({"CONFIG", "RESETSTAT"}));
  EXPECT_TRUE(decide(req).decision.granted);
  EXPECT_TRUE(decide(req).decision.granted);
  EXPECT_EQ(command_calls(*redis, "hmget"), 2);
  EXPECT_EQ(command_calls(*redis, "hset"), 2);
  EXPECT_EQ(command_calls(*redis, "pexpire"), 2);
  for (int i = 0; i < 3; ++i) {
    clock.advance(100'000);
    EXPECT_FALSE(decide(req).decision.granted);
  }
  EXPECT_EQ(command_calls(*redis, "hmget"), 5);
  EXPECT_EQ(command_calls(*redis, "hset"), 2);  // rejections: no write
  EXPECT_EQ(command_calls(*redis, "pexpire"), 2);
  EXPECT_EQ(lean_calls, 5);

  // An operator halves the rate: the first decision after it is a rejection, and it keeps the
  // rescaled state (0.6 of 2 stored becomes 0.3 of 1).
  req.bucket.params.rate = 1;
  EXPECT_FALSE(decide(req).decision.granted);  // the next permit is 0.7 s away
  EXPECT_EQ(command_calls(*redis, "hset"), 3);
  EXPECT_EQ(command_calls(*redis, "pexpire"), 3);
  clock.advance(50'000);
  EXPECT_FALSE(decide(req).decision.granted);  // no edit since: no write
  EXPECT_EQ(command_calls(*redis, "hset"), 3);
  clock.advance(800'000);
  const StoreDecision g = decide(req);
  EXPECT_TRUE(g.decision.granted);
  EXPECT_EQ(command_calls(*redis, "hset"), 4);
  const BucketSnapshot after = snapshot("", "/lean", clock.now_us());
  const auto l = local.inspect(req.bucket, "");
  EXPECT_EQ(after.stored, l->stored);
  EXPECT_EQ(after.next_free, l->next_free);

  // The same shape stored as other text (written by another formatter) is no rule change.
  freeReplyObject(redis->cmd({"HSET", redis_key("t:", "", "/lean"), "m", "1.0", "c", "1e6"}));
  const long long writes = command_calls(*redis, "hset");
  clock.advance(10'000);
  EXPECT_FALSE(decide(req).decision.granted);
  EXPECT_EQ(command_calls(*redis, "hset"), writes);  // not rescaled: nothing written
  clock.advance(1'000'000);
  EXPECT_TRUE(decide(req).decision.granted);
}

TEST_F(RedisScript, UsesRedisTimeWithoutOverride) {
  BucketParams p;
  p.rate = 1;
  AcquireRequest req{{"/time", p}, {}, {}, 1.0, 0};
  const double unix_us = static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                 std::chrono::system_clock::now().time_since_epoch())
                                                 .count());
  std::vector<std::string> args{"EVAL", acquire_script()};
  for (auto& a : acquire_call(req, "t:", "")) args.push_back(a);
  redisReply* r = redis->cmd(args);
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->str ? r->str : "");
  EXPECT_EQ(r->element[0]->integer, 1);
  // The release time is the server's clock in microseconds (a Unix time, not this process's clock).
  const double release = std::stod(str(r->element[7]));
  EXPECT_NEAR(release, unix_us, 5e6);
  freeReplyObject(r);

  // The lean script likewise (a bucket of its own: this one's slot is taken).
  req.bucket.name = "/time-lean";
  args = {"EVAL", lean_acquire_script()};
  for (auto& a : lean_acquire_call(req, "t:", "")) args.push_back(a);
  r = redis->cmd(args);
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->str ? r->str : "");
  const auto d = parse_lean_acquire_reply(req, items(r));
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->decision.granted);
  EXPECT_NEAR(static_cast<double>(d->reservation.release), unix_us, 5e6);
  freeReplyObject(r);
}

// A store on the shared test server, for tests that drive one thread's io_context: its own key
// prefix, a decision timeout a loaded machine meets, and no heartbeat within a test (its EVAL would
// count with the calls a test counts).
RedisOptions shared_server_options(const std::string& prefix) {
  RedisOptions o;
  o.port = static_cast<std::uint16_t>(RedisServer::shared().port());
  o.key_prefix = prefix;
  o.decision_timeout_ms = 2000;
  o.heartbeat_ms = 60'000;
  return o;
}

// Waits, at most 2 s, until the store has connected.
boost::asio::awaitable<void> until_up(boost::asio::io_context& ctx, const RedisStore& store) {
  boost::asio::steady_timer t(ctx);
  for (int i = 0; i < 200 && !store.stats().up; ++i) {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(boost::asio::use_awaitable);
  }
}

// A Redis store on the flushed shared test server, driven by the test's one io_context, with a
// plain connection beside it for what the test reads or resets.
class StoreOnSharedServer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
    RedisServer::shared().flush();
    admin_ = std::make_unique<Sync>(RedisServer::shared().port());
    ASSERT_TRUE(admin_->ok());
  }
  RedisStore& start_store(const std::string& prefix) {
    store_ = std::make_unique<RedisStore>(shared_server_options(prefix), std::vector<boost::asio::io_context*>{&ctx},
                                          clock);
    store_->start();
    return *store_;
  }
  limiter::SteadyClock clock;
  boost::asio::io_context ctx;
  std::unique_ptr<Sync> admin_;
  std::unique_ptr<RedisStore> store_;  // destroyed before the context it runs on
};
using RedisStoreScripts = StoreOnSharedServer;
using RedisStoreBatches = StoreOnSharedServer;

// Through the store itself (EVALSHA, Redis TIME, the reply parsed): callers held 1, 2 and 3 s leave
// in the order 1, 3, 2; the last departure brings back both remaining slots and the bucket has no debt.
TEST(RedisStoreAbandon, SlotsComeBackThroughTheStore) {
  if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
  RedisServer::shared().flush();
  limiter::SteadyClock clock;
  RedisOptions o;
  o.port = static_cast<std::uint16_t>(RedisServer::shared().port());
  o.key_prefix = "live:";
  o.decision_timeout_ms = 2000;
  boost::asio::io_context ctx;
  RedisStore store(o, {&ctx}, clock);
  store.start();
  BucketParams p;
  p.rate = 1;
  const AcquireRequest req{{"/live", p}, {}, {}, 1.0, 10'000'000};
  std::vector<StoreDecision> d;
  std::vector<RefundResult> r;
  std::optional<BucketSnapshot> after;
  boost::asio::co_spawn(
      ctx,
      [&]() -> boost::asio::awaitable<void> {
        boost::asio::steady_timer t(ctx);
        co_await until_up(ctx, store);
        for (int i = 0; i < 4; ++i) d.push_back(co_await store.try_acquire(req));
        for (int i : {1, 3, 2}) r.push_back(co_await store.refund_slots(req, d[static_cast<std::size_t>(i)].reservation));
        // Read as the admin API does: from another thread, over this thread's connection.
        auto read = std::async(std::launch::async, [&] { return store.inspect(req.bucket, ""); });
        while (read.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
          t.expires_after(std::chrono::milliseconds(5));
          co_await t.async_wait(boost::asio::use_awaitable);
        }
        after = read.get();
        store.stop();
      },
      boost::asio::detached);
  ctx.run();
  ASSERT_EQ(d.size(), 4u);
  for (const StoreDecision& x : d) ASSERT_FALSE(x.degraded) << x.error;
  EXPECT_EQ(d[0].decision.wait_us, 0);
  EXPECT_GT(d[3].decision.wait_us, 2'900'000);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].bucket, 0u);
  EXPECT_TRUE(r[0].remembered);
  EXPECT_EQ(r[1].bucket, 1u);
  EXPECT_EQ(r[2].bucket, 2u);
  EXPECT_EQ(store.stats().refunds, 3u);
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(after->next_free, after->now);  // no debt left
  EXPECT_EQ(after->abandoned, 0u);
}

// Through the store: a request with one bucket takes the lean script, one with a channel bucket the
// general one; after SCRIPT FLUSH (a restarted or failed-over Redis) each is sent once with EVAL and
// nothing falls to the failure policy.
TEST_F(RedisStoreScripts, BothScriptsAreSentAgainAfterAFlush) {
  Sync& admin = *admin_;
  RedisStore& store = start_store("flush:");
  BucketParams p;
  p.rate = 1;  // 10 stored; a permit per second comes back: a few ms of test add ~0.00x
  p.burst = 10;
  const AcquireRequest lean{{"/one", p}, {}, "X", 1.0, 0};
  const AcquireRequest general{{"/one", p}, BucketRef{"channel:X", p}, "X", 1.0, 0};
  ASSERT_TRUE(lean_request(lean));
  ASSERT_FALSE(lean_request(general));
  std::vector<StoreDecision> d;
  long long evalsha_before = -1, eval_after = -1;
  boost::asio::co_spawn(
      ctx,
      [&]() -> boost::asio::awaitable<void> {
        boost::asio::steady_timer t(ctx);
        co_await until_up(ctx, store);
        freeReplyObject(admin.cmd({"CONFIG", "RESETSTAT"}));
        d.push_back(co_await store.try_acquire(lean));
        d.push_back(co_await store.try_acquire(general));
        evalsha_before = command_calls(admin, "evalsha");
        freeReplyObject(admin.cmd({"SCRIPT", "FLUSH"}));
        d.push_back(co_await store.try_acquire(lean));
        d.push_back(co_await store.try_acquire(general));
        eval_after = command_calls(admin, "eval");
        store.stop();
      },
      boost::asio::detached);
  ctx.run();
  ASSERT_EQ(d.size(), 4u);
  for (const StoreDecision& x : d) {
    EXPECT_EQ(x.status, StoreStatus::ok) << x.error;
    EXPECT_FALSE(x.degraded) << x.error;
    EXPECT_TRUE(x.decision.granted);
  }
  EXPECT_EQ(evalsha_before, 2);
  EXPECT_EQ(eval_after, 2);  // each body once, after its NOSCRIPT
  EXPECT_NEAR(d[2].decision.remaining, 7, 0.1);  // one permit each from 10: the same key both ways
}

// The `local` failure policy shares quotas like buckets: limitCount / N per instance.
TEST(RedisFallback, LocalPolicyDividesQuotasByTheFleet) {
  ManualClock clock(1'700'000'000'000'000);
  RedisOptions o;
  o.port = 1;  // never started: every decision takes the failure policy
  boost::asio::io_context ctx;
  FailurePolicyStore store(std::make_unique<RedisStore>(o, std::vector<boost::asio::io_context*>{&ctx}, clock),
                           std::make_unique<LocalStore>(clock), FailurePolicy::local, /*local_divisor=*/2, {});
  AcquireRequest req{{"/q", {}}, {}, "/q", 1.0, 0};
  req.use_bucket = false;
  req.quotas = {{"q:1:a", {60'000'000, 5, limiter::WindowAlgorithm::fixed}, false}};
  int admitted = 0, degraded = 0;
  boost::asio::co_spawn(
      ctx,
      [&]() -> boost::asio::awaitable<void> {
        for (int i = 0; i < 5; ++i) {
          const StoreDecision d = co_await store.try_acquire(req);
          admitted += d.decision.granted ? 1 : 0;
          degraded += d.degraded ? 1 : 0;
        }
      },
      boost::asio::detached);
  ctx.run();
  EXPECT_EQ(degraded, 5);
  EXPECT_EQ(admitted, 2);  // 5 / 2 per instance
}

}  // namespace
}  // namespace tollgate::store

namespace tollgate::store {
namespace {

// Through the store: forty decisions on one bucket from one thread at once go in a few calls, not
// forty (the first alone, the ones that arrived while it was in flight together), and get exactly
// what forty separate calls would: the ten stored permits, then refusals.
TEST_F(RedisStoreBatches, DecisionsOnOneBucketShareCalls) {
  Sync& admin = *admin_;
  RedisStore& store = start_store("batch:");
  BucketParams p;
  p.rate = 0.01;  // no permit comes back while the test runs
  p.burst = 10;
  const AcquireRequest req{{"/one", p}, {}, {}, 1.0, 0};
  std::vector<StoreDecision> d;
  long long calls = -1;
  int done = 0;
  boost::asio::co_spawn(
      ctx,
      [&]() -> boost::asio::awaitable<void> {
        boost::asio::steady_timer t(ctx);
        co_await until_up(ctx, store);
        freeReplyObject(admin.cmd({"CONFIG", "RESETSTAT"}));
        for (int i = 0; i < 40; ++i) {
          boost::asio::co_spawn(
              ctx,
              [&]() -> boost::asio::awaitable<void> {
                d.push_back(co_await store.try_acquire(req));
                ++done;
              },
              boost::asio::detached);
        }
        while (done < 40) {
          t.expires_after(std::chrono::milliseconds(5));
          co_await t.async_wait(boost::asio::use_awaitable);
        }
        calls = command_calls(admin, "evalsha");
        store.stop();
      },
      boost::asio::detached);
  ctx.run();
  ASSERT_EQ(d.size(), 40u);
  int granted = 0;
  for (const StoreDecision& x : d) {
    ASSERT_EQ(x.status, StoreStatus::ok) << x.error;
    granted += x.decision.granted ? 1 : 0;
  }
  EXPECT_EQ(granted, 10);
  EXPECT_GE(calls, 2);  // the first went alone
  EXPECT_LE(calls, 10);
  std::printf("40 decisions in %lld calls\n", calls);
}

// A handshake that fails part-way (SELECT of a database the server does not have) never makes the
// connection ready: the replies that follow the failed one in the same read belong to a connection
// that is gone. One incident, never ended, its error named, and decisions go to the failure policy
// meanwhile. The server is paused while the store connects, so that it answers the whole handshake
// in one write (the SCRIPT LOAD replies otherwise come after the failed connection is gone).
TEST(RedisStoreHandshake, AFailedSelectNeverEndsTheIncident) {
  if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
  Sync admin(RedisServer::shared().port());
  ASSERT_TRUE(admin.ok());
  freeReplyObject(admin.cmd({"CLIENT", "PAUSE", "300"}));
  limiter::SteadyClock clock;
  RedisOptions o;
  o.port = static_cast<std::uint16_t>(RedisServer::shared().port());
  o.database = 4000;  // the server has 16
  o.heartbeat_ms = 60'000;
  o.decision_timeout_ms = 5000;  // the first handshake waits out the pause
  o.connect_timeout_ms = 5000;
  boost::asio::io_context ctx;
  RedisStore store(o, {&ctx}, clock);
  store.start();
  StoreDecision d;
  bool ever_up = false;
  boost::asio::co_spawn(
      ctx,
      [&]() -> boost::asio::awaitable<void> {
        boost::asio::steady_timer t(ctx);
        for (int i = 0; i < 80; ++i) {  // 0.8 s: several reconnect rounds (100, 200, 400 ms)
          t.expires_after(std::chrono::milliseconds(10));
          co_await t.async_wait(boost::asio::use_awaitable);
          ever_up = ever_up || store.stats().up;
        }
        BucketParams p;
        p.rate = 5;
        d = co_await store.try_acquire(AcquireRequest{{"/a", p}, {}, {}, 1.0, 0});
        store.stop();
      },
      boost::asio::detached);
  ctx.run();
  EXPECT_FALSE(ever_up);
  EXPECT_EQ(store.stats().incidents, 1u);
  EXPECT_NE(store.stats().last_error.find("SELECT"), std::string::npos) << store.stats().last_error;
  EXPECT_EQ(d.status, StoreStatus::unavailable);
}

// Refunds join their bucket's lane: ten held callers that leave at once, newest first, give their
// ten slots back in a few calls (the refund script would take ten), and the bucket is as it was.
TEST_F(RedisStoreBatches, RefundsOfOneBucketShareCallsWithItsDecisions) {
  Sync& admin = *admin_;
  RedisStore& store = start_store("refund:");
  BucketParams p;
  p.rate = 1;  // a held caller waits a second per place in the queue
  p.burst = 1;
  const AcquireRequest req{{"/held", p}, {}, {}, 1.0, 60'000'000};
  std::vector<StoreDecision> held;
  std::vector<RefundResult> refunds;
  StoreDecision after;
  long long refund_calls = -1;
  boost::asio::co_spawn(
      ctx,
      [&]() -> boost::asio::awaitable<void> {
        boost::asio::steady_timer t(ctx);
        co_await until_up(ctx, store);
        (void)co_await store.try_acquire(req);  // the stored permit
        for (int i = 0; i < 10; ++i) held.push_back(co_await store.try_acquire(req));
        freeReplyObject(admin.cmd({"CONFIG", "RESETSTAT"}));
        for (int i = 9; i >= 0; --i) {
          boost::asio::co_spawn(
              ctx,
              [&, i]() -> boost::asio::awaitable<void> {
                refunds.push_back(co_await store.refund_slots(req, held[static_cast<std::size_t>(i)].reservation));
              },
              boost::asio::detached);
        }
        while (refunds.size() < 10) {
          t.expires_after(std::chrono::milliseconds(5));
          co_await t.async_wait(boost::asio::use_awaitable);
        }
        refund_calls = command_calls(admin, "evalsha");
        after = co_await store.try_acquire(req);
        store.stop();
      },
      boost::asio::detached);
  ctx.run();
  ASSERT_EQ(held.size(), 10u);
  for (const StoreDecision& d : held) {
    ASSERT_TRUE(d.decision.granted) << d.error;
    ASSERT_GT(d.decision.wait_us, 0);
  }
  ASSERT_EQ(refunds.size(), 10u);
  std::uint32_t given = 0;
  for (const RefundResult& r : refunds) given += r.bucket;
  EXPECT_EQ(given, 10u);  // each, newest first, was the newest when it left
  EXPECT_GE(refund_calls, 2);  // the first went alone
  EXPECT_LE(refund_calls, 3);
  // The queue is gone: the next caller waits at most the second after the first grant.
  EXPECT_TRUE(after.decision.granted);
  EXPECT_LE(after.decision.wait_us, 1'000'000);
  EXPECT_EQ(store.stats().refunds, 10u);
  std::printf("10 refunds in %lld calls\n", refund_calls);
}

// A held request on another gateway hears of a cut only with that gateway's next decision, or by
// asking (the session asks before a held slot goes): last_cut is the cut the fleet's store made,
// on its clock, the same that its decisions report; 0 for a bucket never cut, and for a store that
// is not asked about an adaptive bucket.
TEST_F(RedisStoreScripts, LastCutIsTheFleetsCut) {
  RedisStore& store = start_store("lastcut:");
  EXPECT_TRUE(store.shared_by_fleet());
  BucketParams p;
  p.rate = 10;
  AcquireRequest req{{"/cut", p}, {}, {}, 1.0, 1'000'000};
  req.adaptive = limiter::Adaptive::on;
  req.caller = limiter::caller_id("10.0.0.1");
  Micros before = -1, after = -1, plain = -1;
  AdaptOutcome cut;
  StoreDecision next;
  boost::asio::co_spawn(
      ctx,
      [&]() -> boost::asio::awaitable<void> {
        co_await until_up(ctx, store);
        (void)co_await store.try_acquire(req);  // the only caller asking: its throttle is evidence
        before = co_await store.last_cut(req);
        cut = co_await store.throttled(req, 0, 0);
        after = co_await store.last_cut(req);
        next = co_await store.try_acquire(req);
        AcquireRequest off = req;
        off.adaptive = limiter::Adaptive::off;
        plain = co_await store.last_cut(off);
        store.stop();
      },
      boost::asio::detached);
  ctx.run();
  EXPECT_EQ(before, 0);
  ASSERT_TRUE(cut.ok) << cut.error;
  ASSERT_TRUE(cut.result.cut);
  EXPECT_GT(after, 0);
  EXPECT_EQ(after, cut.last_cut_us);
  EXPECT_EQ(after, next.last_cut_us);
  EXPECT_EQ(plain, 0);
}

}  // namespace
}  // namespace tollgate::store

namespace tollgate::store {
namespace {

// The slot function against Redis's own CLUSTER KEYSLOT, on a cluster-enabled server of the
// test's own (one node, no slots assigned: enough for KEYSLOT): random keys (any byte), keys with
// every brace arrangement, and Tollgate's own keys.
TEST(RedisCluster, SlotsAreRedisOwn) {
  if (!tollgate::testing::RedisServer::shared().available())
    GTEST_SKIP() << tollgate::testing::RedisServer::shared().why_not();
  const std::string dir = tollgate::testing::temp_dir();
  // Below 55536 with its bus port free: any free port would fail when it is higher (found by CI).
  const int port = tollgate::testing::cluster_node_ports(1).front();
  const std::string script = std::string(TOLLGATE_SOURCE_DIR) + "/scripts/redis-server.sh";
  tollgate::testing::Process start({script, "start", dir, std::to_string(port), "--cluster-enabled", "yes",
                                    "--cluster-config-file", "nodes.conf"});
  ASSERT_EQ(start.wait_exit(std::chrono::seconds(30)), 0) << start.output();
  std::vector<std::string> keys{"somekey", "foo{hash_tag}", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap",
                                "foo{bar}{zap}", "}{x}", "{", "}", "{}", "", std::string("\0\xff{\x80}", 5)};
  for (const std::string_view tag : {"", "/shopping/search", "IBE+", "{odd}", "b{r"}) {
    for (const std::string_view name : {"/shopping/search", "channel:IBE+", "c:7:10.0.0.1", "q:3:", "s:9:k"}) {
      keys.push_back(redis_key("tollgate:", tag, name));
      keys.push_back(abandoned_key("tollgate:", tag, name));
    }
  }
  keys.push_back("tollgate:{instances}");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 500; ++i) {
    std::string k(rng() % 24, '\0');
    for (char& c : k) c = "ab{}\0\xff/:"[rng() % 8];
    keys.push_back(k);
  }
  {
    Sync redis(port);
    ASSERT_TRUE(redis.ok());
    for (const std::string& k : keys) {
      redisReply* r = redis.cmd({"CLUSTER", "KEYSLOT", k});
      ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << (r && r->str ? r->str : "no reply");
      EXPECT_EQ(cluster_slot(k), r->integer) << "key of " << k.size() << " bytes: " << k;
      freeReplyObject(r);
    }
  }
  tollgate::testing::Process stop({script, "stop", dir});
  EXPECT_EQ(stop.wait_exit(std::chrono::seconds(30)), 0) << stop.output();
}

}  // namespace
}  // namespace tollgate::store

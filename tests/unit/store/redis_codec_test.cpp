// The Redis scripts' codec without a server: what each request sends, argument by argument, and
// what each reply means (a malformed one is no decision at all).
#include "tollgate/store/redis_codec.hpp"
#include "tollgate/store/key_schema.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>
#include <vector>

namespace tollgate::store {
namespace {

using Args = std::vector<std::string>;

BucketParams rate(double r) {
  BucketParams p;
  p.rate = r;
  return p;
}

BucketParams warming(double r, Micros warmup_us) {
  BucketParams p = rate(r);
  p.warmup_us = warmup_us;
  return p;
}

double as_double(const std::string& s) { return std::stod(s); }

constexpr const char* kNever = "9007199254740992";  // the scripts' 2^53

// ---- the general script ----

TEST(RedisCodec, AcquireCallOfABucketAlone) {
  AcquireRequest req{{"/a", rate(4)}, {}, {}, 1.5, 250'000};
  const Args a = acquire_call(req, "p:", "");
  ASSERT_EQ(a.size(), 1u + 1 + 13 + 7);
  EXPECT_EQ(a[0], "1");                 // numkeys
  EXPECT_EQ(a[1], "p:{/a}");            // the bucket, tagged with its own name
  EXPECT_EQ(as_double(a[2]), 1.5);      // ARGV[1] permits
  EXPECT_EQ(a[3], "250000");            // ARGV[2] timeout_us
  EXPECT_EQ(a[4], "0");                 // ARGV[3] pay_now
  EXPECT_EQ(a[5], "");                  // ARGV[4] now: Redis TIME
  EXPECT_EQ(a[6], "1");                 // ARGV[5] has bucket
  EXPECT_EQ(a[7], "0");                 // ARGV[6] no parent
  EXPECT_EQ(a[8], "0");                 // ARGV[7] no quotas
  EXPECT_EQ(a[9], "0");                 // ARGV[8] no share
  EXPECT_EQ(a[10], "0");                // ARGV[9] not adaptive
  EXPECT_EQ(as_double(a[11]), 1);       // ARGV[10] the parent's permits (none here)
  EXPECT_EQ(as_double(a[12]), 0);       // ARGV[11] no reserve: no classes
  EXPECT_EQ(as_double(a[13]), 0);       // ARGV[12] nor in the parent
  EXPECT_EQ(a[14], "0");                // ARGV[13] no meter
  EXPECT_EQ(as_double(a[15]), 250'000);  // interval_us
  EXPECT_EQ(as_double(a[16]), 4);        // max_permits
  EXPECT_EQ(as_double(a[17]), 250'000);  // cool_down_us
  EXPECT_EQ(a[18], "0");                 // not warm
  EXPECT_EQ(as_double(a[19]), 0);        // threshold
  EXPECT_EQ(as_double(a[20]), 0);        // cold interval
  EXPECT_EQ(as_double(a[21]), 0);        // slope
}

TEST(RedisCodec, AcquireCallOfEverything) {
  BucketParams p = warming(2, 3'000'000);
  p.mode = limiter::Mode::pay_later;
  AcquireRequest req{{"c:5:10.0.0.1", p}, BucketRef{"channel:X", rate(8)}, "X", 1.0, 0};
  req.quotas.push_back({"q:1:10.0.0.1", {1'000'000, 6, limiter::WindowAlgorithm::fixed}, false});
  req.quotas.push_back({"q:2:", {3'000'000, 12, limiter::WindowAlgorithm::sliding}, true});
  req.share = ShareRef{"s:5:10.0.0.1", 0};  // at least 1 is sent
  req.parent_permits = 3;
  req.reserve_share = 0.25;
  req.parent_reserve_share = 0.5;
  const Args a = acquire_call(req, "t:", "1700000000000000");
  ASSERT_EQ(a.size(), 1u + 5 + 13 + 14 + 6);
  EXPECT_EQ(a[0], "5");
  EXPECT_EQ(a[1], "t:{X}c:5:10.0.0.1");
  EXPECT_EQ(a[2], "t:{X}channel:X");
  EXPECT_EQ(a[3], "t:{X}q:1:10.0.0.1");
  EXPECT_EQ(a[4], "t:{X}q:2:");
  EXPECT_EQ(a[5], "t:{X}s:5:10.0.0.1");
  EXPECT_EQ(a[8], "1");                  // pay_later
  EXPECT_EQ(a[9], "1700000000000000");   // now override
  EXPECT_EQ(a[10], "1");
  EXPECT_EQ(a[11], "1");                 // parent
  EXPECT_EQ(a[12], "2");                 // quotas
  EXPECT_EQ(a[13], "1");                 // max held
  EXPECT_EQ(a[14], "0");                 // not adaptive
  EXPECT_EQ(as_double(a[15]), 3);        // channelCost
  EXPECT_EQ(as_double(a[16]), 0.25);     // the share kept for classes above, in the bucket
  EXPECT_EQ(as_double(a[17]), 0.5);      // ... and in the channel's
  const limiter::Shape w = limiter::shape_of(p);
  EXPECT_EQ(as_double(a[19]), w.interval_us);
  EXPECT_EQ(as_double(a[20]), w.max_permits);  // %.17g: the same double back
  EXPECT_EQ(as_double(a[21]), w.cool_down_us);
  EXPECT_EQ(a[22], "1");
  EXPECT_EQ(as_double(a[23]), w.threshold);
  EXPECT_EQ(as_double(a[24]), w.cold_interval_us);
  EXPECT_EQ(as_double(a[25]), w.slope);
  EXPECT_EQ(as_double(a[26]), 125'000);  // the channel's interval
  EXPECT_EQ(as_double(a[27]), 8);
  EXPECT_EQ(a[29], "0");
  EXPECT_EQ(a[33], "1000000");  // quota 1: period, limit, fixed
  EXPECT_EQ(a[34], "6");
  EXPECT_EQ(a[35], "0");
  EXPECT_EQ(a[36], "3000000");  // quota 2: sliding
  EXPECT_EQ(a[37], "12");
  EXPECT_EQ(a[38], "1");
}

TEST(RedisCodec, AcquireCallOfQuotasOnly) {
  AcquireRequest req{{"/q", rate(1)}, {}, "/q", 1.0, 0};
  req.use_bucket = false;
  req.quotas.push_back({"q:1:a", {60'000'000, 5, limiter::WindowAlgorithm::fixed}, false});
  const Args a = acquire_call(req, "t:", "");
  ASSERT_EQ(a.size(), 1u + 1 + 13 + 3);
  EXPECT_EQ(a[0], "1");
  EXPECT_EQ(a[1], "t:{/q}q:1:a");
  EXPECT_EQ(a[6], "0");  // no bucket: no shape sent
  EXPECT_EQ(a[8], "1");
  EXPECT_EQ(a[15], "60000000");
}

// An adaptive bucket's call names its adapted-rate hash right after the bucket and sends
// its configured rate, burst and the request's caller after its shape; the reply ends with the
// rate and the pause.
TEST(RedisCodec, AcquireCallOfAnAdaptiveBucket) {
  AcquireRequest req{{"/a", rate(4)}, {}, {}, 1.0, 250'000};
  req.adaptive = limiter::Adaptive::shadow;
  req.caller = 4503599627370497;  // 2^52 + 1: sent whole
  Args a = acquire_call(req, "p:", "");
  ASSERT_EQ(a.size(), 1u + 2 + 13 + 7 + 13);
  EXPECT_EQ(a[0], "2");
  EXPECT_EQ(a[1], "p:{/a}");
  EXPECT_EQ(a[2], "p:{/a}r:/a");
  EXPECT_EQ(a[11], "2");                // shadow
  EXPECT_EQ(as_double(a[23]), 4);       // the configured rate
  EXPECT_EQ(a[24], "");                 // no explicit burst
  EXPECT_EQ(a[25], "4503599627370497");  // the caller
  EXPECT_EQ(as_double(a[26]), 0);         // no admissions to report
  EXPECT_EQ(a[27], "0");                  // a new arrival
  EXPECT_EQ(as_double(a[28]), 0);         // none heard in an earlier second
  for (int i = 29; i < 34; ++i) EXPECT_EQ(a[i], "") << i;  // no advertised allowance to report
  EXPECT_EQ(a[34], "0");                                    // no pair of where the windows start
  EXPECT_EQ(a[35], "0");
  req.adaptive = limiter::Adaptive::on;
  req.bucket.params.burst = 6;
  req.admitted = 3;
  req.admitted_before = 1;
  req.again = true;
  a = acquire_call(req, "p:", "");
  EXPECT_EQ(a[11], "1");
  EXPECT_EQ(as_double(a[26]), 3);
  EXPECT_EQ(a[27], "1");
  EXPECT_EQ(as_double(a[28]), 1);
  EXPECT_EQ(as_double(a[24]), 6);
  EXPECT_FALSE(lean_request(req));  // adaptive buckets take the general script
  req.advert = limiter::AdvertReport{41, 7.5, 930'000, 20, 1'000'000};
  req.window_pair = {120'000, 45'000};
  a = acquire_call(req, "p:", "");
  ASSERT_EQ(a.size(), 1u + 2 + 13 + 7 + 13);
  EXPECT_EQ(a[34], "120000");  // the pair, relative to the gateway's now
  EXPECT_EQ(a[35], "45000");
  EXPECT_EQ(as_double(a[29]), 41);   // the grant count the answer is as of
  EXPECT_EQ(as_double(a[30]), 7.5);  // left
  EXPECT_EQ(a[31], "930000");        // reset in
  EXPECT_EQ(as_double(a[32]), 20);   // limit
  EXPECT_EQ(a[33], "1000000");       // window

  std::vector<std::string> reply{"1", "0", "0", "3", "4", "0", "0", "5", "0", "1", "0", "0", "0", "2.5", "120000", "700000",
                                 "42", "310000", "20000"};
  const auto d = parse_acquire_reply(reply, 0, true);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->effective_rate, 2.5);
  EXPECT_EQ(d->paused_us, 120'000);
  EXPECT_EQ(d->last_cut_us, 700'000);
  EXPECT_EQ(d->grant_seq, 42);
  EXPECT_EQ(d->windows.start, 310'000);  // the fleet's arc, relative to the store's now
  EXPECT_EQ(d->windows.width, 20'000);
  EXPECT_FALSE(parse_acquire_reply(reply, 0, false).has_value());  // six items too many
}

TEST(RedisCodec, AdaptCallAndReply) {
  AcquireRequest req{{"/a", rate(50)}, {}, "IBE", 1.0, 0};
  req.adaptive = limiter::Adaptive::on;
  req.caller = 77;
  req.admitted = 4;
  req.admitted_before = 1;
  req.window_pair = {420'000, 35'000};
  const Args a = adapt_call(req, "p:", 3'000'000, 12'345, "");
  ASSERT_EQ(a.size(), 14u);
  EXPECT_EQ(a[0], "2");
  EXPECT_EQ(a[1], "p:{IBE}/a");
  EXPECT_EQ(a[2], "p:{IBE}r:/a");
  EXPECT_EQ(a[4], "1");
  EXPECT_EQ(as_double(a[5]), 50);
  EXPECT_EQ(a[7], "3000000");
  EXPECT_EQ(a[8], "12345");
  EXPECT_EQ(a[9], "77");
  EXPECT_EQ(as_double(a[10]), 4);  // the admissions this gateway heard, told with the throttle
  EXPECT_EQ(as_double(a[11]), 1);  // ...of which one in an earlier second
  EXPECT_EQ(a[12], "420000");      // the pair it learned of where the supplier's windows start
  EXPECT_EQ(a[13], "35000");
  const auto o = parse_adapt_reply(
      {"1", "50", "35", "1", "1700000003012345", "3012345", "35", "0", "1700000000000000", "250000", "20000"}, 1'000'000);
  ASSERT_TRUE(o.has_value());
  EXPECT_TRUE(o->ok && o->result.cut && o->result.paused);
  EXPECT_FALSE(o->result.unconfirmed);
  EXPECT_EQ(o->last_cut_us, 1'700'000'000'000'000);  // on the store's clock
  EXPECT_EQ(o->windows.start, 250'000);  // the fleet's arc, relative to the store's now
  EXPECT_EQ(o->windows.width, 20'000);
  const auto u = parse_adapt_reply({"0", "0", "0", "0", "0", "0", "50", "1", "0", "0", "0"}, 0);
  ASSERT_TRUE(u.has_value());
  EXPECT_TRUE(u->result.unconfirmed);
  EXPECT_EQ(u->windows.width, 0);
  EXPECT_EQ(o->result.to, 35);
  EXPECT_EQ(o->pause_left_us, 3'012'345);
  EXPECT_EQ(o->result.pause_until, 4'012'345);  // on the caller's clock
  EXPECT_FALSE(parse_adapt_reply({"1", "x"}, 0).has_value());
  EXPECT_FALSE(parse_adapt_reply({"1", "50", "35", "1", "1700000003012345", "3012345", "35", "0"}, 0).has_value());
  EXPECT_FALSE(parse_adapt_reply({"0", "0", "0", "0", "0", "0", "50", "1", "0", "x", "0"}, 0).has_value());
}

TEST(RedisCodec, ParsesAGrantWithParentQuotasAndShare) {
  const Args items{"1", "400000", "0", "0.5", "8", "1", "1700000000400000",
                   "1700000000200000", "200000", "1", "1700000000400000", "125000", "0.25",
                   "1", "3", "3", "0", "600000",
                   "1", "2.5", "9.5", "0", "2000000"};
  const auto d = parse_acquire_reply(items, 2);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->decision.granted);
  EXPECT_EQ(d->decision.wait_us, 400'000);
  EXPECT_EQ(d->decision.remaining, 0.5);
  EXPECT_EQ(d->max_permits, 8);
  EXPECT_EQ(d->bound, Bound::parent);
  EXPECT_TRUE(d->parent_bound);
  EXPECT_EQ(d->reservation.share_release, 1'700'000'000'400'000);
  EXPECT_EQ(d->reservation.release, 1'700'000'000'200'000);
  EXPECT_EQ(d->reservation.cost, 200'000);
  EXPECT_EQ(d->reservation.spent, 1);
  EXPECT_EQ(d->reservation.parent_release, 1'700'000'000'400'000);
  EXPECT_EQ(d->reservation.parent_cost, 125'000);
  EXPECT_EQ(d->reservation.parent_spent, 0.25);
  EXPECT_EQ(d->decision.next_free, d->reservation.release);
  ASSERT_EQ(d->quotas.size(), 2u);
  EXPECT_TRUE(d->quotas[0].admitted);
  EXPECT_EQ(d->quotas[0].used, 3);
  EXPECT_EQ(d->quotas[0].reset_us, 600'000);
  EXPECT_EQ(d->quotas[1].used, 2.5);
  EXPECT_EQ(d->quotas[1].remaining, 9.5);
  EXPECT_EQ(d->quotas[1].reset_us, 2'000'000);
}

TEST(RedisCodec, ParsesARejectionBoundByAQuotaThatNeverFits) {
  const Args items{"0", "0", kNever, "2", "5", "3", "1", "0", "0", "0", "0", "0", "0",
                   "1", "0", "6", "0", "100",
                   "0", "7", "0", kNever, "200"};
  const auto d = parse_acquire_reply(items, 2);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->decision.granted);
  EXPECT_EQ(d->decision.retry_after_us, limiter::kInfinite);  // 2^53 is "never"
  EXPECT_EQ(d->bound, Bound::quota);
  EXPECT_EQ(d->bound_quota, 1u);
  EXPECT_EQ(d->reservation.share_release, 0);
  EXPECT_EQ(d->quotas[1].retry_after_us, limiter::kInfinite);
}

TEST(RedisCodec, RejectsMalformedAcquireReplies) {
  const Args good{"1", "0", "0", "4", "5", "0", "0", "100", "0", "1", "0", "0", "0"};
  ASSERT_TRUE(parse_acquire_reply(good, 0).has_value());
  EXPECT_FALSE(parse_acquire_reply(good, 1).has_value());  // a quota's five items missing
  EXPECT_FALSE(parse_acquire_reply(Args(good.begin(), good.end() - 1), 0).has_value());
  EXPECT_FALSE(parse_acquire_reply({}, 0).has_value());
  for (std::size_t i : {1u, 3u, 4u, 5u, 9u}) {
    Args bad = good;
    bad[i] = std::string("x");
    EXPECT_FALSE(parse_acquire_reply(bad, 0).has_value()) << "item " << i;
  }
  Args bound = good;
  bound[5] = std::string("4");  // no such check
  EXPECT_FALSE(parse_acquire_reply(bound, 0).has_value());
  bound[5] = std::string("-1");
  EXPECT_FALSE(parse_acquire_reply(bound, 0).has_value());
}

TEST(RedisCodec, RefundCallAndReply) {
  AcquireRequest req{{"/a", rate(5)}, BucketRef{"channel:X", rate(8)}, "X", 1.0, 0};
  req.share = ShareRef{"s:5:k", 1};
  const Reservation res{1'700'000'000'200'000, 200'000, 0.5, 1'700'000'000'125'000, 125'000, 1,
                        1'700'000'000'200'000};
  const Args a = refund_call(req, "t:", res, "17", 3);
  ASSERT_EQ(a.size(), 1u + 5 + 3 + 6 + 1);
  EXPECT_EQ(a[0], "5");
  EXPECT_EQ(a[1], "t:{X}/a");
  EXPECT_EQ(a[2], "t:{X}channel:X");
  EXPECT_EQ(a[3], "t:{X}a:/a");
  EXPECT_EQ(a[4], "t:{X}a:channel:X");
  EXPECT_EQ(a[5], "t:{X}s:5:k");
  EXPECT_EQ(a[6], "2");   // buckets
  EXPECT_EQ(a[7], "17");  // now override
  EXPECT_EQ(a[8], "3");   // abandoned slots kept per bucket
  EXPECT_EQ(as_double(a[9]), 1'700'000'000'200'000.0);
  EXPECT_EQ(as_double(a[10]), 200'000);
  EXPECT_EQ(as_double(a[11]), 0.5);
  EXPECT_EQ(as_double(a[12]), 1'700'000'000'125'000.0);
  EXPECT_EQ(as_double(a[13]), 125'000);
  EXPECT_EQ(as_double(a[14]), 1);
  EXPECT_EQ(as_double(a[15]), 1'700'000'000'200'000.0);  // the share member

  // No share recorded: no share key, no member.
  const Args b = refund_call(req, "t:", {1, 2, 3, 4, 5, 6, 0});
  EXPECT_EQ(b[0], "4");
  EXPECT_EQ(b.size(), 1u + 4 + 3 + 6);
  EXPECT_EQ(b[6], "");  // Redis TIME

  const auto r = parse_refund_reply(req, {"2", "0", "0", "1"});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bucket, 2u);
  EXPECT_EQ(r->parent, 0u);
  EXPECT_TRUE(r->remembered);
  EXPECT_EQ(r->reservations(), 2u);
  EXPECT_FALSE(parse_refund_reply(req, {"1", "0"}).has_value());
  EXPECT_FALSE(parse_refund_reply(req, {"x", "0", "0", "0"}).has_value());
}

// A meter in place of the bucket: its hash ends KEYS, its rates, sizes, pre-colour and wait flag
// end ARGV; the reply ends with its colour and counts.
TEST(RedisCodec, AcquireCallOfAMeter) {
  AcquireRequest req{{"/m", rate(1)}, {}, "/m", 2.0, 300'000};
  req.use_bucket = false;
  req.meter = MeterRef{"/m", true, {}, {10, 5, 20, 8}, limiter::Color::yellow, true};
  req.quotas.push_back({"q:1:", {60'000'000, 5, limiter::WindowAlgorithm::fixed}, true});
  const Args a = acquire_call(req, "t:", "");
  ASSERT_EQ(a.size(), 1u + 2 + 13 + 3 + 6);
  EXPECT_EQ(a[0], "2");
  EXPECT_EQ(a[1], "t:{/m}q:1:");
  EXPECT_EQ(a[2], "t:{/m}m:/m");  // the meter's own name: never a bucket's state
  EXPECT_EQ(as_double(a[3]), 2);  // its cost
  EXPECT_EQ(a[7], "0");           // no bucket
  EXPECT_EQ(a[15], "2");          // ARGV[13]: trTCM
  EXPECT_EQ(a[19], "10");         // cir, cbs, pir, pbs after the quota's three
  EXPECT_EQ(a[20], "5");
  EXPECT_EQ(a[21], "20");
  EXPECT_EQ(a[22], "8");
  EXPECT_EQ(a[23], "1");  // pre-colour yellow
  EXPECT_EQ(a[24], "1");  // wait for a green
  EXPECT_FALSE(lean_request(req));
  std::vector<std::string> reply{"1", "0", "0", "4", "5", "0", "0", "0", "0", "0", "0", "0", "0",
                                 "1", "1", "4", "0", "0", "1", "-1.5", "3.25"};
  const auto d = parse_acquire_reply(reply, 1, false, true);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->color, limiter::Color::yellow);
  EXPECT_EQ(d->meter_committed, -1.5);
  EXPECT_EQ(d->meter_excess, 3.25);
  EXPECT_FALSE(parse_acquire_reply(reply, 1, false, false));  // the length says what it carries
}

// ---- the lean script ----

TEST(RedisCodec, LeanCoversOneBucketAndNothingElse) {
  AcquireRequest req{{"/a", rate(5)}, {}, {}, 1.0, 0};
  EXPECT_TRUE(lean_request(req));
  AcquireRequest keyed = req;
  keyed.per_client_bucket = true;  // another key, the same script
  EXPECT_TRUE(lean_request(keyed));
  AcquireRequest costly = req;
  costly.permits = 5;  // a cost is a number of permits the lean script takes as it is
  EXPECT_TRUE(lean_request(costly));
  AcquireRequest classed = req;
  classed.reserve_share = 0.3;  // a lower priority class takes the general script
  EXPECT_FALSE(lean_request(classed));
  AcquireRequest parent = req;
  parent.parent = BucketRef{"channel:X", rate(8)};
  EXPECT_FALSE(lean_request(parent));
  AcquireRequest quota = req;
  quota.quotas.push_back({"q:1:", {1'000'000, 6, limiter::WindowAlgorithm::fixed}, true});
  EXPECT_FALSE(lean_request(quota));
  AcquireRequest share = req;
  share.share = ShareRef{"s:1:k", 1};
  EXPECT_FALSE(lean_request(share));
  AcquireRequest none = req;
  none.use_bucket = false;
  EXPECT_FALSE(lean_request(none));
}

TEST(RedisCodec, LeanCallSendsTheShapeCompactly) {
  BucketParams p = rate(3);
  p.burst = 2;
  AcquireRequest req{{"/b", p}, {}, "X", 1.0, 1'500'000};
  const Args a = lean_acquire_call(req, "t:", "");
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(a[0], "1");
  EXPECT_EQ(a[1], "t:{X}/b");
  EXPECT_EQ(a[2], "");         // ARGV[1] now: Redis TIME
  EXPECT_EQ(a[3], "0");        // ARGV[2] flags: pay_now, no warm-up
  EXPECT_EQ(a[4], "333333.33333333331");  // ARGV[3] interval, as %.17g: the text the scripts store
  EXPECT_EQ(as_double(a[4]), 1e6 / 3);
  EXPECT_EQ(a[5], "2");        // ARGV[4] max_permits
  EXPECT_EQ(a[6], "1");        // the decision: permits
  EXPECT_EQ(a[7], "1500000");  // and timeout_us

  req.permits = 0.1;  // permits: the shortest text of the same double
  req.bucket.params.mode = limiter::Mode::pay_later;
  const Args b = lean_acquire_call(req, "t:", "1700000000000000");
  EXPECT_EQ(b[2], "1700000000000000");
  EXPECT_EQ(b[3], "1");  // pay_later
  EXPECT_EQ(b[6], "0.1");
}

TEST(RedisCodec, LeanCallSendsTheWarmUpNumbersOnlyWhenWarm) {
  AcquireRequest req{{"/w", warming(2, 3'000'000)}, {}, {}, 2.5, 0};
  const Args a = lean_acquire_call(req, "t:", "");
  ASSERT_EQ(a.size(), 11u);
  EXPECT_EQ(a[1], "t:{/w}");
  EXPECT_EQ(a[3], "2");  // flags: warm-up, pay_now
  const limiter::Shape s = limiter::shape_of(req.bucket.params);
  EXPECT_EQ(as_double(a[4]), s.interval_us);
  EXPECT_EQ(as_double(a[5]), s.max_permits);
  EXPECT_EQ(as_double(a[6]), s.cool_down_us);
  EXPECT_EQ(as_double(a[7]), s.threshold);
  EXPECT_EQ(as_double(a[8]), s.slope);
  EXPECT_EQ(as_double(a[9]), 2.5);  // the decision
  EXPECT_EQ(a[10], "0");
}

TEST(RedisCodec, ABatchSendsTheShapeOnceAndEachDecisionInOrder) {
  AcquireRequest a{{"/b", rate(4)}, {}, "X", 1.0, 0};
  AcquireRequest b = a, c = a;
  b.timeout_us = 250'000;
  c.permits = 2;
  const Args args = lean_batch_call({&a, &b, &c}, "t:", "");
  ASSERT_EQ(args.size(), 6u + 3 * 2);
  EXPECT_EQ(args[1], "t:{X}/b");
  EXPECT_EQ(args[6], "1");
  EXPECT_EQ(args[7], "0");
  EXPECT_EQ(args[8], "1");
  EXPECT_EQ(args[9], "250000");
  EXPECT_EQ(args[10], "2");
  EXPECT_EQ(args[11], "0");
}

TEST(RedisCodec, BatchableMeansOneKeyOneShapeOneMode) {
  const AcquireRequest a{{"/b", rate(4)}, {}, "X", 1.0, 0};
  AcquireRequest b = a;
  b.permits = 3;
  b.timeout_us = 9;
  EXPECT_TRUE(batchable(a, b));  // what each decision asks may differ
  AcquireRequest other_rate = a;
  other_rate.bucket.params.rate = 5;  // an edit between two requests
  EXPECT_FALSE(batchable(a, other_rate));
  AcquireRequest other_mode = a;
  other_mode.bucket.params.mode = limiter::Mode::pay_later;
  EXPECT_FALSE(batchable(a, other_mode));
  AcquireRequest other_tag = a;
  other_tag.hash_tag = "Y";
  EXPECT_FALSE(batchable(a, other_tag));
  AcquireRequest other_name = a;
  other_name.bucket.name = "/c";
  EXPECT_FALSE(batchable(a, other_name));
}

TEST(RedisCodec, ParsesABatchReplyInOrder) {
  const AcquireRequest a{{"/b", rate(4)}, {}, "X", 1.0, 1'000'000};
  const std::vector<const AcquireRequest*> reqs{&a, &a, &a};
  const auto d = parse_lean_batch_reply(reqs, {"1", "0", "1700000000000000", "0", "3", "1",  //
                                               "0", "250000", "0.5",                        //
                                               "1", "250000", "1700000000250000", "250000", "0", "1"});
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->size(), 3u);
  EXPECT_TRUE((*d)[0].decision.granted);
  EXPECT_EQ((*d)[0].decision.remaining, 3);
  EXPECT_FALSE((*d)[1].decision.granted);
  EXPECT_EQ((*d)[1].decision.retry_after_us, 250'000);
  EXPECT_EQ((*d)[1].decision.remaining, 0.5);
  EXPECT_TRUE((*d)[2].decision.granted);
  EXPECT_EQ((*d)[2].decision.wait_us, 250'000);
  EXPECT_EQ((*d)[2].reservation.release, 1'700'000'000'250'000);
  EXPECT_EQ((*d)[2].max_permits, 4);
  // Fewer answers than requests, or more: malformed.
  EXPECT_FALSE(parse_lean_batch_reply(reqs, {"1", "0", "1700000000000000", "0", "3", "1"}).has_value());
  EXPECT_FALSE(parse_lean_batch_reply({&a}, {"0", "5", "1", "0", "5", "1"}).has_value());
}

TEST(RedisCodec, ParsesALeanGrant) {
  BucketParams p = rate(5);
  p.burst = 3;
  const AcquireRequest req{{"/a", p}, {}, {}, 1.0, 1'000'000};
  const auto d = parse_lean_acquire_reply(req, {"1", "200000", "1700000000200000", "200000", "0.30000000000000004", "0.7"});
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->decision.granted);
  EXPECT_EQ(d->decision.wait_us, 200'000);
  EXPECT_EQ(d->decision.retry_after_us, 0);
  EXPECT_EQ(d->decision.remaining, 0.1 + 0.2);  // exactly
  EXPECT_EQ(d->decision.next_free, 1'700'000'000'200'000);
  EXPECT_EQ(d->decision.cost_us, 200'000);
  EXPECT_EQ(d->decision.spent, 0.7);
  EXPECT_EQ(d->max_permits, 3);  // the request's own bucket: not sent back
  EXPECT_EQ(d->bound, Bound::bucket);
  EXPECT_FALSE(d->parent_bound);
  EXPECT_EQ(d->reservation.release, 1'700'000'000'200'000);
  EXPECT_EQ(d->reservation.cost, 200'000);
  EXPECT_EQ(d->reservation.spent, 0.7);
  EXPECT_EQ(d->reservation.parent_release, 0);
  EXPECT_EQ(d->reservation.share_release, 0);
  EXPECT_TRUE(d->quotas.empty());

  // A release that saturated: "never".
  const auto never = parse_lean_acquire_reply(req, {"1", "0", kNever, kNever, "0", "0"});
  ASSERT_TRUE(never.has_value());
  EXPECT_EQ(never->reservation.release, limiter::kInfinite);
  EXPECT_EQ(never->reservation.cost, limiter::kInfinite);
}

TEST(RedisCodec, ParsesALeanRejection) {
  const AcquireRequest req{{"/a", warming(2, 3'000'000)}, {}, {}, 1.0, 0};
  const auto d = parse_lean_acquire_reply(req, {"0", "123456", "0.99999999999999989"});
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->decision.granted);
  EXPECT_EQ(d->decision.wait_us, 0);
  EXPECT_EQ(d->decision.retry_after_us, 123'456);
  EXPECT_EQ(d->decision.remaining, 0.99999999999999989);
  EXPECT_EQ(d->max_permits, limiter::shape_of(req.bucket.params).max_permits);
  EXPECT_EQ(d->reservation.release, 0);  // nothing reserved
  EXPECT_EQ(d->reservation.cost, 0);
  EXPECT_EQ(d->reservation.spent, 0);

  const auto never = parse_lean_acquire_reply(req, {"0", kNever, "0"});
  ASSERT_TRUE(never.has_value());
  EXPECT_EQ(never->decision.retry_after_us, limiter::kInfinite);
}

TEST(RedisCodec, RejectsMalformedLeanReplies) {
  const AcquireRequest req{{"/a", rate(5)}, {}, {}, 1.0, 0};
  const Args grant{"1", "0", "100", "0", "4", "1"};
  const Args reject{"0", "5", "0.5"};
  ASSERT_TRUE(parse_lean_acquire_reply(req, grant).has_value());
  ASSERT_TRUE(parse_lean_acquire_reply(req, reject).has_value());
  EXPECT_FALSE(parse_lean_acquire_reply(req, {}).has_value());
  EXPECT_FALSE(parse_lean_acquire_reply(req, {"1", "0", "100", "0", "4"}).has_value());  // short grant
  EXPECT_FALSE(parse_lean_acquire_reply(req, {"0", "5"}).has_value());                   // short rejection
  EXPECT_FALSE(parse_lean_acquire_reply(req, {"1", "5", "0.5"}).has_value());            // a grant's flag, a rejection's length
  EXPECT_FALSE(parse_lean_acquire_reply(req, {"0", "0", "100", "0", "4", "1"}).has_value());
  EXPECT_FALSE(parse_lean_acquire_reply(req, {"2", "5", "0.5"}).has_value());            // no such outcome
  for (std::size_t i = 1; i < grant.size(); ++i) {
    for (const char* junk : {"", "x", "1x", " 1", "nan"}) {
      Args bad = grant;
      bad[i] = std::string(junk);
      EXPECT_FALSE(parse_lean_acquire_reply(req, bad).has_value()) << "item " << i << " '" << junk << "'";
    }
  }
  for (std::size_t i = 1; i < reject.size(); ++i) {
    Args bad = reject;
    bad[i] = std::string("1.5.2");
    EXPECT_FALSE(parse_lean_acquire_reply(req, bad).has_value()) << "item " << i;
  }
}

TEST(RedisCodec, ScriptsAreDistinct) {
  EXPECT_NE(std::string(acquire_script()), std::string(lean_acquire_script()));
  EXPECT_NE(std::string(acquire_script()).find("HMGET"), std::string::npos);
  EXPECT_NE(std::string(lean_acquire_script()).find("HMGET"), std::string::npos);
  EXPECT_NE(std::string(refund_script()).find("HINCRBY"), std::string::npos);
}

// The connection sends commands it formats itself: byte for byte what hiredis would send.
TEST(RedisCodec, CommandsAreFormattedAsHiredisFormatsThem) {
  const AcquireRequest req{{"/b", rate(3)}, {}, "X", 0.5, 1'500'000};
  std::vector<Args> commands{{"PING"},
                             {"EVALSHA", std::string(40, 'a')},
                             {"SET", std::string("k\0ey", 4), "", std::string(300, 'v')}};
  Args lean{"EVALSHA", "sha"};
  for (auto& a : lean_acquire_call(req, "t:", "")) lean.push_back(a);
  commands.push_back(lean);
  for (const Args& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    char* expected = nullptr;
    const int n = redisFormatCommandArgv(&expected, static_cast<int>(args.size()), argv.data(), lens.data());
    ASSERT_GT(n, 0);
    EXPECT_EQ(resp_command(args), std::string(expected, static_cast<std::size_t>(n))) << args[0];
    redisFreeCommand(expected);
  }
}


// The connection's path writes a batch's whole command in one pass: the same bytes as the
// argument list formatted, for plain and warm-up shapes, fractions of permits, refunds, and a shape
// that changes between calls on one thread (the shape's text is kept per thread).
TEST(RedisCodec, ABatchCommandIsItsArgumentsInWireFormat) {
  AcquireRequest a{{"/b", rate(3)}, {}, "X", 1.0, 0};
  AcquireRequest b = a, c = a;
  b.permits = 0.1;
  b.timeout_us = 1'500'000;
  c.permits = 1e300;
  AcquireRequest w{{"/w", warming(7, 2'000'000)}, {}, "", 2.5, 77};
  AcquireRequest edited = a;
  edited.bucket.params.rate = 3.000000001;
  const Reservation held{1'700'000'000'333'333, 333'333, 0.30000000000000004, 0, 0, 0};
  const std::vector<std::vector<LeanEntry>> batches{
      {{&a}, {&b}, {&c}}, {{&w}}, {{&edited}}, {{&a}}, {{&w}, {&w}},
      {{&a}, {&a, &held}, {&b}}, {{&w, &held}}, {{&a, &held}, {&a, &held}}};
  for (const auto& batch : batches) {
    const AcquireRequest& first = *batch.front().req;
    const std::string key =
        redis_key("t:", first.hash_tag.empty() ? first.bucket.name : first.hash_tag, first.bucket.name);
    Args args{"EVALSHA", std::string(40, 'f')};
    for (auto& x : lean_batch_call(batch, "t:", "")) args.push_back(x);
    std::string wire = "left alone:";
    lean_batch_command(wire, std::string(40, 'f'), key, "t:", batch);
    EXPECT_EQ(wire, "left alone:" + resp_command(args)) << first.bucket.name << " " << batch.size();
  }
}

// A refund joins its bucket's batch in its place: the abandoned set as the second key, the bound,
// then 'r' with the reservation where it arrived. Without refunds neither is sent.
TEST(RedisCodec, ABatchWithARefundSendsItsSetAndTheBound) {
  const AcquireRequest a{{"/b", rate(4)}, {}, "X", 1.0, 250'000};
  const Reservation held{1'700'000'000'250'000, 250'000, 0.5, 0, 0, 0};
  const Args args = lean_batch_call({{&a}, {&a, &held}, {&a}}, "t:", "", 9);
  ASSERT_EQ(args.size(), 8u + 2 + 4 + 2);
  EXPECT_EQ(args[0], "2");
  EXPECT_EQ(args[1], "t:{X}/b");
  EXPECT_EQ(args[2], abandoned_key("t:", "X", "/b"));
  EXPECT_EQ(args[3], "");
  EXPECT_EQ(args[4], "4");  // pay now, no warm-up, with refunds
  EXPECT_EQ(args[7], "9");  // the bound
  EXPECT_EQ(args[8], "1");
  EXPECT_EQ(args[9], "250000");
  EXPECT_EQ(args[10], "r");
  EXPECT_EQ(args[11], "1700000000250000");
  EXPECT_EQ(args[12], "250000");
  EXPECT_EQ(as_double(args[13]), 0.5);
  EXPECT_EQ(args[14], "1");
  const Args plain = lean_batch_call(std::vector<LeanEntry>{{&a}, {&a}}, "t:", "");
  EXPECT_EQ(plain[0], "1");
  EXPECT_EQ(plain[3], "0");
  EXPECT_EQ(plain.size(), 6u + 4);
}

TEST(RedisCodec, AppendedKeyIsTheKey) {
  std::string out = "something longer than the key, to be replaced";
  for (auto [tag, name] : std::vector<std::pair<std::string_view, std::string_view>>{
           {"", "/a"}, {"/a", "/a"}, {"X", "/b"}, {"channel:IBE", "c:7:client"}}) {
    append_redis_key(out, "t:", tag, name);
    EXPECT_EQ(out, redis_key("t:", tag, name));
  }
}

// After NOSCRIPT the same call goes again as EVAL with the body: the arguments stay byte for byte.
TEST(RedisCodec, EvalshaBecomesEvalWithTheSameArguments) {
  const Args sha_call{"EVALSHA", std::string(40, 'a'), "1", "t:{/b}", "", "0", "250000", "3", "1", "0"};
  Args eval_call = sha_call;
  eval_call[0] = "EVAL";
  eval_call[1] = "return 1\r\n-- a body with CRLF in it";
  EXPECT_EQ(evalsha_as_eval(resp_command(sha_call), eval_call[1]), resp_command(eval_call));
  EXPECT_FALSE(evalsha_as_eval(resp_command({"PING"}), "x").has_value());
  EXPECT_FALSE(evalsha_as_eval(resp_command({"EVAL", "x", "0"}), "x").has_value());
  EXPECT_FALSE(evalsha_as_eval("*2\r\n$7\r\nEVALSHA\r\n$99\r\nab\r\n", "x").has_value());  // cut short
}

// What hiredis hands over: whole numbers as integers, fractions and 2^53 as text; a refund's
// answer in its place.
TEST(RedisCodec, ParsesABatchReplyOfIntegersAndText) {
  const AcquireRequest a{{"/b", rate(4)}, {}, "X", 1.0, 1'000'000};
  const Reservation held{1'700'000'000'000'000, 0, 1, 0, 0, 0};
  const std::vector<LeanEntry> entries{{&a}, {&a, &held}, {&a}};
  auto i = [](long long v) { return ReplyItem{true, v, {}}; };
  auto t = [](std::string_view v) { return ReplyItem{false, 0, v}; };
  const std::vector<ReplyItem> items{i(1), i(0), i(1'700'000'000'000'000), i(0), t("0.30000000000000004"), i(1),
                                     i(2), i(3), i(1),
                                     i(0), t(kNever), t("0.5")};
  const auto d = parse_lean_batch_reply(entries, items.data(), items.size());
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE((*d)[0].decision.decision.granted);
  EXPECT_EQ((*d)[0].decision.reservation.release, 1'700'000'000'000'000);
  EXPECT_EQ((*d)[0].decision.decision.remaining, 0.30000000000000004);
  EXPECT_EQ((*d)[1].refund.bucket, 3u);
  EXPECT_TRUE((*d)[1].refund.remembered);
  EXPECT_FALSE((*d)[2].decision.decision.granted);
  EXPECT_EQ((*d)[2].decision.decision.retry_after_us, limiter::kInfinite);
  EXPECT_EQ((*d)[2].decision.decision.remaining, 0.5);
  // A tag other than the entry's, or a number that is not one: malformed.
  auto bad_at = [&](std::size_t k, ReplyItem v) {
    std::vector<ReplyItem> bad = items;
    bad[k] = v;
    return parse_lean_batch_reply(entries, bad.data(), bad.size()).has_value();
  };
  EXPECT_FALSE(bad_at(0, i(3)));
  EXPECT_FALSE(bad_at(0, i(2)));   // a refund's answer where a decision's belongs
  EXPECT_FALSE(bad_at(6, i(1)));   // and the other way round
  EXPECT_FALSE(bad_at(8, i(5)));   // remembered is 0 or 1
  EXPECT_FALSE(bad_at(7, t("3")));  // counts come as integers
  EXPECT_FALSE(bad_at(4, t("0.3x")));
  EXPECT_FALSE(parse_lean_batch_reply(entries, items.data(), items.size() - 1).has_value());
}

}  // namespace
}  // namespace tollgate::store

// The request's decision table, without sockets: every plan (bypass by the switch or by the rule,
// unmatched, bad client key, nothing to decide, decide) and every verdict (forward, hold, 429, 503,
// shadow, store failure under either policy, hold caps), with the store request and headers each gets.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "tollgate/proxy/request_policy.hpp"

namespace tollgate::proxy {
namespace {

using config::SwitchMode;

class Headers final : public HeaderSource {
 public:
  std::multimap<std::string, std::string, std::less<>> fields;
  std::optional<std::string_view> find(std::string_view name) const override {
    auto it = fields.find(name);
    if (it == fields.end()) return std::nullopt;
    return std::string_view(it->second);
  }
  std::string joined(std::string_view name) const override {
    std::string out;
    for (auto [it, end] = fields.equal_range(name); it != end; ++it) out += (out.empty() ? "" : ",") + it->second;
    return out;
  }
};

config::RawRow row(std::int64_t id, std::string url, double rate) {
  config::RawRow r;
  r.config_id = id;
  r.channel_type = "IBE";
  r.interface_url = std::move(url);
  r.rate_limit = rate;
  r.cache = 0.5;
  r.status = 1;
  return r;
}

config::RawQuota quota(std::int64_t id, std::string key_by, std::int64_t status = 1) {
  config::RawQuota q;
  q.quota_id = id;
  q.period_seconds = 60;
  q.limit_count = 20;
  q.key_by = std::move(key_by);
  q.status = status;
  return q;
}

std::shared_ptr<const config::Snapshot> snapshot(std::vector<config::RawRow> rows) {
  auto validated = config::validate_rows(rows);
  EXPECT_TRUE(validated.rejected.empty()) << validated.rejected.front().reason;
  return config::make_snapshot(std::move(validated), 1, "test");
}

struct RequestPolicy : ::testing::Test {
  TrustedProxies trusted;
  PolicySettings settings{100, 10, &trusted, MissingKey::anonymous};
  Headers headers;
  Metrics metrics;
  std::int64_t held = 0;  // requests waiting in the whole gateway
  std::shared_ptr<const config::Snapshot> snap = snapshot({row(1, "/search", 5)});
  std::shared_ptr<const RuleViews> views;  // of the snapshot the last plan used

  void plan(std::string_view path, Plan& out, SwitchMode global = SwitchMode::enforce, std::string_view peer = "10.0.0.7") {
    const RequestFacts facts{path, peer, headers, held};
    views = snap ? std::make_shared<const RuleViews>(snap, metrics) : nullptr;
    plan_request(facts, views.get(), global, settings, out);
  }
};

store::StoreDecision granted(std::int64_t wait_us, double remaining = 3) {
  store::StoreDecision sd;
  sd.decision.granted = true;
  sd.decision.wait_us = wait_us;
  sd.decision.remaining = remaining;
  sd.max_permits = 5;
  return sd;
}

store::StoreDecision refused(std::int64_t retry_after_us, store::Bound bound = store::Bound::bucket) {
  store::StoreDecision sd;
  sd.decision.granted = false;
  sd.decision.retry_after_us = retry_after_us;
  sd.bound = bound;
  sd.max_permits = 5;
  return sd;
}

store::StoreDecision failed(store::StoreStatus status) {
  store::StoreDecision sd;
  sd.status = status;
  sd.error = "connection refused";
  return sd;
}

// ---- plans ------------------------------------------------------------------------------------

TEST_F(RequestPolicy, SwitchOffBypassesWithoutLookingAtRules) {
  Plan p;
  plan("/api/search", p, SwitchMode::off);
  EXPECT_EQ(p.step, Step::bypass);
  EXPECT_EQ(p.outcome, Outcome::bypassed);
  EXPECT_EQ(p.rule, nullptr);  // counted globally only
}

TEST_F(RequestPolicy, NoRuleIsUnmatched) {
  Plan p;
  plan("/api/book", p);
  EXPECT_EQ(p.step, Step::unmatched);
  EXPECT_EQ(p.outcome, Outcome::unmatched);
  EXPECT_EQ(p.rule, nullptr);
  Plan none;
  snap = nullptr;  // no rules loaded yet
  plan("/api/search", none);
  EXPECT_EQ(none.step, Step::unmatched);
}

TEST_F(RequestPolicy, ARuleSwitchedOffByItselfBypassesAndNamesTheRule) {
  auto r = row(1, "/search", 5);
  r.mode = "off";
  snap = snapshot({r});
  Plan p;
  plan("/api/search", p);
  EXPECT_EQ(p.step, Step::bypass);
  ASSERT_NE(p.rule, nullptr);  // counted on its bucket too
  EXPECT_EQ(p.rule->bucket, "/search");
  // The global shadow switch overrides a rule's own "off": it is decided (and not enforced).
  Plan s;
  plan("/api/search", s, SwitchMode::shadow);
  EXPECT_EQ(s.step, Step::decide);
  EXPECT_TRUE(s.shadow);
}

TEST_F(RequestPolicy, AMatchedRuleAsksTheStoreForOnePermitWithinItsWindow) {
  Plan p;
  plan("/api/search", p);
  ASSERT_EQ(p.step, Step::decide);
  EXPECT_FALSE(p.shadow);
  EXPECT_FALSE(p.capped);
  EXPECT_EQ(p.request.bucket.name, "/search");
  EXPECT_DOUBLE_EQ(p.request.bucket.params.rate, 5);
  EXPECT_EQ(p.request.timeout_us, 500'000);
  EXPECT_DOUBLE_EQ(p.request.permits, 1.0);
  EXPECT_TRUE(p.request.use_bucket);
  EXPECT_FALSE(p.request.parent);
  EXPECT_EQ(p.request.hash_tag, "/search");
  EXPECT_TRUE(p.request.quotas.empty());
}

// An adaptive rule's request asks the store to decide at the adapted rate (or to track it
// in shadow); any other rule's asks for nothing of the kind.
TEST_F(RequestPolicy, AnAdaptiveRuleAsksForItsAdaptedRate) {
  Plan plain;
  plan("/api/search", plain);
  EXPECT_EQ(plain.request.adaptive, limiter::Adaptive::off);
  for (const auto& [text, mode] : {std::pair{"on", limiter::Adaptive::on}, std::pair{"shadow", limiter::Adaptive::shadow}}) {
    auto r = row(1, "/search", 5);
    r.adaptive = text;
    snap = snapshot({r});
    Plan p;
    plan("/api/search", p);
    EXPECT_EQ(p.step, Step::decide);
    EXPECT_EQ(p.request.adaptive, mode);
    EXPECT_EQ(p.request.bucket.params.rate, 5);  // the configured rate: the store applies the adaptation
  }
}

TEST_F(RequestPolicy, RuleModeShadowDecidesInShadow) {
  auto r = row(1, "/search", 5);
  r.mode = "shadow";
  snap = snapshot({r});
  Plan p;
  plan("/api/search", p);
  EXPECT_EQ(p.step, Step::decide);
  EXPECT_TRUE(p.shadow);
}

TEST_F(RequestPolicy, HoldCapsLeaveOnlyAnImmediatePermit) {
  held = 100;  // proxy.max_held reached
  Plan p;
  plan("/api/search", p);
  EXPECT_TRUE(p.capped);
  EXPECT_EQ(p.request.timeout_us, 0);
  held = 99;
  metrics.bucket("/search").held.Set(10);  // proxy.max_held_per_bucket reached
  Plan q;
  plan("/api/search", q);
  EXPECT_TRUE(q.capped);
  EXPECT_EQ(q.request.timeout_us, 0);
  metrics.bucket("/search").held.Set(9);
  Plan free;
  plan("/api/search", free);
  EXPECT_FALSE(free.capped);
}

TEST_F(RequestPolicy, AChannelRuleIsTheParentAndTheHashTag) {
  auto ch = row(2, "", 20);
  ch.interface_url.reset();
  ch.scope = "channel";
  snap = snapshot({row(1, "/search", 5), ch});
  Plan p;
  plan("/api/search", p);
  ASSERT_EQ(p.step, Step::decide);
  ASSERT_NE(p.channel, nullptr);
  ASSERT_TRUE(p.request.parent);
  EXPECT_EQ(p.request.parent->name, "channel:IBE");
  EXPECT_EQ(p.request.hash_tag, "IBE");
}

TEST_F(RequestPolicy, KeyedBucketsQuotasAndShareUseTheKeySchema) {
  auto r = row(7, "/search", 5);
  r.key_by = "header:X-Api-Key";
  r.max_share = 0.5;
  r.quotas = {quota(31, "client_ip"), quota(32, "none")};
  snap = snapshot({r});
  headers.fields.emplace("X-Api-Key", "k1");
  Plan p;
  plan("/api/search", p);
  ASSERT_EQ(p.step, Step::decide);
  EXPECT_EQ(p.request.bucket.name, "c:7:h=k1");
  EXPECT_EQ(p.request.bucket.name.data(), p.keyed_bucket.data());  // the plan owns the name
  EXPECT_TRUE(p.request.per_client_bucket);
  ASSERT_EQ(p.request.quotas.size(), 2u);
  EXPECT_EQ(p.request.quotas[0].key, "q:31:10.0.0.7");
  EXPECT_FALSE(p.request.quotas[0].shared);
  EXPECT_EQ(p.request.quotas[1].key, "q:32:");
  EXPECT_TRUE(p.request.quotas[1].shared);
  ASSERT_TRUE(p.request.share);
  EXPECT_EQ(p.request.share->key, "s:7:h=k1");
}

TEST_F(RequestPolicy, ACaseInsensitiveRuleKeysAnyCaseOfThePathAsOne) {
  // /SEARCH and /search are one interface for such a rule, so one client's key on it is one too:
  // otherwise each spelling would get a bucket and a quota of its own.
  auto r = row(7, "/search", 5);
  r.key_by = "client_ip_path";
  r.match_case = "insensitive";
  r.quotas = {quota(31, "client_ip_path")};
  snap = snapshot({r});
  Plan lower, upper;
  plan("/api/search", lower);
  plan("/API/SeArCh", upper);
  ASSERT_EQ(upper.step, Step::decide);
  EXPECT_EQ(upper.request.bucket.name, lower.request.bucket.name);
  EXPECT_EQ(upper.request.bucket.name, "c:7:10.0.0.7 /api/search");
  ASSERT_EQ(upper.request.quotas.size(), 1u);
  EXPECT_EQ(upper.request.quotas[0].key, lower.request.quotas[0].key);
  // A case-sensitive rule keeps the path as sent (it only matches its own case anyway).
  r.match_case = "sensitive";
  snap = snapshot({r});
  Plan kept;
  plan("/API/search", kept);
  EXPECT_EQ(kept.request.bucket.name, "c:7:10.0.0.7 /API/search");
}

TEST_F(RequestPolicy, ForwardedForCountsOnlyBehindATrustedProxy) {
  auto r = row(1, "/search", 5);
  r.quotas = {quota(31, "client_ip")};
  snap = snapshot({r});
  headers.fields.emplace("X-Forwarded-For", "203.0.113.9");
  Plan untrusted;
  plan("/api/search", untrusted, SwitchMode::enforce, "10.0.0.7");
  EXPECT_EQ(untrusted.request.quotas.at(0).key, "q:31:10.0.0.7");
  ASSERT_FALSE(trusted.add("10.0.0.0/8"));
  Plan behind;
  plan("/api/search", behind, SwitchMode::enforce, "10.0.0.7");
  EXPECT_EQ(behind.request.quotas.at(0).key, "q:31:203.0.113.9");
}

TEST_F(RequestPolicy, AMissingKeyHeaderIsAnonymousOrRefusedByPolicy) {
  auto r = row(1, "/search", 5);
  r.key_by = "header:X-Api-Key";
  snap = snapshot({r});
  Plan anonymous;
  plan("/api/search", anonymous);
  EXPECT_EQ(anonymous.step, Step::decide);
  EXPECT_EQ(anonymous.request.bucket.name, "c:1:anonymous");
  settings.missing_key = MissingKey::reject;
  Plan refused_plan;
  plan("/api/search", refused_plan);
  EXPECT_EQ(refused_plan.step, Step::bad_key);
  EXPECT_EQ(refused_plan.detail, "header X-Api-Key is required (it keys a rate limit)");
  headers.fields.emplace("X-Api-Key", std::string(kMaxHeaderKey + 1, 'k'));
  Plan too_long;
  plan("/api/search", too_long);
  EXPECT_EQ(too_long.step, Step::bad_key);
  EXPECT_EQ(too_long.detail, "header X-Api-Key is longer than 128 bytes");
}

TEST_F(RequestPolicy, AQuotaOnlyRuleWithEveryQuotaOffHasNothingToDecide) {
  auto r = row(1, "/search", 5);
  r.rate_limit.reset();  // no bucket: quotas only
  r.quotas = {quota(31, "client_ip", 0)};
  snap = snapshot({r});
  Plan p;
  plan("/api/search", p);
  EXPECT_EQ(p.step, Step::forward);
  EXPECT_EQ(p.outcome, Outcome::forwarded);
  ASSERT_NE(p.rule, nullptr);
}

// ---- verdicts ---------------------------------------------------------------------------------

TEST_F(RequestPolicy, AnImmediatePermitForwardsWithRateLimitFields) {
  Plan p;
  plan("/api/search", p);
  const Verdict v = verdict_for(p, granted(0));
  EXPECT_EQ(v.action, Action::forward);
  EXPECT_EQ(v.outcome, Outcome::forwarded);
  EXPECT_EQ(v.policy_header, "\"/search\";q=5;w=1;burst=5");
  EXPECT_EQ(v.limit_header, "\"/search\";r=3;t=0");
  EXPECT_TRUE(v.shadow_header.empty());
  EXPECT_TRUE(v.counts_wait);
  EXPECT_EQ(v.wait_us, 0);
}

TEST_F(RequestPolicy, ALaterSlotHoldsForItsWait) {
  Plan p;
  plan("/api/search", p);
  const Verdict v = verdict_for(p, granted(120'000));
  EXPECT_EQ(v.action, Action::hold);
  EXPECT_EQ(v.outcome, Outcome::delayed);
  EXPECT_EQ(v.wait_us, 120'000);
  EXPECT_TRUE(v.counts_wait);
  EXPECT_FALSE(v.policy_header.empty());
}

TEST_F(RequestPolicy, ASlotBeyondTheWindowIs429WithRetryAfterAndTheBoundPolicy) {
  Plan p;
  plan("/api/search", p);
  const Verdict v = verdict_for(p, refused(1'000'001));
  EXPECT_EQ(v.action, Action::reject);
  EXPECT_EQ(v.outcome, Outcome::rejected);
  EXPECT_EQ(v.retry_after_s, 2);
  EXPECT_EQ(v.bound, "/search");
  EXPECT_EQ(v.limit_header, "\"/search\";r=0;t=2");
  EXPECT_FALSE(v.cap_rejection);
  EXPECT_FALSE(v.counts_wait);
  const auto body = nlohmann::json::parse(v.body);
  EXPECT_EQ(body["error"], "rate_limited");
  EXPECT_EQ(body["bucket"], "/search");
}

TEST_F(RequestPolicy, ARejectionUnderTheHoldCapIsCountedAsSuch) {
  held = 100;
  Plan p;
  plan("/api/search", p);
  EXPECT_TRUE(verdict_for(p, refused(200'000)).cap_rejection);
  auto r = row(1, "/search", 5);
  r.quotas = {quota(31, "none")};
  snap = snapshot({r});
  Plan q;
  plan("/api/search", q);
  store::StoreDecision by_quota = refused(200'000, store::Bound::quota);
  by_quota.quotas.resize(1);
  EXPECT_FALSE(verdict_for(q, by_quota).cap_rejection);  // a quota refuses whatever the caps
}

TEST_F(RequestPolicy, StoreDownFailOpenForwardsUnlimitedFailClosedIs503) {
  Plan p;
  plan("/api/search", p);
  const Verdict open = verdict_for(p, failed(store::StoreStatus::unavailable_open));
  EXPECT_EQ(open.action, Action::forward);
  EXPECT_EQ(open.outcome, Outcome::store_error);
  EXPECT_TRUE(open.policy_header.empty());  // nothing was decided: no RateLimit fields
  const Verdict closed = verdict_for(p, failed(store::StoreStatus::unavailable_closed));
  EXPECT_EQ(closed.action, Action::unavailable);
  EXPECT_EQ(closed.outcome, Outcome::store_error);
  EXPECT_EQ(closed.retry_after_s, 1);
  EXPECT_EQ(nlohmann::json::parse(closed.body)["error"], "limiter_unavailable");
  // A store with no failure policy around it: forwarded, as the default policy does.
  const Verdict bare = verdict_for(p, failed(store::StoreStatus::unavailable));
  EXPECT_EQ(bare.action, Action::forward);
  EXPECT_EQ(bare.outcome, Outcome::store_error);
}

TEST_F(RequestPolicy, ShadowForwardsEverythingAndTellsTheUpstream) {
  Plan p;
  plan("/api/search", p, SwitchMode::shadow);
  ASSERT_TRUE(p.shadow);
  const Verdict would_reject = verdict_for(p, refused(1'500'000));
  EXPECT_EQ(would_reject.action, Action::forward);
  EXPECT_EQ(would_reject.outcome, Outcome::shadow_rejected);
  EXPECT_EQ(would_reject.shadow_header, "would-reject; bucket=\"/search\"; retry-after-ms=1500");
  EXPECT_TRUE(would_reject.policy_header.empty());
  const Verdict would_delay = verdict_for(p, granted(2'001));
  EXPECT_EQ(would_delay.action, Action::forward);
  EXPECT_EQ(would_delay.outcome, Outcome::forwarded);
  EXPECT_EQ(would_delay.shadow_header, "would-delay; bucket=\"/search\"; wait-ms=3");
  EXPECT_FALSE(would_delay.counts_wait);  // nobody waited
  const Verdict plain = verdict_for(p, granted(0));
  EXPECT_TRUE(plain.shadow_header.empty());
  // A store failure in shadow mode never refuses, whatever the policy.
  const Verdict down = verdict_for(p, failed(store::StoreStatus::unavailable_closed));
  EXPECT_EQ(down.action, Action::forward);
  EXPECT_EQ(down.outcome, Outcome::store_error);
}

TEST_F(RequestPolicy, ShadowNamesABindingQuotaAsAPolicy) {
  auto r = row(1, "/search", 5);
  r.quotas = {quota(31, "none")};
  snap = snapshot({r});
  Plan p;
  plan("/api/search", p, SwitchMode::shadow);
  store::StoreDecision sd = refused(40'000, store::Bound::quota);
  sd.quotas.resize(1);
  const Verdict v = verdict_for(p, sd);
  EXPECT_EQ(v.shadow_header, "would-reject; policy=\"/search#q31\"; retry-after-ms=40");
}

// ---- priority classes and cost -----------------------------------------------------------------

config::RawRow classed(std::int64_t id, std::string url, std::string by) {
  config::RawRow r = row(id, std::move(url), 50);
  r.priority = R"({"by": ")" + by + R"(", "classes": ["book", "look"], "default": "look", "reserve": {"book": 0.3}})";
  return r;
}

TEST_F(RequestPolicy, TheClassHeaderCountsOnlyFromATrustedProxy) {
  ASSERT_FALSE(trusted.add("10.1.0.0/16"));
  snap = snapshot({classed(1, "/air", "header:X-Tollgate-Priority")});
  headers.fields.emplace("X-Tollgate-Priority", " book ");
  Plan from_proxy;
  plan("/air", from_proxy, SwitchMode::enforce, "10.1.2.3");
  ASSERT_EQ(from_proxy.step, Step::decide);
  ASSERT_NE(from_proxy.priority, nullptr);
  EXPECT_EQ(from_proxy.priority_class, 0u);
  EXPECT_EQ(from_proxy.request.reserve_share, 0.0);  // the highest class keeps nothing back
  // A caller that promotes itself gets the default class, and the reserve is kept from it.
  Plan direct;
  plan("/air", direct, SwitchMode::enforce, "192.0.2.9");
  EXPECT_EQ(direct.priority_class, 1u);
  EXPECT_DOUBLE_EQ(direct.request.reserve_share, 0.3);
  // A trusted proxy that names no class, or an unknown one: the default.
  headers.fields.clear();
  headers.fields.emplace("X-Tollgate-Priority", "vip");
  Plan unknown;
  plan("/air", unknown, SwitchMode::enforce, "10.1.2.3");
  EXPECT_EQ(unknown.priority_class, 1u);
}

TEST_F(RequestPolicy, TheClassByMethodNeedsNoTrust) {
  config::RawRow r = row(1, "/air", 50);
  r.priority = R"({"by": "method", "classes": ["POST", "GET"], "default": "GET", "reserve": {"POST": 0.25}})";
  snap = snapshot({r});
  Plan post, get;
  const RequestFacts p_facts{"/air", "192.0.2.9", headers, 0, nullptr, 0, "POST"};
  const RequestFacts g_facts{"/air", "192.0.2.9", headers, 0, nullptr, 0, "GET"};
  views = std::make_shared<const RuleViews>(snap, metrics);
  plan_request(p_facts, views.get(), SwitchMode::enforce, settings, post);
  plan_request(g_facts, views.get(), SwitchMode::enforce, settings, get);
  EXPECT_EQ(post.priority_class, 0u);
  EXPECT_EQ(post.request.reserve_share, 0.0);
  EXPECT_EQ(get.priority_class, 1u);
  EXPECT_DOUBLE_EQ(get.request.reserve_share, 0.25);
}

TEST_F(RequestPolicy, CostAndChannelCostGoToTheStore) {
  config::RawRow channel;
  channel.config_id = 9;
  channel.channel_type = "IBE";
  channel.scope = "channel";
  channel.rate_limit = 10;
  channel.status = 1;
  channel.priority = R"({"by": "method", "classes": ["POST", "GET"], "default": "GET", "reserve": {"POST": 0.5}})";
  config::RawRow heavy = row(1, "/fare", 10);
  heavy.cost = 5;
  config::RawRow light = row(2, "/look", 10);
  light.channel_cost = 3;
  snap = snapshot({channel, heavy, light});
  Plan a, b;
  plan("/fare", a);
  plan("/look", b);
  EXPECT_EQ(a.request.permits, 5.0);
  EXPECT_EQ(a.request.parent_permits, 5.0);
  EXPECT_EQ(b.request.permits, 1.0);
  EXPECT_EQ(b.request.parent_permits, 3.0);
  // The channel's classes: a request without a method is the default class there.
  ASSERT_NE(a.priority, nullptr);
  EXPECT_EQ(a.priority_class, 1u);
  EXPECT_EQ(a.request.reserve_share, 0.0);
  EXPECT_DOUBLE_EQ(a.request.parent_reserve_share, 0.5);
}

}  // namespace
}  // namespace tollgate::proxy

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/manual_clock.hpp"
#include "tollgate/admin/admin_api.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::admin {
namespace {

using nlohmann::json;
using admin::SimpleRequest;

struct Fixture {
  testing::ManualClock clock;
  config::SnapshotHolder snaps;
  config::SwitchState sw{config::SwitchMode::enforce, "file"};
  store::LocalStore store{clock};
  proxy::Metrics metrics;

  Fixture() {
    config::RawRow r;
    r.config_id = 1;
    r.interface_url = "/shopping/search";
    r.rate_limit = 5;
    r.status = 1;
    config::RawRow bad = r;
    bad.config_id = 2;
    bad.interface_url = "/x";
    bad.rate_limit = -1;
    snaps.set(config::make_snapshot(config::validate_rows({r, bad}), 3, "test"));
  }
  AdminApi api(std::string token) { return AdminApi({snaps, sw, store, metrics, std::move(token), "", nullptr, nullptr, nullptr, nullptr}); }
};

SimpleRequest put_switch(std::string auth, std::string body = R"({"enabled":false})") {
  return {"PUT", "/admin/switch", std::move(auth), std::move(body), "10.0.0.1"};
}

TEST(AdminApi, MutationsNeedTheBearerToken) {
  Fixture f;
  auto api = f.api("s3cret");
  EXPECT_EQ(api.handle(put_switch("")).status, 401);
  EXPECT_EQ(api.handle(put_switch("Bearer wrong")).status, 401);
  EXPECT_EQ(api.handle(put_switch("Bearer s3cret-and-more")).status, 401);
  EXPECT_EQ(api.handle(put_switch("Basic s3cret")).status, 401);
  EXPECT_TRUE(f.sw.enabled());
  auto ok = api.handle(put_switch("Bearer s3cret"));
  EXPECT_EQ(ok.status, 200);
  EXPECT_FALSE(f.sw.enabled());
  const auto j = json::parse(ok.body);
  EXPECT_EQ(j["enabled"], false);
  EXPECT_EQ(j["previous"], "enforce");
  EXPECT_EQ(j["state"], "off");
  EXPECT_EQ(j["changed_by"], "admin@10.0.0.1");
}

// POST /admin/rules/<bucket>/adaptive/reset: with the token, an adaptive bucket forgets the
// allowance its supplier advertised (and its cuts); unknown buckets and rules that do not adapt
// are explained.
TEST(AdminApi, AnAdaptiveBucketsLearningIsResetWithTheToken) {
  Fixture f;
  config::RawRow r;
  r.config_id = 1;
  r.interface_url = "/shopping/search";
  r.rate_limit = 50;
  r.status = 1;
  r.adaptive = "on";
  config::RawRow plain = r;
  plain.config_id = 2;
  plain.interface_url = "/booking";
  plain.adaptive.reset();
  f.snaps.set(config::make_snapshot(config::validate_rows({r, plain}), 4, "test"));
  auto api = f.api("t");
  store::AcquireRequest req{{"/shopping/search", {}}, {}, "/shopping/search", 1, 0};
  req.bucket.params.rate = 50;
  req.adaptive = limiter::Adaptive::on;
  req.advert = limiter::AdvertReport{0, 2, 1'000'000, 0, 0};  // 2 left for a second: paced at 2/s
  EXPECT_EQ(f.store.decide(req).effective_rate, 2);
  req.advert.reset();
  const SimpleRequest reset{"POST", "/admin/rules/shopping/search/adaptive/reset", "", "", "10.0.0.1"};
  EXPECT_EQ(api.handle(reset).status, 401);
  EXPECT_LT(f.store.decide(req).effective_rate, 50);  // still learned
  SimpleRequest with_token = reset;
  with_token.authorization = "Bearer t";
  const auto ok = api.handle(with_token);
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["bucket"], "/shopping/search");
  EXPECT_EQ(f.store.decide(req).effective_rate, 50);  // forgotten: the rule's own rate
  with_token.target = "/admin/rules/booking/adaptive/reset";
  EXPECT_EQ(api.handle(with_token).status, 409);
  with_token.target = "/admin/rules/nothing/adaptive/reset";
  EXPECT_EQ(api.handle(with_token).status, 404);
  with_token.method = "GET";
  EXPECT_EQ(api.handle(with_token).status, 405);
}

TEST(AdminApi, NoTokenConfiguredMeansReadOnly) {
  Fixture f;
  auto api = f.api("");
  EXPECT_EQ(api.handle(put_switch("Bearer anything")).status, 403);
  EXPECT_EQ(api.handle({"GET", "/admin/switch", "", "", ""}).status, 200);
  EXPECT_TRUE(f.sw.enabled());
}

TEST(AdminApi, BadSwitchBodiesAreExplained) {
  Fixture f;
  auto api = f.api("t");
  EXPECT_EQ(api.handle(put_switch("Bearer t", "{")).status, 400);
  EXPECT_EQ(api.handle(put_switch("Bearer t", R"({"enabled":"no"})")).status, 400);
  EXPECT_EQ(api.handle(put_switch("Bearer t", R"({"enabled":false,"x":1})")).status, 400);
  EXPECT_TRUE(f.sw.enabled());
}

TEST(AdminApi, InvalidUtf8InABodyIsExplainedNotFatal) {
  // Found by fuzzing: the JSON parser's message quotes the offending byte, which is not UTF-8.
  Fixture f;
  auto api = f.api("t");
  const auto res = api.handle(put_switch("Bearer t", std::string("{\"enabled\": \x8c}")));
  EXPECT_EQ(res.status, 400);
  EXPECT_NO_THROW(json::parse(res.body));
}

TEST(AdminApi, RulesShowActiveAndRejectedRows) {
  Fixture f;
  auto res = f.api("").handle({"GET", "/admin/rules", "", "", ""});
  ASSERT_EQ(res.status, 200);
  const auto j = json::parse(res.body);
  EXPECT_EQ(j["version"], 3);
  ASSERT_EQ(j["rules"].size(), 1u);
  EXPECT_EQ(j["rules"][0]["interfaceUrl"], "/shopping/search");
  ASSERT_EQ(j["rejected"].size(), 1u);
  EXPECT_EQ(j["rejected"][0]["configId"], 2);
  EXPECT_EQ(j["rejected"][0]["field"], "rateLimit");
}

TEST(AdminApi, BucketView) {
  Fixture f;
  auto api = f.api("");
  for (int i = 0; i < 7; ++i) f.store.decide({{"/shopping/search", f.snaps.get()->rules[0].params}, {}, {}, 1, 1'000'000});
  auto res = api.handle({"GET", "/admin/buckets/shopping/search", "", "", ""});
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_DOUBLE_EQ(json::parse(res.body)["debt_s"].get<double>(), 0.4);
  EXPECT_EQ(api.handle({"GET", "/admin/buckets/nope", "", "", ""}).status, 404);
}

TEST(AdminApi, HealthMetricsAndUnknownPaths) {
  Fixture f;
  auto api = f.api("");
  EXPECT_EQ(api.handle({"GET", "/healthz", "", "", ""}).status, 200);
  EXPECT_EQ(api.handle({"GET", "/readyz", "", "", ""}).status, 200);
  auto m = api.handle({"GET", "/metrics", "", "", ""});
  EXPECT_NE(m.body.find("tollgate_switch_enabled 1"), std::string::npos);
  EXPECT_EQ(api.handle({"GET", "/nope", "", "", ""}).status, 404);
  EXPECT_EQ(api.handle({"POST", "/admin/rules", "", "", ""}).status, 405);
}

TEST(AdminApi, MetricsAreOneRegistryWithTheStoresAndTheAdminSeries) {
  Fixture f;
  auto api = f.api("t");
  for (int i = 0; i < 7; ++i) f.store.decide({{"/shopping/search", f.snaps.get()->rules[0].params}, {}, {}, 1, 1'000'000});
  EXPECT_EQ(api.handle(put_switch("Bearer wrong")).status, 401);
  const auto count = [](const std::string& text, const std::string& s) {
    std::size_t n = 0;
    for (auto at = text.find(s); at != std::string::npos; at = text.find(s, at + 1)) ++n;
    return n;
  };
  std::string m = api.handle({"GET", "/metrics", "", "", ""}).body;
  EXPECT_EQ(count(m, "\ntollgate_bucket_debt_seconds{bucket=\"/shopping/search\"} 0.4\n"), 1u) << m;
  EXPECT_EQ(count(m, "\ntollgate_admin_auth_failures_total 1\n"), 1u);
  EXPECT_EQ(count(m, "\ntollgate_switch_state 1\n"), 1u);
  EXPECT_EQ(count(m, "\ntollgate_client_keys_max "), 1u);                              // the store's
  EXPECT_EQ(count(m, "\ntollgate_requests_total{outcome=\"forwarded\"} 0\n"), 1u);  // the proxy's
  // Scraped again: every family once.
  m = api.handle({"GET", "/metrics", "", "", ""}).body;
  EXPECT_EQ(count(m, "# TYPE tollgate_switch_state gauge\n"), 1u);
  EXPECT_EQ(count(m, "# TYPE tollgate_bucket_debt_seconds gauge\n"), 1u);
  EXPECT_EQ(count(m, "# TYPE tollgate_client_keys gauge\n"), 1u);
  // A rule gone from the config: its bucket's debt is no longer shown.
  f.snaps.set(config::make_snapshot(config::validate_rows(std::vector<config::RawRow>{}), 4, "test"));
  m = api.handle({"GET", "/metrics", "", "", ""}).body;
  EXPECT_EQ(m.find("tollgate_bucket_debt_seconds{"), std::string::npos) << m;
}

TEST(AdminApi, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "abcd"));
  EXPECT_FALSE(constant_time_equals("", "a"));
  EXPECT_TRUE(constant_time_equals("", ""));
}

}  // namespace
}  // namespace tollgate::admin

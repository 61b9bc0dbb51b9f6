#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {
namespace {

config::Rule rule() {
  config::Rule r;
  r.config_id = 1;
  r.interface_url = "/shopping/search";
  r.bucket = r.interface_url;
  r.rate_limit = 5;
  r.cache_s = 0.5;
  r.enabled = true;
  r.params.rate = 5;
  return r;
}

TEST(Throttle, RetryAfterRoundsUpToWholeSeconds) {
  EXPECT_EQ(ceil_seconds(0), 0);
  EXPECT_EQ(ceil_seconds(1), 1);
  EXPECT_EQ(ceil_seconds(1'000'000), 1);
  EXPECT_EQ(ceil_seconds(1'000'001), 2);
}

TEST(Throttle, RateLimitHeaders) {
  limiter::Decision rejected;
  rejected.granted = false;
  rejected.retry_after_us = 100000;
  rejected.remaining = 0.4;
  EXPECT_EQ(ratelimit_policy(rule().bucket, rule().rate_limit, 5), "\"/shopping/search\";q=5;w=1;burst=5");
  EXPECT_EQ(ratelimit_header(rule(), rejected), "\"/shopping/search\";r=0;t=1");
  limiter::Decision ok;
  ok.granted = true;
  ok.remaining = 3.7;
  EXPECT_EQ(ratelimit_header(rule(), ok), "\"/shopping/search\";r=3;t=0");
}

TEST(Throttle, RejectionBodyNamesTheBucket) {
  store::StoreDecision sd;  // bound by the rule's bucket
  sd.decision.retry_after_us = 100001;
  const auto j = nlohmann::json::parse(rejection_body(rule(), nullptr, sd));
  EXPECT_EQ(j["error"], "rate_limited");
  EXPECT_EQ(j["bucket"], "/shopping/search");
  EXPECT_EQ(j["retry_after_ms"], 101);
  EXPECT_EQ(j["wait_window_ms"], 500);
  // RFC 9457 members, with the RateLimit draft's problem type and its extension member.
  EXPECT_EQ(j["type"], "https://iana.org/assignments/http-problem-types#quota-exceeded");
  EXPECT_EQ(j["status"], 429);
  EXPECT_FALSE(j["title"].get<std::string>().empty());
  EXPECT_EQ(j["detail"], "policy /shopping/search admits no more requests now; retry after 101 ms");
  EXPECT_EQ(j["violated-policies"], nlohmann::json::array({"/shopping/search"}));
}

TEST(Throttle, ProblemBodyOfTheGatewaysOwnAnswers) {
  const auto j = nlohmann::json::parse(problem_body(404, "Not Found", "no_route", "no route for this path"));
  EXPECT_EQ(j, nlohmann::json::parse(R"({"type":"about:blank","title":"Not Found","status":404,
                                         "detail":"no route for this path","error":"no_route"})"));
  const auto busy = nlohmann::json::parse(problem_body(503, "t", "limiter_unavailable", "d", kReducedCapacity));
  EXPECT_EQ(busy["type"], "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
  EXPECT_NO_THROW(nlohmann::json::parse(problem_body(400, "Bad Request", "bad_request", std::string("\x8c\xff /p"))));
}

TEST(Throttle, ErrorBodyNeverThrowsOnInvalidUtf8) {
  const std::string body = error_body("bad_request", std::string("\x8c\xff /path"));
  EXPECT_NO_THROW(nlohmann::json::parse(body));
}

TEST(Metrics, RendersEveryOutcome) {
  Metrics m;
  m.count(Outcome::rejected);
  m.count(Outcome::rejected);
  m.count(UpstreamError::timeout);
  const std::string text = m.render();
  EXPECT_NE(text.find("tollgate_requests_total{outcome=\"rejected\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tollgate_requests_total{outcome=\"bypassed\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("tollgate_upstream_errors_total{kind=\"timeout\"} 1\n"), std::string::npos);
}

config::Rule with_quotas() {
  config::Rule r = rule();
  for (auto [id, period, limit] : {std::tuple{3, 1, 2}, std::tuple{4, 60, 5}}) {
    config::Quota q;
    q.quota_id = id;
    q.period_s = period;
    q.limit = limit;
    q.key_by.kind = config::KeySpec::Kind::client_ip_path;
    config::name_quota(q, r.bucket);
    r.quotas.push_back(q);
  }
  return r;
}

TEST(Throttle, RateLimitReportsThePolicyClosestToItsLimit) {
  const config::Rule r = with_quotas();
  store::StoreDecision sd;
  sd.decision.granted = true;
  sd.decision.remaining = 4;  // 4 of 5 permits left in the bucket
  sd.max_permits = 5;
  limiter::WindowDecision q3, q4;
  q3.admitted = q4.admitted = true;
  q3.remaining = 1;  // half of 2 left
  q3.reset_us = 400'000;
  q4.remaining = 1;  // a fifth of 5 left: the closest
  q4.reset_us = 30'000'000;
  sd.quotas = {q3, q4};
  EXPECT_EQ(ratelimit_header(r, nullptr, sd), "\"/shopping/search#q4\";r=1;t=30");
  sd.quotas[1].remaining = 4;
  EXPECT_EQ(ratelimit_header(r, nullptr, sd), "\"/shopping/search#q3\";r=1;t=1");
}

TEST(Throttle, RejectionNamesTheQuotaThatBound) {
  const config::Rule r = with_quotas();
  store::StoreDecision sd;
  sd.decision.granted = false;
  sd.decision.retry_after_us = 1'500'000;
  sd.bound = store::Bound::quota;
  sd.bound_quota = 1;
  sd.quotas.resize(2);
  EXPECT_EQ(bound_policy(r, nullptr, sd), "/shopping/search#q4");
  EXPECT_EQ(ratelimit_header(r, nullptr, sd), "\"/shopping/search#q4\";r=0;t=2");
  const auto j = nlohmann::json::parse(rejection_body(r, nullptr, sd));
  EXPECT_EQ(j["policy"], "/shopping/search#q4");
  EXPECT_EQ(j["kind"], "quota");
  EXPECT_EQ(j["quotaId"], 4);
  EXPECT_EQ(j["limit"], 5);
  EXPECT_EQ(j["period_s"], 60);
  EXPECT_EQ(j["key_by"], "client_ip_path");
  EXPECT_EQ(j["retry_after_ms"], 1500);
  sd.bound = store::Bound::share;
  EXPECT_EQ(nlohmann::json::parse(rejection_body(r, nullptr, sd))["policy"], "/shopping/search#maxShare");
}

}  // namespace
}  // namespace tollgate::proxy

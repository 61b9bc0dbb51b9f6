#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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
  EXPECT_EQ(ratelimit_policy_header(rule(), 5), "\"/shopping/search\";q=5;w=1;burst=5");
  EXPECT_EQ(ratelimit_header(rule(), rejected), "\"/shopping/search\";r=0;t=1");
  limiter::Decision ok;
  ok.granted = true;
  ok.remaining = 3.7;
  EXPECT_EQ(ratelimit_header(rule(), ok), "\"/shopping/search\";r=3;t=0");
}

TEST(Throttle, RejectionBodyNamesTheBucket) {
  limiter::Decision d;
  d.retry_after_us = 100001;
  const auto j = nlohmann::json::parse(rejection_body(rule(), d));
  EXPECT_EQ(j["error"], "rate_limited");
  EXPECT_EQ(j["bucket"], "/shopping/search");
  EXPECT_EQ(j["retry_after_ms"], 101);
  EXPECT_EQ(j["wait_window_ms"], 500);
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

}  // namespace
}  // namespace tollgate::proxy

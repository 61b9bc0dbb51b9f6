#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/throttle.hpp"
#include "tollgate/proxy/json_text.hpp"

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
  // "Never" (a meter's red that no wait can turn): a number of seconds, not an overflow.
  EXPECT_EQ(ceil_seconds(limiter::kInfinite), limiter::kInfinite / 1'000'000 + 1);
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

namespace tollgate::proxy {
namespace {

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

TEST(JsonText, EscapesWhatJsonRequires) {
  EXPECT_EQ(json_string("plain /path?x=1"), "\"plain /path?x=1\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string(std::string("\n\r\t\x01\x1f", 5)), "\"\\n\\r\\t\\u0001\\u001f\"");
  EXPECT_EQ(json_string(std::string("\0", 1)), "\"\\u0000\"");
  EXPECT_EQ(json_string("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"");
  // Not UTF-8: a stray continuation byte, a cut sequence (one U+FFFD for it, as Unicode advises),
  // an overlong form, a surrogate.
  EXPECT_EQ(json_string("\x8c"), "\"\xEF\xBF\xBD\"");
  EXPECT_EQ(json_string("\xE2\x82"), "\"\xEF\xBF\xBD\"");
  EXPECT_EQ(json_string("\xE2\x82x"), "\"\xEF\xBF\xBDx\"");
  EXPECT_EQ(json_string("\xC0\xAF"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_EQ(json_string("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(JsonText, AnyBytesGiveJsonThatParsesToWhatNlohmannReads) {
  // Random byte strings (biased toward the interesting ranges) against nlohmann's own writer in
  // its replace mode: both must parse, to the same string.
  std::uint64_t x = 88172645463325252ULL;
  auto next = [&] { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x; };
  for (int round = 0; round < 20000; ++round) {
    std::string s(next() % 12, '\0');
    for (char& c : s) {
      const auto r = next();
      c = static_cast<char>(r % 4 == 0 ? 0x80 + r % 0x80 : r % 4 == 1 ? 0xC0 + r % 0x40 : r % 4 == 2 ? r % 0x20 : r % 0x100);
    }
    const std::string ours = json_string(s);
    const std::string theirs = nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    nlohmann::json a, b;
    ASSERT_NO_THROW(a = nlohmann::json::parse(ours)) << ours;
    b = nlohmann::json::parse(theirs);
    ASSERT_EQ(a, b) << "input bytes: " << nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  }
}

TEST(JsonText, ObjectsAndNumbers) {
  JsonObject j;
  j.add("s", std::string_view("x")).add("i", std::int64_t{-42}).add("d", 0.25).add("whole", 5.0).add("inf", 1.0 / 0.0).add_string_array("a", "p");
  const std::string text = std::move(j).done();
  EXPECT_EQ(text, R"({"s":"x","i":-42,"d":0.25,"whole":5,"inf":null,"a":["p"]})");
  JsonObject lit;
  lit.add_literal("t", "about:blank").add("u", std::string_view("a\"b"));
  EXPECT_EQ(std::move(lit).done(), R"({"t":"about:blank","u":"a\"b"})");
  EXPECT_NO_THROW(nlohmann::json::parse(text));
  EXPECT_EQ(std::move(JsonObject()).done(), "{}");
}

TEST(Throttle, RejectionBodyIsTheProblemDetailsItWasBefore) {
  // The fields and values the nlohmann-built body had, now written directly.
  store::StoreDecision sd;
  sd.decision.retry_after_us = 250'000;
  const auto j = nlohmann::json::parse(rejection_body(rule(), nullptr, sd));
  EXPECT_EQ(j["type"], kQuotaExceeded);
  EXPECT_EQ(j["status"], 429);
  EXPECT_EQ(j["violated-policies"], nlohmann::json::array({"/shopping/search"}));
  EXPECT_EQ(j["detail"], "policy /shopping/search admits no more requests now; retry after 250 ms");
  EXPECT_EQ(j["configId"], 1);
  EXPECT_EQ(j["kind"], "token_bucket");
  EXPECT_EQ(j["rate_limit_per_s"], 5);
  EXPECT_EQ(j["wait_window_ms"], 500);
  EXPECT_EQ(j.size(), 13u);
}

}  // namespace
}  // namespace tollgate::proxy

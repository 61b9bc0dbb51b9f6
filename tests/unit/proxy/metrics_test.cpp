// The /metrics exposition, pinned as prometheus-cpp's TextSerializer writes it: names, HELP and
// TYPE, label names and values (sorted by name, `le` last), numbers, a histogram's buckets.
// Operators' dashboards and the end-to-end tests read these lines.
#include <gtest/gtest.h>

#include "support/manual_clock.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::proxy {
namespace {

// Whether `text` has `line` as a whole line.
bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

std::size_t occurrences(const std::string& text, const std::string& s) {
  std::size_t n = 0;
  for (auto at = text.find(s); at != std::string::npos; at = text.find(s, at + 1)) ++n;
  return n;
}

TEST(MetricsExposition, GlobalSeriesAreThereFromTheStart) {
  Metrics m;
  m.count(Outcome::forwarded);
  m.count(Outcome::forwarded);
  m.count(Outcome::forwarded);
  m.count(UpstreamError::connect);
  m.bad_requests.Increment();
  m.held.Increment();
  m.held.Increment();
  m.held.Decrement();
  m.refunds.Increment(4);
  const std::string t = m.render();
  EXPECT_TRUE(has_line(t, "# HELP tollgate_requests_total Requests by throttling outcome.")) << t;
  EXPECT_TRUE(has_line(t, "# TYPE tollgate_requests_total counter"));
  EXPECT_TRUE(has_line(t, "tollgate_requests_total{outcome=\"forwarded\"} 3"));
  for (const char* o : {"delayed", "rejected", "bypassed", "unmatched", "store_error", "shadow_rejected"})
    EXPECT_TRUE(has_line(t, std::string("tollgate_requests_total{outcome=\"") + o + "\"} 0")) << o;
  EXPECT_TRUE(has_line(t, "tollgate_upstream_errors_total{kind=\"connect\"} 1"));
  EXPECT_TRUE(has_line(t, "tollgate_upstream_errors_total{kind=\"timeout\"} 0"));
  EXPECT_TRUE(has_line(t, "tollgate_bad_requests_total 1"));
  EXPECT_TRUE(has_line(t, "# TYPE tollgate_held_requests gauge"));
  EXPECT_TRUE(has_line(t, "tollgate_held_requests 1"));
  EXPECT_TRUE(has_line(t, "tollgate_refunds_total 4"));
  EXPECT_TRUE(has_line(t, "tollgate_connections 0"));
  // No rule used yet: the per-bucket, per-policy and per-upstream families are not shown at all.
  EXPECT_EQ(t.find("tollgate_bucket_"), std::string::npos);
  EXPECT_EQ(t.find("tollgate_policy_"), std::string::npos);
  EXPECT_EQ(t.find("tollgate_upstream_response_seconds"), std::string::npos);
}

TEST(MetricsExposition, ABucketsSeriesAndItsWaitHistogram) {
  Metrics m;
  BucketMetrics& b = m.bucket("/shop\"ping\\");
  EXPECT_EQ(&b, &m.bucket("/shop\"ping\\"));  // one set of series per name
  b.count(Outcome::forwarded);
  b.count(Outcome::delayed);
  b.count(Outcome::delayed);
  b.cap_rejections.Increment();
  b.held.Increment();
  for (std::int64_t us : {0, 250'000, 500'000, 90'000'000}) b.wait.observe_us(us);
  const std::string t = m.render();
  const std::string l = "bucket=\"/shop\\\"ping\\\\\"";  // the label value escaped
  EXPECT_TRUE(has_line(t, "# TYPE tollgate_bucket_requests_total counter")) << t;
  EXPECT_TRUE(has_line(t, "tollgate_bucket_requests_total{" + l + ",outcome=\"forwarded\"} 1"));
  EXPECT_TRUE(has_line(t, "tollgate_bucket_requests_total{" + l + ",outcome=\"delayed\"} 2"));
  // Only the outcomes the bucket saw.
  EXPECT_EQ(t.find(l + ",outcome=\"rejected\"}"), std::string::npos);
  EXPECT_TRUE(has_line(t, "tollgate_bucket_cap_rejections_total{" + l + "} 1"));
  EXPECT_TRUE(has_line(t, "# TYPE tollgate_bucket_held_requests gauge"));
  EXPECT_TRUE(has_line(t, "tollgate_bucket_held_requests{" + l + "} 1"));
  EXPECT_TRUE(has_line(t, "# HELP tollgate_bucket_wait_seconds Time requests were held before being forwarded."));
  EXPECT_TRUE(has_line(t, "# TYPE tollgate_bucket_wait_seconds histogram"));
  // Cumulative buckets, bounds in seconds; a bound holds what equals it.
  const std::pair<const char*, int> buckets[] = {{"0.001", 1}, {"0.005", 1}, {"0.01", 1}, {"0.025", 1}, {"0.05", 1},
                                                 {"0.1", 1},   {"0.25", 2},  {"0.5", 3},  {"1", 3},     {"2.5", 3},
                                                 {"5", 3},     {"10", 3},    {"30", 3},   {"60", 3},    {"+Inf", 4}};
  for (const auto& [le, n] : buckets)
    EXPECT_TRUE(has_line(t, "tollgate_bucket_wait_seconds_bucket{" + l + ",le=\"" + le + "\"} " + std::to_string(n))) << le;
  EXPECT_EQ(occurrences(t, "tollgate_bucket_wait_seconds_bucket{"), 15u);
  EXPECT_TRUE(has_line(t, "tollgate_bucket_wait_seconds_count{" + l + "} 4"));
  EXPECT_TRUE(has_line(t, "tollgate_bucket_wait_seconds_sum{" + l + "} 90.75"));
}

TEST(MetricsExposition, PolicySeries) {
  Metrics m;
  PolicyMetrics& quota = m.policy("/login", "/login#q3", true);
  quota.passed->Increment();
  quota.passed->Increment();
  quota.bound->Increment();
  PolicyMetrics& bucket = m.policy("/login", "/login", false);
  EXPECT_EQ(bucket.passed, nullptr);  // a bucket is never checked on its own
  EXPECT_EQ(&quota, &m.policy("/login", "/login#q3", true));
  const std::string t = m.render();
  EXPECT_TRUE(has_line(t, "tollgate_policy_checks_total{policy=\"/login#q3\",result=\"passed\",rule=\"/login\"} 2")) << t;
  EXPECT_TRUE(has_line(t, "tollgate_policy_checks_total{policy=\"/login#q3\",result=\"failed\",rule=\"/login\"} 0"));
  EXPECT_TRUE(has_line(t, "tollgate_policy_rejections_total{policy=\"/login#q3\",rule=\"/login\"} 1"));
  EXPECT_TRUE(has_line(t, "tollgate_policy_rejections_total{policy=\"/login\",rule=\"/login\"} 0"));
  EXPECT_EQ(t.find("tollgate_policy_checks_total{policy=\"/login\","), std::string::npos);
}

TEST(MetricsExposition, UpstreamSeries) {
  Metrics m;
  UpstreamMetrics& u = m.upstream("ibe");
  EXPECT_EQ(&u, &m.upstream("ibe"));
  u.count(UpstreamError::timeout);
  u.latency.observe_us(1000);    // 0.001 s: on the first bound
  u.latency.observe_us(-5);      // a clock step back counts as 0
  u.latency.observe_us(70'000'000);
  const std::string t = m.render();
  EXPECT_TRUE(has_line(t, "tollgate_upstream_failures_total{kind=\"timeout\",upstream=\"ibe\"} 1")) << t;
  EXPECT_TRUE(has_line(t, "tollgate_upstream_failures_total{kind=\"connect\",upstream=\"ibe\"} 0"));
  EXPECT_TRUE(has_line(t, "tollgate_upstream_failures_total{kind=\"reset\",upstream=\"ibe\"} 0"));
  EXPECT_TRUE(has_line(t, "# TYPE tollgate_upstream_response_seconds histogram"));
  EXPECT_TRUE(has_line(t, "tollgate_upstream_response_seconds_bucket{upstream=\"ibe\",le=\"0.001\"} 2"));
  EXPECT_TRUE(has_line(t, "tollgate_upstream_response_seconds_bucket{upstream=\"ibe\",le=\"60\"} 2"));
  EXPECT_TRUE(has_line(t, "tollgate_upstream_response_seconds_bucket{upstream=\"ibe\",le=\"+Inf\"} 3"));
  EXPECT_TRUE(has_line(t, "tollgate_upstream_response_seconds_count{upstream=\"ibe\"} 3"));
  EXPECT_TRUE(has_line(t, "tollgate_upstream_response_seconds_sum{upstream=\"ibe\"} 70.001"));
}

TEST(MetricsExposition, TheStorePublishesIntoTheSameRegistry) {
  testing::ManualClock clock;
  store::LocalStore local(clock, 6400);
  Metrics m;
  local.publish_metrics(m.registry);
  local.publish_metrics(m.registry);  // a second scrape finds its series, adds none
  const std::string t = m.render();
  EXPECT_TRUE(has_line(t, "# TYPE tollgate_client_keys gauge")) << t;
  EXPECT_TRUE(has_line(t, "tollgate_client_keys 0"));
  EXPECT_TRUE(has_line(t, "tollgate_client_keys_max 6400"));
  EXPECT_EQ(occurrences(t, "# TYPE tollgate_client_keys gauge"), 1u);
  EXPECT_TRUE(has_line(t, "tollgate_requests_total{outcome=\"forwarded\"} 0"));
}

// Two holders of one endpoint's series (the running route table and the one a SIGHUP replaced):
// its `up` gauge stays until the last lets go, and the survivor still writes to it.
TEST(MetricsExposition, AnEndpointGaugeGoesWithItsLastHolder) {
  Metrics m;
  const EndpointSeries first = m.endpoint("ibe", "10.0.0.1:443");
  const EndpointSeries second = m.endpoint("ibe", "10.0.0.1:443");
  ASSERT_EQ(first.up, second.up);
  first.up->Set(1);
  m.remove_endpoint(first);
  second.up->Set(0);  // still there: no use after free under ASan
  EXPECT_TRUE(has_line(m.render(), "tollgate_upstream_endpoint_up{endpoint=\"10.0.0.1:443\",upstream=\"ibe\"} 0"));
  m.remove_endpoint(second);
  EXPECT_EQ(m.render().find("tollgate_upstream_endpoint_up{"), std::string::npos);
}

// The supplier's admissions an adaptive bucket heard, told with the next decision: those heard in
// an earlier second of the wall clock than the report's are said apart (the store counts them in
// its previous second), and nothing heard is nothing to tell.
TEST(Metrics, AdmissionsAreToldWithTheSecondTheyWereHeardIn) {
  Metrics m;
  BucketMetrics& b = m.bucket("/search");
  EXPECT_EQ(b.take_admitted_at(100).total, 0);
  b.note_admitted_at(100);
  b.note_admitted_at(100);
  BucketMetrics::Admitted a = b.take_admitted_at(100);
  EXPECT_EQ(a.total, 2);
  EXPECT_EQ(a.before, 0);
  b.note_admitted_at(100);  // the last of second 100...
  b.note_admitted_at(101);  // ...and the first of 101, told in 101
  a = b.take_admitted_at(101);
  EXPECT_EQ(a.total, 2);
  EXPECT_EQ(a.before, 1);
  b.note_admitted_at(101);
  b.note_admitted_at(101);
  a = b.take_admitted_at(103);  // told two seconds later: all earlier
  EXPECT_EQ(a.total, 2);
  EXPECT_EQ(a.before, 2);
  b.give_back_admitted_at(a, 103);  // a report the store did not take: told again
  b.note_admitted_at(103);
  a = b.take_admitted_at(103);
  EXPECT_EQ(a.total, 3);
  EXPECT_EQ(a.before, 2);
  EXPECT_EQ(b.take_admitted_at(103).total, 0);
  // Given back in the same second, this second's stay this second's; in the next, all are earlier.
  b.give_back_admitted_at(a, 103);
  a = b.take_admitted_at(103);
  EXPECT_EQ(a.total, 3);
  EXPECT_EQ(a.before, 2);
  b.note_admitted_at(104);
  b.give_back_admitted_at(a, 105);
  a = b.take_admitted_at(105);
  EXPECT_EQ(a.total, 4);
  EXPECT_EQ(a.before, 4);
}

}  // namespace
}  // namespace tollgate::proxy

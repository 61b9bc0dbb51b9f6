// The console's parts: the history ring, the quantile estimate, the refusal ring, the embedded page
// and its endpoints (tests/browser drives the page itself in Chromium).
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/config_text.hpp"
#include "support/manual_clock.hpp"
#include "tollgate/admin/admin_api.hpp"
#include "tollgate/admin/console_assets.hpp"
#include "tollgate/admin/history.hpp"
#include "tollgate/proxy/refusals.hpp"
#include "tollgate/store/key_schema.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::admin {
namespace {

using nlohmann::json;
using proxy::Outcome;

constexpr auto row = &testing::rule_row;  // an enabled interface rule

TEST(HistogramQuantile, InterpolatesInsideTheBucketLikePrometheus) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> bounds{10, 20, 40, inf};
  // 10 in (0,10], 10 in (10,20], 0 in (20,40], 0 above.
  const std::vector<double> cum{10, 20, 20, 20};
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.5, bounds, cum), 10.0);
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.25, bounds, cum), 5.0);
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.75, bounds, cum), 15.0);
  EXPECT_DOUBLE_EQ(*histogram_quantile(1.0, bounds, cum), 20.0);
  // Past the last finite bound: that bound, never infinity.
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.99, bounds, {0, 0, 1, 100}), 40.0);
  EXPECT_FALSE(histogram_quantile(0.5, bounds, {0, 0, 0, 0}).has_value());
  EXPECT_FALSE(histogram_quantile(0.5, bounds, {1, 2}).has_value());  // shapes disagree
}

struct HistoryFixture {
  config::SnapshotHolder snaps;
  proxy::Metrics metrics;
  History history{metrics, snaps};
  explicit HistoryFixture(std::vector<config::RawRow> rows = {row(1, "/a", 5), row(2, "/b", 10)}) {
    snaps.set(config::make_snapshot(config::validate_rows(std::move(rows)), 1, "test"));
  }
};

json bucket_of(const json& h, const std::string& name) {
  for (const auto& b : h["buckets"])
    if (b["bucket"] == name) return b;
  return nullptr;
}

TEST(History, SamplesAreTheCountsOfEachSecond) {
  HistoryFixture f;
  proxy::BucketMetrics& a = f.metrics.bucket("/a");
  // Counted before the first sample: history starts from here, no spike of old totals.
  for (int i = 0; i < 50; ++i) a.count(Outcome::forwarded);
  f.history.sample(1000);
  for (int i = 0; i < 3; ++i) a.count(Outcome::forwarded);
  for (int i = 0; i < 2; ++i) a.count(Outcome::delayed);
  a.count(Outcome::rejected);
  a.held.Set(4);
  a.wait.observe_us(100'000);  // 100 ms
  a.wait.observe_us(100'000);
  f.history.sample(2000);
  f.history.sample(3000);

  const json h = f.history.to_json(std::nullopt);
  EXPECT_EQ(h["seq"], 3);
  EXPECT_EQ(h["from_seq"], 0);
  EXPECT_EQ(h["at_ms"], json::array({1000, 2000, 3000}));
  const json b = bucket_of(h, "/a");
  ASSERT_TRUE(b.is_object()) << h.dump();
  EXPECT_EQ(b["forwarded"], json::array({0, 3, 0}));
  EXPECT_EQ(b["delayed"], json::array({0, 2, 0}));
  EXPECT_EQ(b["rejected"], json::array({0, 1, 0}));
  EXPECT_EQ(b["held"], json::array({0, 4, 4}));
  // Both waits fell in (50 ms, 100 ms]: the estimate lies inside that bucket.
  EXPECT_GT(b["wait_p50_ms"][1].get<double>(), 50.0);
  EXPECT_LE(b["wait_p50_ms"][1].get<double>(), 100.0);
  EXPECT_EQ(b["wait_p50_ms"][2], 0);  // nothing waited in the third second
  EXPECT_TRUE(bucket_of(h, "/b").is_object());

  // Only what came after a known sample.
  const json since = f.history.to_json(1);
  EXPECT_EQ(since["from_seq"], 2);
  EXPECT_EQ(bucket_of(since, "/a")["forwarded"], json::array({0}));
  EXPECT_EQ(f.history.to_json(2)["at_ms"].size(), 0u);
  // A sample number from the future (or another process): nothing, not everything.
  EXPECT_EQ(f.history.to_json(std::numeric_limits<std::uint64_t>::max())["at_ms"].size(), 0u);
  EXPECT_EQ(f.history.to_json(7)["from_seq"], 3);
}

TEST(History, TheRingKeepsFiveMinutesPerBucket) {
  HistoryFixture f;
  proxy::BucketMetrics& a = f.metrics.bucket("/a");
  for (std::int64_t s = 0; s < static_cast<std::int64_t>(History::kSeconds) + 10; ++s) {
    for (std::int64_t i = 0; i < s % 7; ++i) a.count(Outcome::forwarded);
    f.history.sample(s * 1000);
  }
  const json h = f.history.to_json(std::nullopt);
  EXPECT_EQ(h["from_seq"], 10);
  ASSERT_EQ(h["at_ms"].size(), History::kSeconds);
  EXPECT_EQ(h["at_ms"][0], 10'000);
  const json fwd = bucket_of(h, "/a")["forwarded"];
  ASSERT_EQ(fwd.size(), History::kSeconds);
  for (std::size_t i = 0; i < fwd.size(); ++i) EXPECT_EQ(fwd[i], static_cast<std::int64_t>((i + 10) % 7)) << i;
  // A `since` older than the ring gives what the ring has.
  EXPECT_EQ(f.history.to_json(0)["from_seq"], 10);
}

TEST(History, BucketsFollowTheRules) {
  HistoryFixture f;
  f.history.sample(1000);
  f.snaps.set(config::make_snapshot(config::validate_rows({row(1, "/a", 5), row(3, "/c", 1)}), 2, "test"));
  f.metrics.bucket("/c").count(Outcome::rejected);  // before its first sample: not in its history
  f.history.sample(2000);
  f.metrics.bucket("/c").count(Outcome::rejected);
  f.history.sample(3000);
  const json h = f.history.to_json(std::nullopt);
  EXPECT_TRUE(bucket_of(h, "/b").is_null());  // its rule is gone
  // A bucket newer than the ring's start: null before its first sample.
  EXPECT_EQ(bucket_of(h, "/c")["rejected"], json::parse("[null, 0, 1]"));
  const auto w = f.history.window("/c");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->last.rejected, 1);
  EXPECT_EQ(w->sum.rejected, 1);
  EXPECT_EQ(w->rejected_10s, 1u);
  EXPECT_FALSE(f.history.window("/b"));
}

TEST(History, TheWindowCoversTheLastMinute) {
  HistoryFixture f;
  proxy::BucketMetrics& a = f.metrics.bucket("/a");
  f.history.sample(0);
  for (int s = 1; s <= 100; ++s) {
    a.count(Outcome::rejected);
    // 2 ms waits for the first 40 seconds, 400 ms ones after: the minute sees only the latter.
    a.wait.observe_us(s <= 40 ? 2'000 : 400'000);
    f.history.sample(s * 1000);
  }
  const auto w = f.history.window("/a");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->sum.rejected, static_cast<float>(History::kWindow));
  EXPECT_EQ(w->rejected_10s, 10u);
  ASSERT_TRUE(w->wait_p50_ms);
  EXPECT_GT(*w->wait_p50_ms, 250.0);
  EXPECT_LE(*w->wait_p99_ms, 500.0);
}

// A bucket keeps its ring only while one of its samples in the ring is not zero: quiet rules cost
// little (thousands of rules, most idle), and a bucket that wakes up again counts exactly as before.
TEST(History, AQuietBucketKeepsNoRingAndWakesUpExact) {
  HistoryFixture f;
  proxy::BucketMetrics& a = f.metrics.bucket("/a");
  f.history.sample(0);
  EXPECT_EQ(f.history.busy_buckets(), 0u);  // neither rule has seen a request
  a.count(Outcome::delayed);
  a.wait.observe_us(100'000);
  f.history.sample(1000);
  EXPECT_EQ(f.history.busy_buckets(), 1u);
  // Seconds 2 to 300: quiet, and the busy second is still in the ring.
  for (std::int64_t s = 2; s <= static_cast<std::int64_t>(History::kSeconds); ++s) f.history.sample(s * 1000);
  EXPECT_EQ(f.history.busy_buckets(), 1u);
  json h = f.history.to_json(std::nullopt);
  EXPECT_EQ(h["from_seq"], 1);
  EXPECT_EQ(bucket_of(h, "/a")["delayed"][0], 1);
  // One more: the busy second has left the ring, and so has the ring.
  f.history.sample(301'000);
  EXPECT_EQ(f.history.busy_buckets(), 0u);
  h = f.history.to_json(std::nullopt);
  const json quiet = bucket_of(h, "/a");  // named: a range-for over a temporary's member dangles
  for (const auto& v : quiet["delayed"]) EXPECT_EQ(v, 0);
  auto w = f.history.window("/a");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->sum.delayed, 0);
  EXPECT_FALSE(w->wait_p50_ms);
  // Awake again: the second's own counts and waits (in the (1 ms, 5 ms] bucket), not the old
  // 100 ms one.
  a.count(Outcome::delayed);
  a.count(Outcome::delayed);
  a.wait.observe_us(2'000);
  a.wait.observe_us(2'000);
  f.history.sample(302'000);
  EXPECT_EQ(f.history.busy_buckets(), 1u);
  h = f.history.to_json(301);
  EXPECT_EQ(bucket_of(h, "/a")["delayed"], json::array({2}));
  EXPECT_GT(bucket_of(h, "/a")["wait_p50_ms"][0].get<double>(), 1.0);
  EXPECT_LE(bucket_of(h, "/a")["wait_p99_ms"][0].get<double>(), 5.0);
  w = f.history.window("/a");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->last.delayed, 2);
  EXPECT_EQ(w->sum.delayed, 2);
  ASSERT_TRUE(w->wait_p50_ms && w->wait_p99_ms);
  EXPECT_GT(*w->wait_p50_ms, 1.0);
  EXPECT_LE(*w->wait_p99_ms, 5.0);
  // A bucket that only holds requests (none answered yet) is busy too.
  f.metrics.bucket("/b").held.Set(3);
  f.history.sample(303'000);
  EXPECT_EQ(f.history.busy_buckets(), 2u);
  EXPECT_EQ(bucket_of(f.history.to_json(302), "/b")["held"], json::array({3}));
}

TEST(History, UpstreamLatencyAndErrorsOverTheWindow) {
  HistoryFixture f;
  proxy::UpstreamMetrics& u = f.metrics.upstream("ibe");
  u.count(proxy::UpstreamError::timeout);  // before the first sample: in the totals only
  f.history.sample(0);
  u.latency.observe_us(20'000);
  u.latency.observe_us(20'000);
  u.count(proxy::UpstreamError::reset);
  f.history.sample(1000);
  const auto ups = f.history.upstreams();
  ASSERT_EQ(ups.count("ibe"), 1u);
  const auto& w = ups.at("ibe");
  EXPECT_EQ(w.responses, 2);
  EXPECT_GT(*w.p50_ms, 10.0);
  EXPECT_LE(*w.p99_ms, 25.0);
  EXPECT_EQ(w.errors[static_cast<std::size_t>(proxy::UpstreamError::reset)], 1);
  EXPECT_EQ(w.errors[static_cast<std::size_t>(proxy::UpstreamError::timeout)], 0);
  EXPECT_EQ(w.errors_total[static_cast<std::size_t>(proxy::UpstreamError::timeout)], 1);
}

TEST(RefusalLog, KeepsTheNewestFirstAndCountsAll) {
  proxy::RefusalLog log(3);
  for (int i = 0; i < 5; ++i) {
    proxy::Refusal r;
    r.at_ms = i;
    log.record(r);
  }
  EXPECT_EQ(log.total(), 5u);
  const auto recent = log.recent(10);
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].at_ms, 4);
  EXPECT_EQ(recent[2].at_ms, 2);
  EXPECT_EQ(log.recent(1).size(), 1u);
}

TEST(RefusalLog, KeyShapeNeverShowsTheWholeKey) {
  EXPECT_EQ(proxy::key_shape(""), "");
  EXPECT_EQ(proxy::key_shape("ab"), "ab(2)");
  EXPECT_EQ(proxy::key_shape("abc"), "abc(3)");
  EXPECT_EQ(proxy::key_shape("203.0.113.7"), "203\u2026(11)");
  // Three characters, not three bytes: a multi-byte character is never cut.
  EXPECT_EQ(proxy::key_shape("\xC3\xA9\xC3\xA9\xC3\xA9xyz"), "\xC3\xA9\xC3\xA9\xC3\xA9\u2026(9)");
}

TEST(RefusalLog, ARefusalNamesItsRulePolicyAndKeyShape) {
  config::RawRow r = row(7, "/login", 2);
  r.key_by = "header:X-Api-Key";
  auto snap = config::make_snapshot(config::validate_rows({r}), 1, "test");
  ASSERT_EQ(snap->rules.size(), 1u);
  proxy::Plan plan;
  plan.rule = &snap->rules[0];
  plan.keyed_bucket = store::keyed_bucket_name(7, "key-0123456789");
  proxy::Verdict v;
  v.bound = "/login";
  v.retry_after_s = 2;
  const std::string long_path = "/ibe/login/" + std::string(500, 'x');
  const proxy::Refusal got = proxy::refusal_of(plan, v, long_path, 429, 42);
  EXPECT_EQ(got.at_ms, 42);
  EXPECT_EQ(got.status, 429);
  EXPECT_EQ(got.bucket, "/login");
  EXPECT_EQ(got.policy, "/login");
  EXPECT_EQ(got.key_by, "header:X-Api-Key");
  EXPECT_EQ(got.key_shape, "key\u2026(14)");
  EXPECT_EQ(got.retry_after_s, 2);
  EXPECT_EQ(got.path.size(), proxy::RefusalLog::kMaxPath);
}

TEST(ConsoleAssets, ThePageLoadsOnlyItsOwnFilesAndNoInlineCode) {
  const auto page = console_asset("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(console_asset("/ui/")->body, page->body);
  EXPECT_EQ(console_asset("/ui")->body, page->body);
  const std::string html(page->body);
  // Every script has a src on this origin and no body; no <style>, no style="" and no on*="":
  // the Content-Security-Policy would block them.
  const std::regex script("<script([^>]*)>([^<]*)</script>", std::regex::icase);
  int scripts = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), script); it != std::sregex_iterator(); ++it) {
    ++scripts;
    EXPECT_NE((*it)[1].str().find("src=\"/ui/"), std::string::npos) << (*it)[0];
    EXPECT_EQ((*it)[2].str(), "") << (*it)[0];
  }
  EXPECT_EQ(scripts, 1);
  EXPECT_FALSE(std::regex_search(html, std::regex("<style|\\sstyle=|\\son[a-z]+=|https?://", std::regex::icase)));
  EXPECT_EQ(console_asset("/ui/favicon.svg")->content_type, "image/svg+xml");
  // Every file the page names is served.
  const std::regex ref("(?:src|href)=\"(/ui/[^\"]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(console_asset((*it)[1].str())) << (*it)[1];
  EXPECT_EQ(console_asset("/ui/console.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(console_asset("/ui/console.css")->content_type, "text/css; charset=utf-8");
  EXPECT_FALSE(console_asset("/ui/../etc/passwd"));
}

struct ApiFixture {
  testing::ManualClock clock;
  config::SnapshotHolder snaps;
  config::SwitchState sw{config::SwitchMode::enforce, "file"};
  store::LocalStore store{clock};
  proxy::Metrics metrics;
  History history{metrics, snaps};
  proxy::RefusalLog refusals;
  AdminApi api{{snaps, sw, store, metrics, "t", "", nullptr, nullptr, nullptr, nullptr, &history, &refusals}};
  ApiFixture() { snaps.set(config::make_snapshot(config::validate_rows({row(1, "/a", 5), row(2, "/b", 10)}), 4, "test")); }
  SimpleResponse get(std::string target) { return api.handle({"GET", std::move(target), "", "", ""}); }
};

TEST(ConsoleApi, ServesThePageAndItsFiles) {
  ApiFixture f;
  const auto page = f.get("/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(f.get("/ui/console.js").status, 200);
  EXPECT_EQ(f.get("/ui/nope.js").status, 404);
  EXPECT_EQ(f.api.handle({"POST", "/", "", "", ""}).status, 405);
}

TEST(ConsoleApi, OverviewShowsBucketsStoreSwitchAndSaturation) {
  ApiFixture f;
  // /a: seven permits at once on a 5/s bucket: 0.4 s of debt, past half of its 0.5 s window.
  for (int i = 0; i < 7; ++i) f.store.decide({{"/a", f.snaps.get()->rules[0].params}, {}, {}, 1, 1'000'000});
  f.history.sample(0);
  f.metrics.bucket("/b").count(Outcome::rejected);
  f.history.sample(1000);
  const auto res = f.get("/admin/overview");
  ASSERT_EQ(res.status, 200) << res.body;
  const json o = json::parse(res.body);
  EXPECT_EQ(o["switch"]["state"], "enforce");
  EXPECT_EQ(o["store"]["name"], "local");
  EXPECT_EQ(o["store"]["up"], true);
  EXPECT_EQ(o["config"]["version"], 4);
  EXPECT_EQ(o["history_seq"], 2);
  ASSERT_EQ(o["buckets"].size(), 2u);
  // Busiest first: /b refused a request, /a's permits went through the store alone.
  const json b = o["buckets"][0], a = o["buckets"][1];
  EXPECT_EQ(b["bucket"], "/b");
  EXPECT_EQ(a["bucket"], "/a");
  EXPECT_EQ(a["rateLimit"], 5);
  EXPECT_DOUBLE_EQ(a["debt_s"].get<double>(), 0.4);
  EXPECT_EQ(a["saturated"], true);       // by its queue
  EXPECT_EQ(b["saturated"], true);       // by a refusal in the last ten seconds
  EXPECT_EQ(b["last_second"]["rejected"], 1);
  EXPECT_DOUBLE_EQ(b["debt_s"].get<double>(), 0.0);
}

TEST(ConsoleApi, HistoryAndRefusalEndpoints) {
  ApiFixture f;
  f.history.sample(0);
  f.history.sample(1000);
  EXPECT_EQ(json::parse(f.get("/admin/history").body)["at_ms"].size(), 2u);
  EXPECT_EQ(json::parse(f.get("/admin/history?since=0").body)["at_ms"].size(), 1u);
  EXPECT_EQ(f.get("/admin/history?since=x").status, 400);
  EXPECT_EQ(f.get("/admin/history?since=-1").status, 400);
  proxy::Refusal r;
  r.path = "/ibe/a";
  r.bucket = "/a";
  r.policy = "/a";
  f.refusals.record(r);
  f.refusals.record(r);
  const json j = json::parse(f.get("/admin/refusals?limit=1").body);
  EXPECT_EQ(j["total"], 2);
  ASSERT_EQ(j["refusals"].size(), 1u);
  EXPECT_EQ(j["refusals"][0]["path"], "/ibe/a");
  EXPECT_FALSE(j["refusals"][0].contains("key_shape"));
  EXPECT_EQ(f.get("/admin/refusals?limit=z").status, 400);
  EXPECT_EQ(f.api.handle({"PUT", "/admin/history", "", "", ""}).status, 405);
}

}  // namespace
}  // namespace tollgate::admin

// What guards the admin listener: the Host check (DNS rebinding), the failed-token budget and its
// lock-outs, the bounded overview and history answers, and run.sh's admin token.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "support/config_text.hpp"
#include "support/manual_clock.hpp"
#include "tollgate/admin/admin_api.hpp"
#include "tollgate/admin/history.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::admin {
namespace {

using nlohmann::json;
using proxy::Outcome;

// ---- Host -----------------------------------------------------------------------------------------

TEST(AdminHost, ItsOwnAddressAndLocalhostAreAnswered) {
  const std::vector<std::string> none;
  for (const char* h : {"127.0.0.1", "127.0.0.1:9901", "localhost", "LocalHost:9901", "localhost.", "[::1]", "[::1]:9901",
                        "127.0.0.2:80", "10.1.2.3", "10.1.2.3:9901"})
    EXPECT_TRUE(admin_host_allowed(h, "10.1.2.3", none)) << h;
  // An IPv6 listener's own address, in brackets; and a dual-stack socket's IPv4-mapped address.
  EXPECT_TRUE(admin_host_allowed("[fd00::5]:9901", "fd00::5", none));
  EXPECT_TRUE(admin_host_allowed("10.1.2.3", "::ffff:10.1.2.3", none));
  // HTTP/1.0 without Host (the listener refuses HTTP/1.1 without one).
  EXPECT_TRUE(admin_host_allowed("", "10.1.2.3", none));
}

TEST(AdminHost, AnyOtherNameIsRefusedUnlessListed) {
  const std::vector<std::string> none;
  for (const char* h : {"evil.example", "evil.example:9901", "10.1.2.4", "[fd00::6]", "localhost.evil.example",
                        "127.0.0.1.evil.example", "[::1", "::1", "127.0.0.1:x", "127.0.0.1:99999999", ":9901",
                        "gateway", "0x7f.1", "127.1"})
    EXPECT_FALSE(admin_host_allowed(h, "10.1.2.3", none)) << h;
  const std::vector<std::string> listed{"gateway", "Admin.Internal.Example."};
  EXPECT_TRUE(admin_host_allowed("gateway:9901", "10.1.2.3", listed));
  EXPECT_TRUE(admin_host_allowed("admin.internal.example", "10.1.2.3", listed));
  EXPECT_FALSE(admin_host_allowed("gateway.evil.example", "10.1.2.3", listed));
  EXPECT_TRUE(admin_host_allowed("anything.example", "10.1.2.3", {"*"}));
}

// ---- the failed-token budget ----------------------------------------------------------------------

constexpr limiter::Micros kS = 1'000'000;

TEST(AuthBudget, APeerIsLockedOutOnceItsBudgetIsSpentAndTwiceAsLongEachTime) {
  AuthBudget b;  // 1/s per peer, burst 5; lock-outs 1 s, 2 s, 4 s ...
  limiter::Micros now = 100 * kS;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(b.admit("10.0.0.9", now).verdict, AuthBudget::Verdict::check);
    EXPECT_EQ(b.failed("10.0.0.9", now), 0);
  }
  EXPECT_EQ(b.failed("10.0.0.9", now), 1 * kS);  // the fifth at once: locked out for 1 s
  auto a = b.admit("10.0.0.9", now + kS / 2);
  EXPECT_EQ(a.verdict, AuthBudget::Verdict::locked_out);
  EXPECT_EQ(a.retry_after_us, kS / 2);
  // Another peer is not held up.
  EXPECT_EQ(b.admit("10.0.0.8", now).verdict, AuthBudget::Verdict::check);
  now += kS;
  ASSERT_EQ(b.admit("10.0.0.9", now).verdict, AuthBudget::Verdict::check);
  EXPECT_EQ(b.failed("10.0.0.9", now), 2 * kS);  // one token came back; spent: 2 s
  now += 2 * kS;
  EXPECT_EQ(b.failed("10.0.0.9", now), 4 * kS);
  now += 4 * kS;
  EXPECT_EQ(b.failed("10.0.0.9", now), 8 * kS);
  // Capped at five minutes.
  for (int i = 0; i < 20; ++i) {
    now += 301 * kS;
    b.failed("10.0.0.9", now);  // quiet for longer than the cap: starts over at 1 s
  }
  now += 1 * kS;
  for (int i = 0; i < 12; ++i) {
    const limiter::Micros lock = b.failed("10.0.0.9", now);
    EXPECT_LE(lock, 300 * kS);
    now += lock;
  }
  // A right token clears it.
  b.succeeded("10.0.0.9", now);
  EXPECT_EQ(b.admit("10.0.0.9", now).verdict, AuthBudget::Verdict::check);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.failed("10.0.0.9", now), 0);
}

TEST(AuthBudget, ASpentGlobalBudgetRefusesNewPeersButNotOneSignedIn) {
  AuthBudget b;  // 5/s for everyone, burst 10
  const limiter::Micros now = 100 * kS;
  b.succeeded("10.0.0.1", now);  // the operator's console
  for (int i = 0; i < 10; ++i) {
    const std::string peer = "10.9.0." + std::to_string(i);
    ASSERT_EQ(b.admit(peer, now).verdict, AuthBudget::Verdict::check) << i;
    b.failed(peer, now);
  }
  const auto a = b.admit("10.9.1.1", now);
  EXPECT_EQ(a.verdict, AuthBudget::Verdict::throttled);
  EXPECT_EQ(a.retry_after_us, kS / 5);
  EXPECT_EQ(b.admit("10.0.0.1", now).verdict, AuthBudget::Verdict::check);
  EXPECT_EQ(b.admit("10.9.1.1", now + kS / 5).verdict, AuthBudget::Verdict::check);  // refilled
}

struct ApiFixture {
  testing::ManualClock clock;
  config::SnapshotHolder snaps;
  config::SwitchState sw{config::SwitchMode::enforce, "file"};
  store::LocalStore store{clock};
  proxy::Metrics metrics;
  std::unique_ptr<History> history;
  std::unique_ptr<AdminApi> api;
  explicit ApiFixture(std::vector<config::RawRow> rows) {
    snaps.set(config::make_snapshot(config::validate_rows(std::move(rows)), 1, "test"));
    history = std::make_unique<History>(metrics, snaps);
    AdminDeps deps{snaps, sw, store, metrics, "s3cret", "", nullptr, nullptr, nullptr, nullptr, history.get()};
    deps.clock = &clock;
    api = std::make_unique<AdminApi>(std::move(deps));
  }
  SimpleResponse put(const std::string& token, const std::string& peer) {
    return api->handle({"PUT", "/admin/switch", "Bearer " + token, R"({"state":"shadow"})", peer});
  }
  SimpleResponse get(std::string target) { return api->handle({"GET", std::move(target), "", "", "127.0.0.1"}); }
};

constexpr auto row = &testing::rule_row;  // an enabled interface rule

std::string header(const SimpleResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(AdminApiAuth, GuessingIsLockedOutCountedAndAnswered429WithRetryAfter) {
  ApiFixture f({row(1, "/a", 5)});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f.put("guess" + std::to_string(i), "10.0.0.9").status, 401) << i;
  const SimpleResponse locked = f.put("guess5", "10.0.0.9");
  EXPECT_EQ(locked.status, 429);
  EXPECT_EQ(json::parse(locked.body)["error"], "auth_locked_out");
  EXPECT_EQ(header(locked, "Retry-After"), "1");
  // While locked out, not even the right token is checked from that peer...
  EXPECT_EQ(f.put("s3cret", "10.0.0.9").status, 429);
  EXPECT_EQ(f.sw.mode(), config::SwitchMode::enforce);
  // ... but another peer's right token works.
  EXPECT_EQ(f.put("s3cret", "10.0.0.7").status, 200);
  f.clock.advance(kS);
  EXPECT_EQ(f.put("s3cret", "10.0.0.9").status, 200);
  const std::string m = f.get("/metrics").body;
  EXPECT_NE(m.find("\ntollgate_admin_auth_failures_total 5\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\ntollgate_admin_auth_lockouts_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("tollgate_admin_auth_throttled_total{reason=\"locked_out\"} 2\n"), std::string::npos) << m;
}

TEST(AdminApiAuth, ManyGuessingPeersHitTheGlobalBudget) {
  ApiFixture f({row(1, "/a", 5)});
  EXPECT_EQ(f.put("s3cret", "10.0.0.1").status, 200);  // signed in before the run
  int refused = 0, checked = 0;
  for (int i = 0; i < 50; ++i) {
    const int s = f.put("guess", "10.9.0." + std::to_string(i)).status;
    refused += s == 429;
    checked += s == 401;
  }
  EXPECT_EQ(checked, 10);  // the global burst; the clock stood still
  EXPECT_EQ(refused, 40);
  EXPECT_EQ(f.put("s3cret", "10.0.0.1").status, 200);
  const SimpleResponse fresh = f.put("s3cret", "10.0.0.2");
  EXPECT_EQ(fresh.status, 429);
  EXPECT_EQ(json::parse(fresh.body)["error"], "auth_throttled");
}

// ---- overview and history at many rules -----------------------------------------------------------

std::vector<config::RawRow> many_rows(int n) {
  std::vector<config::RawRow> rows;
  rows.reserve(static_cast<std::size_t>(n));
  for (int i = 1; i <= n; ++i) rows.push_back(row(i, "/svc/interface-" + std::to_string(i), 10));
  return rows;
}

TEST(ConsolePaging, OverviewAndHistoryListTheBusiestAndSayWhatTheyLeftOut) {
  ApiFixture f(many_rows(200));
  f.history->sample(0);
  for (int i = 0; i < 30; ++i) f.metrics.bucket("/svc/interface-7").count(Outcome::forwarded);
  for (int i = 0; i < 3; ++i) f.metrics.bucket("/svc/interface-150").count(Outcome::rejected);
  f.history->sample(1000);

  const json o = json::parse(f.get("/admin/overview").body);
  EXPECT_EQ(o["buckets_total"], 200);
  EXPECT_EQ(o["buckets_matched"], 200);
  EXPECT_EQ(o["buckets_omitted"], 150);
  ASSERT_EQ(o["buckets"].size(), AdminApi::kOverviewTop);
  EXPECT_EQ(o["buckets"][0]["bucket"], "/svc/interface-7");
  EXPECT_EQ(o["buckets"][1]["bucket"], "/svc/interface-150");

  const json top = json::parse(f.get("/admin/overview?top=2").body);
  ASSERT_EQ(top["buckets"].size(), 2u);
  EXPECT_EQ(top["buckets_omitted"], 198);

  // A search: a substring of the bucket (or channel), any case; %-escapes decoded.
  const json q = json::parse(f.get("/admin/overview?q=Interface-15").body);
  EXPECT_EQ(q["buckets_matched"], 11);  // 15 and 150..159
  EXPECT_EQ(q["buckets"][0]["bucket"], "/svc/interface-150");
  EXPECT_EQ(json::parse(f.get("/admin/overview?q=%2Fsvc%2Finterface-199").body)["buckets_matched"], 1);

  const json one = json::parse(f.get("/admin/overview?bucket=%2Fsvc%2Finterface-42&bucket=/svc/interface-43").body);
  ASSERT_EQ(one["buckets"].size(), 2u);
  EXPECT_EQ(one["buckets_omitted"], 0);

  const json h = json::parse(f.get("/admin/history").body);
  ASSERT_EQ(h["buckets"].size(), AdminApi::kHistoryTop);
  EXPECT_EQ(h["buckets"][0]["bucket"], "/svc/interface-7");
  EXPECT_EQ(h["buckets"][0]["forwarded"].back(), 30);
  EXPECT_EQ(h["buckets_omitted"], 180);
  const json hb = json::parse(f.get("/admin/history?since=0&bucket=/svc/interface-150").body);
  ASSERT_EQ(hb["buckets"].size(), 1u);
  EXPECT_EQ(hb["buckets"][0]["rejected"], json::array({3}));

  EXPECT_EQ(f.get("/admin/overview?top=0").status, 400);
  EXPECT_EQ(f.get("/admin/overview?top=x").status, 400);
  EXPECT_EQ(f.get("/admin/history?q=%zz").status, 400);
}

// At 20,000 rules with the ring full, the answers the console polls stay small.
TEST(ConsolePaging, AnswersStaySmallAtTwentyThousandRules) {
  ApiFixture f(many_rows(20'000));
  for (int s = 0; s < static_cast<int>(History::kSeconds); ++s) {
    // A few hundred busy buckets, a different handful each second.
    for (int k = 0; k < 5; ++k) f.metrics.bucket("/svc/interface-" + std::to_string(1 + (s * 7 + k * 131) % 20'000)).count(Outcome::forwarded);
    f.history->sample(s * 1000);
  }
  ASSERT_GT(f.history->busy_buckets(), 500u);
  const auto t0 = std::chrono::steady_clock::now();
  const SimpleResponse o = f.get("/admin/overview");
  const auto t1 = std::chrono::steady_clock::now();
  const SimpleResponse h = f.get("/admin/history");
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_EQ(o.status, 200);
  ASSERT_EQ(h.status, 200);
  EXPECT_LT(o.body.size(), 200'000u);
  EXPECT_LT(h.body.size(), 200'000u);
  EXPECT_EQ(json::parse(o.body)["buckets_omitted"], 20'000 - static_cast<int>(AdminApi::kOverviewTop));
  // The figures, for the record (timing is not asserted here: bench/ is where time is measured).
  std::printf("20000 rules, %zu busy: overview %zu bytes in %lld ms, history %zu bytes in %lld ms\n",
              f.history->busy_buckets(), o.body.size(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count()),
              h.body.size(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(t2 - t1).count()));
}

// ---- run.sh's admin token --------------------------------------------------------------------------

std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return out;
  std::array<char, 256> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  ::pclose(p);
  return out;
}

TEST(RunScript, MakesARandomAdminTokenWhenNoneIsSetAndKeepsAGivenOne) {
  std::ifstream in(TOLLGATE_SOURCE_DIR "/scripts/run.sh");
  std::stringstream text;
  text << in.rdbuf();
  const std::string script = text.str();
  EXPECT_EQ(script.find("change-me"), std::string::npos);
  // The token part alone: from its comment to the export.
  const auto from = script.find("# The admin token:");
  const auto to = script.find("export TOLLGATE_ADMIN_TOKEN\n");
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream part(dir + "/token_part.sh");
    part << script.substr(from, to - from) << "export TOLLGATE_ADMIN_TOKEN\nprintf '%s' \"$TOLLGATE_ADMIN_TOKEN\"\n";
  }
  const std::string a = run("env -u TOLLGATE_ADMIN_TOKEN bash -eu " + dir + "/token_part.sh");
  const std::string b = run("env -u TOLLGATE_ADMIN_TOKEN bash -eu " + dir + "/token_part.sh");
  EXPECT_TRUE(std::regex_match(a, std::regex("[0-9a-f]{48}"))) << a;
  EXPECT_NE(a, b);
  EXPECT_EQ(run("TOLLGATE_ADMIN_TOKEN=mine bash -eu " + dir + "/token_part.sh"), "mine");
}

}  // namespace
}  // namespace tollgate::admin

// Upstreams named in DNS and upstreams of several addresses, end to end: the real gateway, real
// mock upstreams bound to 127.0.0.2, 127.0.0.3 and 127.0.0.4 (one port), and a real DNS server
// (dnsmasq, support/dns.hpp) whose answers the tests change while traffic flows.
//
//   - a name that does not resolve yet: the gateway starts, answers 503 upstream_unresolved and
//     says so in /readyz, then serves once the name resolves;
//   - a name that moves to another address: traffic follows within the refresh period, no request
//     fails, and pooled connections to the old address are not reused;
//   - the DNS server gone: the last good addresses are kept, the failures counted;
//   - an endpoint killed under load: connect failures go to another endpoint on the same permit,
//     the endpoint is ejected and comes back once it is up again; never more than max_percent
//     ejected; a dead endpoint never costs a permit.
//
// Timing: every bound is the configured period plus a tolerance for a loaded two-core machine,
// checked by polling with a deadline or on the mocks' arrival times (the same monotonic clock as
// this process), never by a sleep that hopes something happened.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/dns.hpp"
#include "support/load.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kName = "supplier.test";
constexpr const char* kPath = "/ibe/booking";  // no rule: never limited
constexpr int kRefreshMs = 1000;               // upstreams.<name>.dns_refresh_ms in these tests
// Allowance on top of a configured period for a loaded machine (and a sanitizer build).
constexpr std::chrono::milliseconds kTolerance = 4000ms;
// From the DNS server answering a change to the gateway acting on it: one refresh period (the
// records' TTL, 1 s, is not shorter) plus the tolerance.
constexpr std::chrono::milliseconds kFollowBound = std::chrono::milliseconds(kRefreshMs) + kTolerance;
constexpr int kClients = 4;

std::string url(const std::string& host, int port) { return "http://" + host + ":" + std::to_string(port); }

std::string endpoint(const std::string& host, int port) { return host + ":" + std::to_string(port); }

// The gateway's problem code: its problem bodies carry it as "error"; "code" is accepted too.
bool has_problem_code(const std::string& body, const std::string& code) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return false;
  for (const char* field : {"error", "code"})
    if (j.contains(field) && j[field] == code) return true;
  return false;
}

// Mock upstreams on these loopback addresses, all on one port (a free one, picked by the first);
// empty when no port could be shared in five tries.
std::vector<std::unique_ptr<MockUpstream>> mocks_on_one_port(const std::vector<std::string>& hosts) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::vector<std::unique_ptr<MockUpstream>> out;
    out.push_back(std::make_unique<MockUpstream>(hosts[0], 0));
    bool ok = out[0]->port > 0;
    for (std::size_t i = 1; ok && i < hosts.size(); ++i) {
      out.push_back(std::make_unique<MockUpstream>(hosts[i], out[0]->port));
      ok = out.back()->port == out[0]->port;
    }
    if (ok) return out;
  }
  return {};
}

// When `mock` received `path` (monotonic microseconds, sorted).
std::vector<std::int64_t> arrivals(const MockUpstream& mock, const std::string& path) {
  const json s = mock.stats();
  if (!s["paths"].contains(path)) return {};
  auto v = s["paths"][path]["arrivals_us"].get<std::vector<std::int64_t>>();
  std::sort(v.begin(), v.end());
  return v;
}

long count_after(const std::vector<std::int64_t>& sorted_us, std::int64_t t_us) {
  return std::distance(std::upper_bound(sorted_us.begin(), sorted_us.end(), t_us), sorted_us.end());
}

std::int64_t us(std::chrono::milliseconds d) { return static_cast<std::int64_t>(d.count()) * 1000; }

double series_or_zero(const GatewayProcess& gw, const std::string& name, const std::map<std::string, std::string>& labels) {
  return metric_series(gw, name, labels).value_or(0);
}

// /readyz (public): its status and JSON.
std::pair<int, json> readyz(const GatewayProcess& gw) {
  const HttpResponse r = http_get(gw.admin_port, "/readyz");
  return {r.status, json::parse(r.body, nullptr, false)};
}

bool lists_unresolved(const json& ready, const std::string& upstream) {
  if (!ready.is_object() || !ready.contains("unresolved_upstreams") || !ready["unresolved_upstreams"].is_array())
    return false;
  const json& a = ready["unresolved_upstreams"];
  return std::find(a.begin(), a.end(), upstream) != a.end();
}

// When an endpoint was killed: the signal sent, and the process gone (its sockets closed).
struct KillWindow {
  std::int64_t kill_us = 0;
  std::int64_t dead_us = 0;
};

// Every answer of a load is 200, except that requests in flight when an endpoint was killed (sent
// before it was gone, answered after the signal) may get 502: the gateway had written them to that
// endpoint already, and only connect failures go to another endpoint. At most one per client.
::testing::AssertionResult every_answer_ok(const std::vector<TimedAnswer>& answers, int clients,
                                           std::optional<KillWindow> kill = std::nullopt) {
  int in_flight_failures = 0;
  std::vector<std::string> bad;
  for (const auto& a : answers) {
    if (a.status == 200) continue;
    if (kill && a.status == 502 && a.sent_us < kill->dead_us && a.done_us > kill->kill_us) {
      ++in_flight_failures;
      continue;
    }
    std::ostringstream o;
    o << "status " << a.status << " sent at " << a.sent_us << " us: " << a.detail;
    bad.push_back(o.str());
  }
  if (bad.empty() && in_flight_failures <= clients) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << bad.size() << " of " << answers.size() << " answers are not 200";
  if (kill) failure << " (besides " << in_flight_failures << " 502s of requests in flight at the kill, at most " << clients << " allowed)";
  for (std::size_t i = 0; i < bad.size() && i < 10; ++i) failure << "\n  " << bad[i];
  return failure;
}

// Stops `mock` at once (SIGKILL) and waits until it is gone.
KillWindow kill_now(MockUpstream& mock) {
  KillWindow w;
  w.kill_us = monotonic_now_us();
  mock.proc->signal(SIGKILL);
  mock.proc->wait_exit(5s);
  w.dead_us = monotonic_now_us();
  return w;
}

// ---- names in DNS ----------------------------------------------------------------------------------

class UpstreamHostsDns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Dnsmasq::available()) {
      // scripts/test.sh installs it: under CI a missing dnsmasq is a failure, not a silent skip.
      if (std::getenv("CI")) FAIL() << "dnsmasq is not installed (scripts/deps.sh test installs dnsmasq-base)";
      GTEST_SKIP() << "dnsmasq is not installed (scripts/deps.sh test installs dnsmasq-base)";
    }
  }

  // One upstream "ibe" at http://supplier.test:<port>, re-resolved every second through `dns`.
  static json named_upstream_config(const Dnsmasq& dns, int port) {
    json c = base_config(port);
    c["dns"] = {{"servers", json::array({dns.server()})}};
    c["upstreams"]["ibe"] = {{"url", url(kName, port)}, {"dns_refresh_ms", kRefreshMs}};
    return c;
  }
};

TEST_F(UpstreamHostsDns, UnresolvedNameGets503AndIsListedInReadyzUntilItResolves) {
  Dnsmasq dns;  // the name is not there yet
  MockUpstream mock("127.0.0.2", 0);
  ASSERT_GT(mock.port, 0) << mock.proc->output();
  GatewayProcess gw(named_upstream_config(dns, mock.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();  // starts although the name does not resolve
  ASSERT_GT(gw.admin_port, 0) << gw.proc->output();

  const HttpResponse r = http_get(gw.port, kPath);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_TRUE(has_problem_code(r.body, "upstream_unresolved")) << r.body;
  EXPECT_NE(r.header("content-type").find("json"), std::string::npos) << r.header("content-type");

  // Still ready (the rest of the gateway works), and the unresolved upstream is named.
  std::pair<int, json> ready;
  EXPECT_TRUE(eventually([&] {
    ready = readyz(gw);
    return lists_unresolved(ready.second, "ibe");
  }, 5s)) << ready.second.dump();
  EXPECT_EQ(ready.first, 200) << ready.second.dump();
  EXPECT_EQ(mock.count(kPath), 0);

  dns.set(kName, {"127.0.0.2"});
  HttpResponse last;
  EXPECT_TRUE(eventually([&] {
    last = http_get(gw.port, kPath);
    return last.status == 200;
  }, kFollowBound)) << "still " << last.status << ": " << last.body;
  EXPECT_GE(mock.count(kPath), 1);
  EXPECT_TRUE(eventually([&] {
    ready = readyz(gw);
    return ready.second.is_object() && ready.second["unresolved_upstreams"] == json::array();
  }, kFollowBound)) << ready.second.dump();
  EXPECT_EQ(ready.first, 200);
}

TEST_F(UpstreamHostsDns, MovedNameTakesTheTrafficWithinTheRefreshPeriodAndOldPooledConnectionsAreNotReused) {
  auto mocks = mocks_on_one_port({"127.0.0.2", "127.0.0.3"});
  ASSERT_EQ(mocks.size(), 2u) << "no port free on both 127.0.0.2 and 127.0.0.3";
  const MockUpstream& old_mock = *mocks[0];
  const MockUpstream& new_mock = *mocks[1];
  Dnsmasq dns(kName, {"127.0.0.2"});
  GatewayProcess gw(named_upstream_config(dns, old_mock.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_TRUE(eventually([&] { return http_get(gw.port, kPath).status == 200; }, kFollowBound));

  // Steady load on keep-alive upstream connections to 127.0.0.2.
  BackgroundLoad load(gw.port, kPath, kClients);
  ASSERT_TRUE(eventually([&] { return old_mock.count(kPath) >= 50; }, 10s));

  dns.set(kName, {"127.0.0.3"});  // returns once dnsmasq answers so
  const std::int64_t moved_us = monotonic_now_us();
  const std::int64_t bound_us = moved_us + us(kFollowBound);

  // The new address gets traffic within the bound...
  EXPECT_TRUE(eventually([&] { return new_mock.count(kPath) > 0; }, kFollowBound))
      << "127.0.0.3 got nothing " << kFollowBound.count() << " ms after the move";
  // The load goes on for two more seconds after the bound: the new address keeps getting it, the
  // old one gets none.
  ASSERT_TRUE(eventually([&] {
    const auto a = load.answers();
    return !a.empty() && a.back().sent_us > bound_us + 2'000'000;
  }, 15s)) << "the load stopped";
  load.stop();

  const auto old_arrivals = arrivals(old_mock, kPath);
  const auto new_arrivals = arrivals(new_mock, kPath);
  if (!new_arrivals.empty()) {
    EXPECT_LE(new_arrivals.front(), bound_us) << "first request at 127.0.0.3 "
                                              << (new_arrivals.front() - moved_us) / 1000 << " ms after the move";
  }
  // The old address stops getting requests: pooled connections to it are not reused (the load
  // would keep them busy, so a reused pool would feed 127.0.0.2 for as long as it runs).
  EXPECT_EQ(count_after(old_arrivals, bound_us), 0)
      << "127.0.0.2 still got requests after the move, the last "
      << (old_arrivals.back() - moved_us) / 1000 << " ms after it";
  EXPECT_GT(count_after(new_arrivals, bound_us), 20) << "the load did not keep reaching 127.0.0.3";

  // No request failed during the move, and every 200 came from one of the two (once).
  const auto answers = load.answers();
  EXPECT_TRUE(every_answer_ok(answers, kClients));
  const auto ok = std::count_if(answers.begin(), answers.end(), [](const TimedAnswer& a) { return a.status == 200; });
  EXPECT_EQ(static_cast<std::size_t>(ok), old_arrivals.size() + new_arrivals.size() - 1)  // - the first probe
      << "answers with 200 do not match the requests the two upstreams received";
}

// A resolver that gives the same addresses in another order (round-robin DNS) changes nothing: no
// new set, no log line at each refresh (it was one line a refresh, 9 KB with 500 records).
TEST_F(UpstreamHostsDns, ARotatedAnswerIsNoChange) {
  auto mocks = mocks_on_one_port({"127.0.0.2", "127.0.0.3", "127.0.0.4"});
  ASSERT_EQ(mocks.size(), 3u) << "no port free on 127.0.0.2-4";
  Dnsmasq dns(kName, {"127.0.0.2", "127.0.0.3", "127.0.0.4"});
  GatewayProcess gw(named_upstream_config(dns, mocks[0]->port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const auto gives = [&] {
    gw.proc->read_available();
    const std::string out = gw.proc->output();
    std::size_t n = 0;
    for (std::size_t at = out.find("now gives endpoints"); at != std::string::npos;
         at = out.find("now gives endpoints", at + 1))
      ++n;
    return n;
  };
  const std::size_t before = gives();
  ASSERT_EQ(before, 1u) << gw.proc->output();  // the first answer
  for (const auto& order : {std::vector<std::string>{"127.0.0.3", "127.0.0.4", "127.0.0.2"},
                            std::vector<std::string>{"127.0.0.4", "127.0.0.2", "127.0.0.3"}}) {
    dns.set(kName, order);
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * kRefreshMs));  // several refreshes
  }
  EXPECT_EQ(gives(), before) << gw.proc->output();
  EXPECT_EQ(http_get(gw.port, kPath).status, 200);
  // A real change is still seen.
  dns.set(kName, {"127.0.0.2", "127.0.0.3"});
  EXPECT_TRUE(eventually([&] { return gives() > before; }, kFollowBound)) << gw.proc->output();
}

TEST_F(UpstreamHostsDns, DnsServerGoneKeepsTheLastGoodAddressesAndCountsTheFailures) {
  MockUpstream mock("127.0.0.3", 0);
  ASSERT_GT(mock.port, 0) << mock.proc->output();
  Dnsmasq dns(kName, {"127.0.0.3"});
  GatewayProcess gw(named_upstream_config(dns, mock.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_TRUE(eventually([&] { return http_get(gw.port, kPath).status == 200; }, kFollowBound));

  BackgroundLoad load(gw.port, kPath, kClients);
  ASSERT_TRUE(eventually([&] { return mock.count(kPath) >= 50; }, 10s));
  const double failures_before = series_or_zero(gw, "tollgate_upstream_dns_failures_total", {{"upstream", "ibe"}});

  dns.stop();
  double failures = 0;
  EXPECT_TRUE(eventually([&] {
    failures = series_or_zero(gw, "tollgate_upstream_dns_failures_total", {{"upstream", "ibe"}});
    return failures > failures_before && failures > 0;
  }, 20s)) << "tollgate_upstream_dns_failures_total{upstream=\"ibe\"} stayed at " << failures;
  // Several failed refreshes later the traffic still flows to the last good address.
  const std::int64_t failing_us = monotonic_now_us();
  EXPECT_TRUE(eventually([&] { return count_after(arrivals(mock, kPath), failing_us + 3 * kRefreshMs * 1000) > 20; },
                         20s));
  const auto [status, ready] = readyz(gw);
  EXPECT_EQ(status, 200) << ready.dump();
  EXPECT_EQ(ready["unresolved_upstreams"], json::array()) << "the last good addresses are kept: " << ready.dump();
  load.stop();
  EXPECT_TRUE(every_answer_ok(load.answers(), kClients));
}

// ---- several endpoints: failover and ejection -----------------------------------------------------

// One upstream "ibe" of these URLs with this ejection policy; the /shopping/search rule of
// base_config stays (kPath has none).
json endpoints_config(const std::vector<std::string>& urls, const json& eject) {
  json c = base_config(1);
  c["upstreams"]["ibe"] = {{"urls", urls}, {"eject", eject}};
  return c;
}

struct Endpoints {
  std::vector<std::unique_ptr<MockUpstream>> mocks;
  std::vector<std::string> urls() const {
    std::vector<std::string> out;
    for (const auto& m : mocks) out.push_back(url(m->host, m->port));
    return out;
  }
  // tollgate_upstream_endpoint_up of each mock's endpoint (-1: no such series).
  std::vector<double> up(const std::string& metrics) const {
    std::vector<double> out;
    for (const auto& m : mocks)
      out.push_back(metric_series(metrics, "tollgate_upstream_endpoint_up", {{"upstream", "ibe"}, {"endpoint", m->endpoint()}})
                        .value_or(-1));
    return out;
  }
};

Endpoints three_endpoints() { return {mocks_on_one_port({"127.0.0.2", "127.0.0.3", "127.0.0.4"})}; }

TEST(UpstreamHostsEndpoints, KilledEndpointFailsOverIsEjectedAndIsUsedAgainOnceRestarted) {
  Endpoints eps = three_endpoints();
  ASSERT_EQ(eps.mocks.size(), 3u) << "no port free on 127.0.0.2, 127.0.0.3 and 127.0.0.4";
  const int port = eps.mocks[0]->port;
  constexpr int kBaseMs = 2000;
  GatewayProcess gw(endpoints_config(eps.urls(), {{"consecutive_failures", 3}, {"base_ms", kBaseMs}, {"max_percent", 50}}));
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  BackgroundLoad load(gw.port, kPath, kClients);
  // Least outstanding requests, ties round robin: all three are used.
  ASSERT_TRUE(eventually([&] {
    return std::all_of(eps.mocks.begin(), eps.mocks.end(), [](const auto& m) { return m->count(kPath) >= 20; });
  }, 10s)) << "not every endpoint gets requests";
  EXPECT_EQ(eps.up(http_get(gw.admin_port, "/metrics").body), std::vector<double>({1, 1, 1}));
  const double failovers_before = series_or_zero(gw, "tollgate_upstream_failovers_total", {{"upstream", "ibe"}});

  const std::string victim = endpoint("127.0.0.3", port);
  const KillWindow killed = kill_now(*eps.mocks[1]);
  const std::map<std::string, std::string> victim_labels{{"upstream", "ibe"}, {"endpoint", victim}};
  std::string metrics;
  EXPECT_TRUE(eventually([&] {
    metrics = http_get(gw.admin_port, "/metrics").body;
    return metric_series(metrics, "tollgate_upstream_endpoint_up", victim_labels) == 0.0 &&
           metric_series(metrics, "tollgate_upstream_ejections_total", victim_labels).value_or(0) >= 1;
  }, 10s)) << "the killed endpoint " << victim << " is not shown ejected";
  EXPECT_TRUE(eventually([&] {
    return series_or_zero(gw, "tollgate_upstream_failovers_total", {{"upstream", "ibe"}}) > failovers_before;
  }, 5s)) << "no failover counted";

  // Up again on the same address and port: used again once its ejection is over. The bound: the
  // longest the current ejection can last (base_ms, doubled for each earlier one) plus the tolerance.
  eps.mocks[1] = std::make_unique<MockUpstream>("127.0.0.3", port);
  ASSERT_EQ(eps.mocks[1]->port, port) << eps.mocks[1]->proc->output();
  const double ejections = series_or_zero(gw, "tollgate_upstream_ejections_total", victim_labels);
  const auto longest_ejection =
      std::chrono::milliseconds(static_cast<long>(kBaseMs * std::pow(2.0, std::max(0.0, ejections - 1))));
  const auto back_bound = std::min<std::chrono::milliseconds>(60s, longest_ejection + kTolerance);
  EXPECT_TRUE(eventually([&] { return eps.mocks[1]->count(kPath) >= 10; }, back_bound))
      << "the restarted endpoint got " << eps.mocks[1]->count(kPath) << " requests in " << back_bound.count() << " ms";
  EXPECT_TRUE(eventually([&] { return metric_series(gw, "tollgate_upstream_endpoint_up", victim_labels) == 1.0; }, 5s))
      << "the restarted endpoint serves requests but " << victim << " is not shown in use: "
      << metric_series(gw, "tollgate_upstream_endpoint_up", victim_labels).value_or(-1);
  load.stop();

  // No request failed for the dead endpoint: connect failures went to another one.
  EXPECT_TRUE(every_answer_ok(load.answers(), kClients, killed));
}

TEST(UpstreamHostsEndpoints, NoMoreThanMaxPercentOfEndpointsAreEjectedAtOnce) {
  Endpoints eps = three_endpoints();
  ASSERT_EQ(eps.mocks.size(), 3u) << "no port free on 127.0.0.2, 127.0.0.3 and 127.0.0.4";
  // 34% of three endpoints: one may be ejected, never two.
  GatewayProcess gw(endpoints_config(eps.urls(), {{"consecutive_failures", 3}, {"base_ms", 2000}, {"max_percent", 34}}));
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  BackgroundLoad load(gw.port, kPath, kClients);
  ASSERT_TRUE(eventually([&] {
    return std::all_of(eps.mocks.begin(), eps.mocks.end(), [](const auto& m) { return m->count(kPath) >= 20; });
  }, 10s)) << "not every endpoint gets requests";

  KillWindow killed;
  killed.kill_us = monotonic_now_us();
  eps.mocks[1]->proc->signal(SIGKILL);
  eps.mocks[2]->proc->signal(SIGKILL);
  eps.mocks[1]->proc->wait_exit(5s);
  eps.mocks[2]->proc->wait_exit(5s);
  killed.dead_us = monotonic_now_us();

  // Watched for four ejection periods: ejections start, expire and start again meanwhile.
  int most_down = 0, samples = 0, samples_with_one_down = 0;
  bool live_one_down = false, series_missing = false;
  std::string worst;  // the first sample with the most endpoints down, as "up up up at +ms"
  const auto watch_until = std::chrono::steady_clock::now() + 8s;
  while (std::chrono::steady_clock::now() < watch_until) {
    const auto up = eps.up(http_get(gw.admin_port, "/metrics").body);
    ++samples;
    const int down = static_cast<int>(std::count(up.begin(), up.end(), 0.0));
    if (down > most_down) {
      std::ostringstream o;
      o << up[0] << " " << up[1] << " " << up[2] << " at +" << (monotonic_now_us() - killed.dead_us) / 1000 << " ms";
      worst = o.str();
    }
    most_down = std::max(most_down, down);
    samples_with_one_down += down == 1;
    live_one_down = live_one_down || up[0] == 0;
    series_missing = series_missing || std::count(up.begin(), up.end(), -1.0) > 0;
    std::this_thread::sleep_for(50ms);
  }
  load.stop();

  EXPECT_FALSE(series_missing) << "tollgate_upstream_endpoint_up is missing for an endpoint";
  EXPECT_LE(most_down, 1) << "more than 34% of the endpoints were shown ejected at once: endpoint_up of "
                          << eps.mocks[0]->endpoint() << ", " << eps.mocks[1]->endpoint() << ", "
                          << eps.mocks[2]->endpoint() << " were " << worst << " after the kill";
  EXPECT_GT(samples_with_one_down, 0) << "no dead endpoint was ever ejected (" << samples << " samples)";
  EXPECT_FALSE(live_one_down) << "the live endpoint was shown ejected";
  const auto metrics = http_get(gw.admin_port, "/metrics").body;
  double ejections = 0;
  for (int i : {1, 2})
    ejections += metric_series(metrics, "tollgate_upstream_ejections_total",
                               {{"upstream", "ibe"}, {"endpoint", eps.mocks[static_cast<std::size_t>(i)]->endpoint()}})
                     .value_or(0);
  EXPECT_GE(ejections, 1);
  EXPECT_GT(metric_series(metrics, "tollgate_upstream_failovers_total", {{"upstream", "ibe"}}).value_or(0), 0);
  // The dead endpoint left in use costs a failover, not a failed request.
  EXPECT_TRUE(every_answer_ok(load.answers(), kClients, killed));
  EXPECT_GT(eps.mocks[0]->count(kPath), 0);
}

TEST(UpstreamHostsEndpoints, DeadEndpointNeverCostsAPermit) {
  MockUpstream live("127.0.0.2", 0);
  ASSERT_GT(live.port, 0) << live.proc->output();
  // Nothing listens on 127.0.0.5 at that port: every connection there is refused.
  ASSERT_EQ(http_request("127.0.0.5", live.port, {"GET", "/", {}, {}}, 2s).status, 0);
  // The dead endpoint first, and never ejected here: every burst tries it.
  json c = endpoints_config({url("127.0.0.5", live.port), url("127.0.0.2", live.port)},
                            {{"consecutive_failures", 100}, {"base_ms", 30000}, {"max_percent", 50}});
  c["limits"]["rules"][0]["rateLimit"] = 5;  // a full bucket holds 5 permits
  c["limits"]["rules"][0]["cache"] = 0;      // no waiting: past the bucket, 429 at once
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  const std::string path = "/ibe/shopping/search";
  int admitted = 0;
  for (int burst = 0; burst < 4; ++burst) {
    // At least a second apart: the bucket is full again (5/s) for each burst.
    if (burst > 0) std::this_thread::sleep_for(1200ms);
    const auto rs = concurrent_requests(gw.port, {"GET", path, {}, {}}, 15);
    const int ok = count_status(rs, 200);
    const int limited = count_status(rs, 429);
    std::ostringstream others;
    for (const auto& r : rs)
      if (r.status != 200 && r.status != 429) others << " " << r.status << " " << r.body << r.error;
    // Every admitted request is answered by the live endpoint: none gets 502 ...
    EXPECT_EQ(ok + limited, 15) << "burst " << burst << ":" << others.str();
    // ... and none is refused for a permit spent on the dead endpoint: the whole bucket gets through.
    EXPECT_GE(ok, 5) << "burst " << burst << ": " << ok << " admitted of a bucket of 5";
    admitted += ok;
  }
  EXPECT_EQ(live.count(path), admitted) << "each admitted request reached the live endpoint once";
  EXPECT_GT(series_or_zero(gw, "tollgate_upstream_failovers_total", {{"upstream", "ibe"}}), 0)
      << "the dead endpoint was never tried: the test proves nothing";
}

}  // namespace
}  // namespace tollgate::testing

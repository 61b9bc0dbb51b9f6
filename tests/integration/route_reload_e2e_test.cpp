// SIGHUP applies a changed file's upstreams, routes and dns to the running gateway, end to end:
// the real gateway process, real mock upstreams and (for dns) a real DNS server.
//
//   - under load, the table is swapped: no request is lost, a request in flight finishes on the
//     upstream it started on, new requests follow the new table, and the connections pooled to
//     the upstream that left are closed;
//   - swapped back and forth ten times under load (warm pools on): still no request lost;
//   - an upstream the new file keeps unchanged keeps its pooled connections (no new connect);
//   - a file that does not parse, names an unknown upstream or whose TLS file does not load is
//     refused whole: the running table and rules stay;
//   - new dns.servers: the names are asked of the new server.
//
// Timing: polling with deadlines sized for a loaded two-core machine (and a sanitizer build).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/dns.hpp"
#include "support/load.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kPath = "/ibe/booking";  // no rule: never limited
constexpr int kClients = 4;

std::string url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

// One upstream `name` at `port`, every path routed to it; pooled connections kept 30 s (longer
// than any test here) so that only the gateway's own decisions close them.
json one_upstream(const std::string& name, int port) {
  json c = base_config(port);
  c["upstreams"] = {{name, {{"url", url(port)}}}};
  c["routes"] = json::array({{{"prefix", "/"}, {"upstream", name}}});
  c["proxy"]["upstream_idle_timeout_ms"] = 30000;
  c["proxy"]["response_timeout_ms"] = 5000;
  return c;
}

void reload(GatewayProcess& gw, const json& c) {
  write_file(gw.dir + "/gateway.json", c.dump(2));
  gw.proc->signal(SIGHUP);
}

int open_connections(const MockUpstream& m) { return m.stats()["open"].get<int>() - 1; }  // less the one asking

TEST(RouteReload, SighupSwapsTheTableUnderLoadWithoutLosingARequest) {
  MockUpstream a, b;
  const json v1 = one_upstream("ibe", a.port);
  GatewayProcess gw(v1);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  BackgroundLoad load(gw.port, kPath, kClients);
  ASSERT_TRUE(eventually([&] { return a.count(kPath) >= 50; }, 10s)) << gw.proc->output();
  // A request in flight across the swap: it was sent to `a`, and its answer comes from `a`.
  HttpResponse slow;
  std::thread in_flight([&] { slow = http_get(gw.port, "/ibe/slow?delay_ms=1500"); });
  ASSERT_TRUE(eventually([&] { return a.count("/ibe/slow") == 1; }, 5s));

  json v2 = one_upstream("ndc", b.port);  // "ibe" leaves, "ndc" takes every path
  reload(gw, v2);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: route table replaced", 10s)) << gw.proc->output();
  const int a_at_swap = a.count(kPath);
  ASSERT_TRUE(eventually([&] { return b.count(kPath) >= 50; }, 10s)) << gw.proc->output();
  in_flight.join();
  load.stop();

  EXPECT_EQ(slow.status, 200) << slow.body;
  EXPECT_EQ(b.count("/ibe/slow"), 0);
  int failed = 0;
  std::string first_failure;
  for (const TimedAnswer& t : load.answers())
    if (t.status != 200 && failed++ == 0) first_failure = std::to_string(t.status) + " " + t.detail;
  EXPECT_EQ(failed, 0) << "of " << load.answers().size() << ", first: " << first_failure;
  // Only requests already routed when the swap was logged (one per client at most) reached `a`.
  EXPECT_LE(a.count(kPath) - a_at_swap, kClients);
  const int a_now = a.count(kPath), b_now = b.count(kPath);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(http_get(gw.port, kPath).status, 200);
  EXPECT_EQ(a.count(kPath), a_now);
  EXPECT_EQ(b.count(kPath), b_now + 20);
  // The removed upstream's pool drained: every connection the gateway had to `a` is closed.
  EXPECT_TRUE(eventually([&] { return open_connections(a) == 0; }, 5s)) << open_connections(a) << " still open";
  // The console no longer lists it.
  const json overview = gw.admin_json("/admin/overview");
  ASSERT_EQ(overview["upstreams"].size(), 1u) << overview["upstreams"].dump();
  EXPECT_EQ(overview["upstreams"][0]["upstream"], "ndc");
}

// Swapped back and forth while load runs (a table retired while its requests, keepers and
// pooled connections are still in use, again and again): every answer is a 200, and at the end
// the upstream that is out has no connection from the gateway left.
TEST(RouteReload, RepeatedSwapsUnderLoadLoseNothing) {
  MockUpstream a, b;
  json v1 = one_upstream("ibe", a.port);
  v1["upstreams"]["ibe"]["min_idle_conns"] = 2;  // keepers retire and start with their tables
  json v2 = one_upstream("ndc", b.port);
  v2["upstreams"]["ndc"]["min_idle_conns"] = 2;
  GatewayProcess gw(v1);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  BackgroundLoad load(gw.port, kPath, kClients);
  for (int i = 1; i <= 10; ++i) {
    reload(gw, i % 2 ? v2 : v1);
    ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: route table replaced", 10s)) << gw.proc->output();
    std::this_thread::sleep_for(100ms);  // let some requests through on each table
  }
  load.stop();
  int failed = 0;
  std::string first_failure;
  for (const TimedAnswer& t : load.answers())
    if (t.status != 200 && failed++ == 0) first_failure = std::to_string(t.status) + " " + t.detail;
  EXPECT_EQ(failed, 0) << "of " << load.answers().size() << ", first: " << first_failure;
  EXPECT_GT(a.count(kPath), 0);
  EXPECT_GT(b.count(kPath), 0);
  // The tenth swap put v1 back: b's pools (and keepers) retired.
  EXPECT_TRUE(eventually([&] { return open_connections(b) == 0; }, 5s)) << open_connections(b) << " still open";
  EXPECT_EQ(http_get(gw.port, kPath).status, 200);
}

TEST(RouteReload, AnUnchangedUpstreamKeepsItsPooledConnections) {
  MockUpstream a, b;
  const json v1 = one_upstream("ibe", a.port);
  GatewayProcess gw(v1);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  // Sequential requests on fresh client connections reach both workers: each pools one connection.
  for (int i = 0; i < 30; ++i) ASSERT_EQ(http_get(gw.port, kPath).status, 200);
  ASSERT_EQ(a.count(kPath), 30);

  json v2 = v1;  // "ibe" as it was, plus "ndc" for /ndc/
  v2["upstreams"]["ndc"] = {{"url", url(b.port)}};
  v2["routes"] = json::array({{{"prefix", "/ndc/"}, {"upstream", "ndc"}}, {{"prefix", "/"}, {"upstream", "ibe"}}});
  reload(gw, v2);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: route table replaced", 10s)) << gw.proc->output();
  const int before = a.stats()["connections"].get<int>();
  for (int i = 0; i < 30; ++i) ASSERT_EQ(http_get(gw.port, kPath).status, 200);
  // Only the next stats call connects: the gateway reused what it had pooled before the swap.
  EXPECT_EQ(a.stats()["connections"].get<int>(), before + 1);
  ASSERT_EQ(http_get(gw.port, "/ndc/fares").status, 200);
  EXPECT_EQ(b.count("/ndc/fares"), 1);
  EXPECT_EQ(a.count("/ndc/fares"), 0);
}

TEST(RouteReload, ABrokenFileIsRefusedWholeAndTheTableStays) {
  MockUpstream a, b;
  const json v1 = one_upstream("ibe", a.port);
  GatewayProcess gw(v1);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_EQ(http_get(gw.port, kPath).status, 200);

  // A route to an upstream that does not exist: the file does not load.
  json unknown = one_upstream("ndc", b.port);
  unknown["routes"] = json::array({{{"prefix", "/"}, {"upstream", "nope"}}});
  reload(gw, unknown);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: reload failed, keeping config v1 and the route table", 10s))
      << gw.proc->output();

  // Valid JSON and schema, but its new https upstream's CA file does not exist: refused at the
  // table, and its rules change is not applied either.
  json tls = one_upstream("ndc", b.port);
  tls["upstreams"]["ndc"] = {{"url", "https://127.0.0.1:" + std::to_string(b.port)},
                             {"tls", {{"ca_file", gw.dir + "/missing-ca.pem"}}}};
  tls["limits"]["rules"][0]["rateLimit"] = 9;
  reload(gw, tls);
  const auto refused = gw.proc->wait_for_line("missing-ca.pem", 10s);
  ASSERT_TRUE(refused) << gw.proc->output();
  EXPECT_NE(refused->find("keeping config v1 and the route table"), std::string::npos) << *refused;
  EXPECT_NE(refused->find("No such file or directory"), std::string::npos) << *refused;
  EXPECT_EQ(gw.admin_json("/admin/rules")["rules"][0]["rateLimit"], 5.0);

  write_file(gw.dir + "/gateway.json", "{ broken");
  gw.proc->signal(SIGHUP);
  ASSERT_TRUE(gw.proc->wait_for_line("invalid JSON", 10s)) << gw.proc->output();

  for (int i = 0; i < 10; ++i) ASSERT_EQ(http_get(gw.port, kPath).status, 200);
  EXPECT_EQ(b.stats()["total"], 0);
  EXPECT_EQ(gw.proc->output().find("route table replaced"), std::string::npos);
}

TEST(RouteReload, NewDnsServersAreAskedAfterASighup) {
  if (!Dnsmasq::available()) {
    // scripts/test.sh installs it: under CI a missing dnsmasq is a failure, not a silent skip.
    if (std::getenv("CI")) FAIL() << "dnsmasq is not installed (scripts/deps.sh test installs dnsmasq-base)";
    GTEST_SKIP() << "dnsmasq is not installed (scripts/deps.sh test installs dnsmasq-base)";
  }
  MockUpstream a("127.0.0.2", 0);
  MockUpstream b("127.0.0.3", 0);
  ASSERT_GT(a.port, 0);
  ASSERT_GT(b.port, 0);
  // Two DNS servers that disagree about the name; the port is in the URL, so each mock needs
  // its own: "supplier.test" is a on the first server, b on the second.
  Dnsmasq first("supplier.test", {"127.0.0.2"});
  Dnsmasq second("supplier.test", {"127.0.0.3"});
  json v1 = base_config(a.port);
  v1["upstreams"] = {{"ibe", {{"urls", json::array({"http://supplier.test:" + std::to_string(a.port),
                                                      "http://supplier.test:" + std::to_string(b.port)})},
                              {"dns_refresh_ms", 1000}}}};
  v1["routes"] = json::array({{{"prefix", "/"}, {"upstream", "ibe"}}});
  v1["dns"] = {{"servers", json::array({first.server()})}};
  GatewayProcess gw(v1);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  // Through the first server, only a's URL reaches a listener (127.0.0.2 on a's port).
  for (int i = 0; i < 10; ++i) ASSERT_EQ(http_get(gw.port, kPath).status, 200) << gw.proc->output();
  EXPECT_EQ(a.count(kPath), 10);
  EXPECT_EQ(b.count(kPath), 0);

  json v2 = v1;
  v2["dns"]["servers"] = json::array({second.server()});
  reload(gw, v2);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: route table replaced", 10s)) << gw.proc->output();
  // Through the second, only b's does (127.0.0.3 on b's port); the upstream itself is unchanged,
  // so its endpoints follow the new answers.
  ASSERT_TRUE(eventually([&] { return http_get(gw.port, kPath).status == 200 && b.count(kPath) >= 1; }, 10s))
      << gw.proc->output();
  const int a_after = a.count(kPath);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(http_get(gw.port, kPath).status, 200);
  EXPECT_EQ(a.count(kPath), a_after);
}

}  // namespace
}  // namespace tollgate::testing

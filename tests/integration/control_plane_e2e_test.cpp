// The control plane under pressure, with the real gateway process: descriptor exhaustion, admin
// authentication failures, oversized admin bodies, a stalled store behind /metrics, warnings.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Reads what the server sends within `timeout` (empty: nothing came).
std::string read_within(int fd, std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[1024];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

TEST(ControlPlane, ConnectionsBeyondTheDescriptorLimitGet429AndAdminStaysReachable) {
  MockUpstream up;
  json c = base_config(up.port);  // proxy.max_connections left at its default (50,000)
  GatewayProcess gw(c, {}, true, 256);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  // 50,000 cannot fit 256 descriptors: said at start, and lowered.
  EXPECT_NE(gw.proc->output().find("does not fit the open-file limit 256"), std::string::npos) << gw.proc->output();
  std::vector<int> fds;
  int refused = 0, silent = 0;
  for (int i = 0; i < 400; ++i) {
    const int fd = connect_loopback(gw.port);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  // Every connection past the cap is answered 429 at once; those under it stay open and idle.
  for (int fd : fds) {
    const std::string got = read_within(fd, 50ms);
    if (got.rfind("HTTP/1.1 429", 0) == 0) ++refused;
    else if (got.empty()) ++silent;
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(silent, 0);
  EXPECT_EQ(refused + silent, static_cast<int>(fds.size()));
  // The admin listener still answers while the proxy is at its cap.
  const auto health = http_request(gw.admin_port, {"GET", "/healthz", {}, {}}, 3s);
  EXPECT_EQ(health.status, 200) << health.error;
  // And a request on a connection under the cap is still served.
  const std::string answer = raw_exchange(gw.port, "GET /ibe/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 3s);
  EXPECT_TRUE(answer.rfind("HTTP/1.1 429", 0) == 0) << answer;  // still at the cap: refused, not hung
  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(eventually([&] { return http_get(gw.port, "/ibe/x").status == 200; }, 5s));
}

TEST(ControlPlane, FailedAdminAuthenticationIsSlowedCountedAndLoggedOnce) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) {
    const auto r = http_request(gw.admin_port, {"PUT", "/admin/switch", {{"Authorization", "Bearer guess" + std::to_string(i)}},
                                                R"({"enabled": false})"});
    EXPECT_EQ(r.status, 401);
  }
  EXPECT_EQ(http_request(gw.admin_port, {"POST", "/admin/reload", {}, {}}).status, 401);
  // Five refusals, each answered no sooner than 250 ms after it came.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1250ms);
  EXPECT_EQ(metric_value(gw, "tollgate_admin_auth_failures_total"), 5);
  ASSERT_TRUE(gw.proc->wait_for_line("admin authentication failed from 127.0.0.1", 2s));
  std::this_thread::sleep_for(100ms);
  const std::string out = gw.proc->output();
  const auto first = out.find("admin authentication failed");
  EXPECT_EQ(out.find("admin authentication failed", first + 1), std::string::npos) << out;  // once per 10 s
  // The right token is not slowed and still works; the switch stayed on meanwhile.
  EXPECT_EQ(json::parse(http_get(gw.admin_port, "/admin/switch").body)["enabled"], true);
  EXPECT_EQ(gw.admin("PUT", "/admin/switch", R"({"enabled": false})").status, 200);
}

TEST(ControlPlane, OversizedAdminRequestsAreAnswered413Or431) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  const auto big = gw.admin("PUT", "/admin/switch", std::string(70 * 1024, ' '));
  EXPECT_EQ(big.status, 413) << big.error;
  const auto headers = http_request(gw.admin_port, {"GET", "/healthz", {{"X-Big", std::string(20 * 1024, 'a')}}, {}});
  EXPECT_EQ(headers.status, 431) << headers.error;
  EXPECT_EQ(json::parse(http_get(gw.admin_port, "/admin/switch").body)["enabled"], true);  // nothing applied
}

TEST(ControlPlane, AdminBeyondLoopbackWithoutTokenIsWarnedAbout) {
  MockUpstream up;
  json c = base_config(up.port);
  c["admin"]["listen"] = "0.0.0.0:0";
  GatewayProcess gw(c, {}, /*with_token=*/false);
  ASSERT_GT(gw.port, 0);
  EXPECT_NE(gw.proc->output().find("is reachable beyond this host and no admin token is set"), std::string::npos)
      << gw.proc->output();
  GatewayProcess quiet(base_config(up.port), {}, false);  // loopback: no warning
  EXPECT_EQ(quiet.proc->output().find("no admin token is set"), std::string::npos);
}

// A Redis that stops answering (SIGSTOP: connections still open, replies never come) behind a
// Redis-backed gateway: /metrics waits for it, /healthz and /readyz must not, nor must SIGTERM.
TEST(ControlPlane, AStalledStoreDelaysNeitherHealthNorShutdown) {
  if (::access("/usr/bin/redis-server", X_OK) != 0) GTEST_SKIP() << "redis-server is not installed";
  const int redis_port = unused_port();
  Process redis({"/usr/bin/redis-server", "--port", std::to_string(redis_port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no"});
  ASSERT_TRUE(redis.wait_for_line("Ready to accept connections", 10s)) << redis.output();
  MockUpstream up;
  json c = base_config(up.port);
  c["limits"]["store"] = "redis";
  // connect_timeout_ms also bounds an admin read of the store (the default, said here).
  c["limits"]["redis"] = {{"host", "127.0.0.1"}, {"port", redis_port}, {"decision_timeout_ms", 100}, {"connect_timeout_ms", 1000}};
  json rules = json::array();
  for (int i = 1; i <= 32; ++i)
    rules.push_back({{"configId", i}, {"interfaceUrl", "/if" + std::to_string(i)}, {"rateLimit", 100}, {"status", 1}});
  c["limits"]["rules"] = rules;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0);
  for (int i = 1; i <= 32; ++i) ASSERT_EQ(http_get(gw.port, "/ibe/if" + std::to_string(i)).status, 200);

  redis.signal(SIGSTOP);
  const auto scrape_started = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration scrape_took{};
  auto scrape = std::async(std::launch::async, [&] {
    auto r = http_request(gw.admin_port, {"GET", "/metrics", {}, {}}, 60s);
    scrape_took = std::chrono::steady_clock::now() - scrape_started;
    return r;
  });
  std::this_thread::sleep_for(200ms);  // the scrape is now waiting on Redis
  for (const char* path : {"/healthz", "/readyz"}) {
    const auto t = std::chrono::steady_clock::now();
    const auto r = http_request(gw.admin_port, {"GET", path, {}, {}}, 10s);
    EXPECT_EQ(r.status, 200) << path << " " << r.error;
    EXPECT_LT(std::chrono::steady_clock::now() - t, 1s) << path;
  }
  // The scrape itself is bounded: one store timeout (1 s), not one per rule (32 s), give or take a
  // loaded machine's 2 s.
  ASSERT_EQ(scrape.wait_for(15s), std::future_status::ready);
  const HttpResponse scraped = scrape.get();
  EXPECT_EQ(scraped.status, 200) << scraped.error << " " << scraped.body.substr(0, 300);
  EXPECT_LT(scrape_took, 3s) << std::chrono::duration_cast<std::chrono::milliseconds>(scrape_took).count() << " ms";
  const auto t = std::chrono::steady_clock::now();
  gw.proc->signal(SIGTERM);
  EXPECT_EQ(gw.proc->wait_exit(15s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t, 8s);
  redis.signal(SIGCONT);
}

}  // namespace
}  // namespace tollgate::testing

namespace tollgate::testing {
namespace {

TEST(ControlPlane, SighupSaysWhichChangedFieldsNeedARestart) {
  MockUpstream up;
  json c = base_config(up.port);
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0);
  c["listen"] = "127.0.0.1:1";
  c["proxy"]["max_body_bytes"] = 4096;
  c["limits"]["rules"][0]["rateLimit"] = 7;
  write_file(gw.dir + "/gateway.json", c.dump());
  gw.proc->signal(SIGHUP);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: config v2 loaded", 5s)) << gw.proc->output();
  const auto line = gw.proc->wait_for_line("not applied", 5s);
  ASSERT_TRUE(line) << gw.proc->output();
  EXPECT_NE(line->find("changes listen, proxy.max_body_bytes:"), std::string::npos) << *line;
  EXPECT_EQ(gw.admin_json("/admin/rules")["rules"][0]["rateLimit"], 7.0);  // the rules were applied
  EXPECT_EQ(http_get(gw.port, "/ibe/x").status, 200);                       // still on the old port
}

}  // namespace
}  // namespace tollgate::testing

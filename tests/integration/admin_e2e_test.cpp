// The admin listener's own guards, with the real gateway process: its connection cap and the
// descriptors kept for it, the Host check against DNS rebinding, the failed-token budget.
#include <gtest/gtest.h>
#include <unistd.h>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

HttpResponse get_with_host(int port, const std::string& target, const std::string& host) {
  return http_request(port, {"GET", target, {{"Host", host}}, {}}, 5s);
}

// 300 idle admin connections under a 256-descriptor limit: the admin listener keeps at most its
// cap (admin.max_connections, 64 by default), so the proxy side still has its descriptors, and a
// fresh admin caller is answered (the connection that waited longest for a request is closed to
// make room).
TEST(AdminListener, IdleAdminConnectionsPastTheCapTakeNoDescriptorsFromTheProxy) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port), {}, true, 256);
  ASSERT_GT(gw.admin_port, 0) << gw.proc->output();
  std::vector<int> fds;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_loopback(gw.admin_port);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  ASSERT_EQ(fds.size(), 300u);
  // A fresh caller queued behind all of them is answered, and soon (with the descriptors gone, its
  // connect would wait in the kernel until idle connections time out, 30 s on): by then every one
  // before it was accepted.
  const auto asked = std::chrono::steady_clock::now();
  const auto health = http_request(gw.admin_port, {"GET", "/healthz", {}, {}}, 5s);
  EXPECT_EQ(health.status, 200) << health.error;
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s);
  // The proxy side still has its descriptors.
  int ok = 0;
  for (int i = 0; i < 20; ++i) ok += http_request(gw.port, {"GET", "/ibe/x", {}, {}}, 3s).status == 200;
  EXPECT_EQ(ok, 20);
  // Every one past the cap closed an older idle one; no more than the cap are open.
  const std::string metrics = http_request(gw.admin_port, {"GET", "/metrics", {}, {}}, 5s).body;
  EXPECT_GE(metric_series(metrics, "tollgate_admin_refusals_total", {{"reason", "idle_closed_at_cap"}}).value_or(0), 300 - 64)
      << metrics;
  EXPECT_LE(metric_series(metrics, "tollgate_admin_connections", {}).value_or(999), 64);
  for (int fd : fds) ::close(fd);
}

// And the reverse: the proxy side full does not stop the admin listener.
TEST(AdminListener, AFullProxySideLeavesTheAdminListenerAnswering) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["max_connections"] = 4;
  GatewayProcess gw(c);
  ASSERT_GT(gw.admin_port, 0) << gw.proc->output();
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) fds.push_back(connect_loopback(gw.port));
  EXPECT_EQ(http_request(gw.admin_port, {"GET", "/healthz", {}, {}}, 3s).status, 200);
  EXPECT_EQ(http_request(gw.admin_port, {"GET", "/metrics", {}, {}}, 3s).status, 200);
  for (int fd : fds) ::close(fd);
}

// DNS rebinding: a page of another site, its name now pointing at 127.0.0.1, sends its own name.
TEST(AdminListener, AnswersOnlyItsOwnAddressAndLocalhost) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  ASSERT_GT(gw.admin_port, 0) << gw.proc->output();
  const std::string p = ":" + std::to_string(gw.admin_port);
  for (const std::string target : {"/admin/rules", "/admin/overview", "/metrics", "/healthz", "/"}) {
    const auto r = get_with_host(gw.admin_port, target, "rebound.example" + p);
    EXPECT_EQ(r.status, 421) << target;
    EXPECT_EQ(json::parse(r.body)["error"], "host_not_allowed") << target;
  }
  for (const std::string& host : std::vector<std::string>{"127.0.0.1" + p, "localhost" + p, "localhost", "[::1]" + p})
    EXPECT_EQ(get_with_host(gw.admin_port, "/admin/rules", host).status, 200) << host;
  // No Host: HTTP/1.0 is answered (no browser sends it), HTTP/1.1 is a bad request.
  EXPECT_NE(raw_exchange(gw.admin_port, "GET /healthz HTTP/1.0\r\n\r\n").find("HTTP/1.0 200"), std::string::npos);
  EXPECT_NE(raw_exchange(gw.admin_port, "GET /healthz HTTP/1.1\r\n\r\n").find("HTTP/1.1 400"), std::string::npos);
  EXPECT_EQ(metric_series(http_get(gw.admin_port, "/metrics").body, "tollgate_admin_refusals_total",
                          {{"reason", "host_not_allowed"}}),
            5);
}

// A name the admin listener is reached by (a service name, say) is answered once listed.
TEST(AdminListener, AnswersAListedHostName) {
  MockUpstream up;
  json c = base_config(up.port);
  c["admin"]["allowed_hosts"] = json::array({"tollgate-admin.internal"});
  GatewayProcess gw(c);
  ASSERT_GT(gw.admin_port, 0) << gw.proc->output();
  EXPECT_EQ(get_with_host(gw.admin_port, "/metrics", "tollgate-admin.internal:9901").status, 200);
  EXPECT_EQ(get_with_host(gw.admin_port, "/metrics", "other.internal:9901").status, 421);
}

// Guesses that arrive together: the peer's budget (5) is checked, the rest answered 429 at once,
// and the right token from the locked-out peer waits for the lock-out to end.
TEST(AdminListener, GuessingTokensIsLockedOut) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  ASSERT_GT(gw.admin_port, 0) << gw.proc->output();
  const auto rs = concurrent_requests(
      gw.admin_port, {"PUT", "/admin/switch", {{"Authorization", "Bearer guess"}}, R"({"enabled":false})"}, 12);
  EXPECT_EQ(count_status(rs, 401), 5);
  EXPECT_EQ(count_status(rs, 429), 7);
  for (const auto& r : rs) {
    if (r.status == 429) {
      EXPECT_FALSE(r.header("retry-after").empty());
    }
  }
  EXPECT_EQ(metric_value(gw, "tollgate_admin_auth_lockouts_total"), 1);
  ASSERT_TRUE(gw.proc->wait_for_line("locked out", 2s)) << gw.proc->output();
  EXPECT_TRUE(eventually([&] { return gw.admin("PUT", "/admin/switch", R"({"enabled":false})").status == 200; }, 5s));
}

}  // namespace
}  // namespace tollgate::testing

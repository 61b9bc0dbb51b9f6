// Redis as the fleet's bucket store, with real gateway processes, a real redis-server and the mock
// upstream. One test stops the server: ctest runs these tests one at a time (RESOURCE_LOCK redis).
#include <gtest/gtest.h>
#include <future>
#include <sys/socket.h>
#include <unistd.h>

#include "support/load.hpp"
#include "support/redis.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

json redis_config(int upstream_port, int redis_port, const std::string& policy = "fail_open") {
  json c = base_config(upstream_port);
  c["limits"]["store"] = "redis";
  // A key prefix of this test process's own: nothing else on the server (heartbeats included) counts.
  c["limits"]["redis"] = {{"host", "127.0.0.1"}, {"port", redis_port}, {"failure_policy", policy},
                          {"decision_timeout_ms", 100}, {"key_prefix", "t" + std::to_string(getpid()) + ":"}};
  return c;
}

class RedisE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server().available()) GTEST_SKIP() << server().why_not();
    server().flush();
    ASSERT_GT(upstream.port, 0);
  }
  static RedisServer& server() { return RedisServer::shared(); }
  std::unique_ptr<GatewayProcess> gateway(const json& c) {
    auto gw = std::make_unique<GatewayProcess>(c);
    EXPECT_GT(gw->port, 0) << gw->proc->output();
    // Connected to Redis before the test starts sending.
    EXPECT_TRUE(gw->proc->wait_for_line("redis store connected", 10s)) << gw->proc->output();
    return gw;
  }
  int admitted(const GatewayProcess& gw, const std::string& path, int n) {
    return count_status(concurrent_requests(gw.port, {"GET", path, {}, {}}, n), 200);
  }
  MockUpstream upstream;
};

// Three instances on one Redis: a 10/s interface under ~60x that load for 10 s. The upstream's
// arrival log must show, for every window, at most burst + rate*T + 1, and at least 97% of it
// (measured: 100.0% in five runs).
TEST_F(RedisE2E, FleetOfThreeKeepsTheLimitAsOne) {
  json c = redis_config(upstream.port, server().port());
  c["threads"] = 1;
  c["limits"]["rules"][0]["rateLimit"] = 10;
  c["limits"]["rules"][0]["cache"] = 0.3;
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  for (int i = 0; i < 3; ++i) fleet.push_back(gateway(c));
  upstream.reset();
  std::vector<int> ports;
  for (auto& g : fleet) ports.push_back(g->port);
  const LoadResult load = run_load(ports, "/ibe/shopping/search", 4, 10s);
  EXPECT_EQ(load.count(0), 0);
  EXPECT_EQ(load.count(200) + load.count(429), load.total());
  EXPECT_GT(load.count(429), 10 * load.count(200) / 2);  // well over the limit

  const auto arrivals = upstream.stats()["paths"]["/ibe/shopping/search"]["arrivals_us"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(static_cast<int>(arrivals.size()), load.count(200));
  const WindowCheck w = check_windows(arrivals, 10, 10);
  EXPECT_LE(w.worst_excess, 1.0) << "a window admitted " << w.worst_excess << " more than burst + rate*T";
  std::cout << "fleet: " << arrivals.size() << " admitted over " << w.span_s << " s = " << 100.0 * w.share
            << "% of burst + rate*T; worst window +" << w.worst_excess << std::endl;
  EXPECT_GE(w.share, 0.97) << arrivals.size() << " admitted over " << w.span_s << " s";
  for (auto& g : fleet) {
    const std::string m = http_get(g->admin_port, "/metrics").body;
    EXPECT_NE(m.find("tollgate_store_up 1"), std::string::npos);
    EXPECT_NE(m.find("tollgate_store_live_instances 3"), std::string::npos) << m;
  }
}

TEST_F(RedisE2E, ChannelLimitIsSharedByItsInterfacesAcrossInstances) {
  json c = redis_config(upstream.port, server().port());
  c["limits"]["rules"] = json::array(
      {{{"configId", 1}, {"channelType", "IBE+"}, {"interfaceUrl", "/a"}, {"rateLimit", 10}, {"cache", 0}, {"status", 1}},
       {{"configId", 2}, {"channelType", "IBE+"}, {"interfaceUrl", "/b"}, {"rateLimit", 10}, {"cache", 0}, {"status", 1}},
       {{"configId", 3}, {"channelType", "IBE+"}, {"scope", "channel"}, {"rateLimit", 3}, {"status", 1}}});
  auto a = gateway(c);
  auto b = gateway(c);
  const int n = admitted(*a, "/ibe/a", 6) + admitted(*b, "/ibe/b", 6) + admitted(*a, "/ibe/b", 4);
  EXPECT_EQ(n, 3);
  const auto r = http_get(b->port, "/ibe/a");
  ASSERT_EQ(r.status, 429);
  EXPECT_EQ(json::parse(r.body)["bucket"], "channel:IBE+");
  EXPECT_NE(r.header("ratelimit-policy").find("\"channel:IBE+\";q=3"), std::string::npos);
  // Nothing was taken from /a or /b by the rejections: each still holds its own 10, minus grants.
  const json view = a->admin_json("/admin/buckets/a");
  EXPECT_GE(view["stored_permits"].get<double>(), 7.0);
}

void refund_scenario(const GatewayProcess& gw, const MockUpstream& upstream) {
  // A takes the stored permit; B is held for its slot 1 s later, then leaves.
  ASSERT_EQ(http_get(gw.port, "/ibe/booking").status, 200);
  RawConnection b(gw.port, "GET /ibe/booking HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_held_requests") == 1; }, 5s));
  EXPECT_GT(gw.admin_json("/admin/buckets/booking")["debt_s"].get<double>(), 0.3);  // B's slot is booked
  b.close();
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_refunds_total") == 1; }, 5s));
  // B's slot was given back: the bucket's next free slot is no longer ahead of now.
  EXPECT_LT(gw.admin_json("/admin/buckets/booking")["debt_s"].get<double>(), 0.05);
  EXPECT_EQ(metric_value(gw, "tollgate_held_requests"), 0);
  // C takes the slot B left (about 1 s after A, not 2 s).
  const auto c = http_get(gw.port, "/ibe/booking");
  EXPECT_EQ(c.status, 200);
  std::this_thread::sleep_for(1200ms);  // B's old slot passes: B must never reach the upstream
  EXPECT_EQ(upstream.count("/ibe/booking"), 2);
}

json refund_rules(json c) {
  c["limits"]["rules"] = json::array({{{"configId", 1}, {"interfaceUrl", "/booking"}, {"rateLimit", 1},
                                       {"cache", 5}, {"status", 1}}});
  return c;
}

TEST_F(RedisE2E, DepartedClientGivesItsSlotBack) {
  auto gw = gateway(refund_rules(redis_config(upstream.port, server().port())));
  refund_scenario(*gw, upstream);
}

// Per-client limits on the fleet: per-client quotas and maxShare decided in Redis hold across instances.
TEST_F(RedisE2E, QuotasHoldFleetWide) {
  json c = redis_config(upstream.port, server().port());
  c["limits"]["rules"] = quota_example_rules();
  auto a = gateway(c);
  auto b = gateway(c);
  // The same client reaches both instances: /login allows it 2 per second in all.
  auto ra = std::async(std::launch::async, [&] { return admitted(*a, "/ibe/login", 5); });
  const int nb = admitted(*b, "/ibe/login", 5);
  EXPECT_EQ(ra.get() + nb, 2);
  // The per-IP channel quota (3 per second) over both instances and two interfaces.
  std::this_thread::sleep_for(2100ms);
  auto sa = std::async(std::launch::async, [&] { return admitted(*a, "/ibe/shopping/search", 5); });
  const int sb = admitted(*b, "/ibe/shopping/search", 5);
  EXPECT_EQ(sa.get() + sb, 3);
  // The 429 names the quota and the keys live in Redis, tagged, with a TTL.
  const auto r = http_get(a->port, "/ibe/shopping/search");
  ASSERT_EQ(r.status, 429);
  EXPECT_EQ(json::parse(r.body)["policy"], "channel:IBE+#q1");
  const std::string prefix = c["limits"]["redis"]["key_prefix"];
  const std::string ttl = server().cli("PTTL \"" + prefix + "{IBE+}q:2:127.0.0.1\"");
  EXPECT_GT(std::stoll(ttl), 60'000) << ttl;  // a sliding minute: this window and the next
  EXPECT_LE(std::stoll(ttl), 120'000) << ttl;
  // Tracked client keys, counted in Redis: per IP (2 quotas) and per IP + /ibe/login (2 quotas),
  // less the /login one-second counter, which expired with its (sliding: second) window 2.1 s ago.
  EXPECT_EQ(metric_value(*a, "tollgate_client_keys"), 3);
}

TEST_F(RedisE2E, MaxShareHoldsAcrossInstances) {
  json c = redis_config(upstream.port, server().port());
  c["limits"]["rules"] = json::array({{{"configId", 1}, {"interfaceUrl", "/search"}, {"status", 1}, {"rateLimit", 10},
                                       {"burst", 1}, {"cache", 1.0}, {"maxShare", 0.3}, {"keyBy", "header:X-Client"}}});
  auto a = gateway(c);
  auto b = gateway(c);
  const HttpRequest heavy{"GET", "/search", {{"X-Client", "heavy"}}, {}};
  auto ha = std::async(std::launch::async, [&] { return concurrent_requests(a->port, heavy, 4); });
  const auto hb = concurrent_requests(b->port, heavy, 4);
  const int heavy_ok = count_status(ha.get(), 200) + count_status(hb, 200);
  // One stored permit plus 3 waiting in all (one more if a slot was released during the burst).
  EXPECT_GE(heavy_ok, 4);
  EXPECT_LE(heavy_ok, 5);
}

TEST(LocalE2E, DepartedClientGivesItsSlotBack) {
  MockUpstream upstream;
  GatewayProcess gw(refund_rules(base_config(upstream.port)));
  ASSERT_GT(gw.port, 0);
  refund_scenario(gw, upstream);
}

TEST(LocalE2E, ChannelLimitInProcess) {
  MockUpstream upstream;
  json c = base_config(upstream.port);
  c["limits"]["rules"] = json::array(
      {{{"configId", 1}, {"channelType", "IBE+"}, {"interfaceUrl", "/a"}, {"rateLimit", 10}, {"cache", 0}, {"status", 1}},
       {{"configId", 2}, {"channelType", "IBE+"}, {"interfaceUrl", "/b"}, {"rateLimit", 10}, {"cache", 0}, {"status", 1}},
       {{"configId", 3}, {"channelType", "IBE+"}, {"scope", "channel"}, {"rateLimit", 3}, {"status", 1}}});
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0);
  const int a = count_status(concurrent_requests(gw.port, {"GET", "/ibe/a", {}, {}}, 6), 200);
  const int b = count_status(concurrent_requests(gw.port, {"GET", "/ibe/b", {}, {}}, 6), 200);
  EXPECT_EQ(a + b, 3);
}

struct PolicyCase {
  const char* policy;
  int while_down_200;  // of 20 simultaneous requests to a 1/s rule with burst 5 and no wait window
  int while_down_503;
};

void PrintTo(const PolicyCase& pc, std::ostream* os) { *os << pc.policy; }

class RedisOutage : public RedisE2E, public ::testing::WithParamInterface<PolicyCase> {};

TEST_P(RedisOutage, PolicyDecidesWhileRedisIsDownAndLimitingResumes) {
  const PolicyCase pc = GetParam();
  json c = redis_config(upstream.port, server().port(), pc.policy);
  // 1/s with burst 5 (support/stack.hpp) and no wait window: 5 of 20 sent at once, the next token
  // a second after the first decision, so the count holds while the decisions fall within 1 s of
  // each other (200 ms at 5/s). local_divisor 1: the local policy's bucket is the same.
  c["limits"]["rules"] = json::array({paced_search_rule()});
  c["limits"]["rules"][0]["cache"] = 0;
  c["limits"]["redis"]["local_divisor"] = 1;
  auto gw = gateway(c);
  EXPECT_EQ(admitted(*gw, "/ibe/shopping/search", 20), 5);

  server().stop();
  const auto t = std::chrono::steady_clock::now();
  const auto rs = concurrent_requests(gw->port, {"GET", "/ibe/shopping/search", {}, {}}, 20);
  EXPECT_LT(std::chrono::steady_clock::now() - t, 3s);  // answered, not hung
  EXPECT_EQ(count_status(rs, 200), pc.while_down_200);
  EXPECT_EQ(count_status(rs, 503), pc.while_down_503);
  EXPECT_EQ(count_status(rs, 200) + count_status(rs, 429) + count_status(rs, 503), 20);
  if (pc.while_down_503) {
    const json problem = json::parse(rs[0].body);
    EXPECT_EQ(problem["error"], "limiter_unavailable");
    EXPECT_EQ(problem["type"], "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
    EXPECT_EQ(problem["status"], 503);
    EXPECT_EQ(rs[0].header("content-type"), "application/problem+json");
  }
  EXPECT_TRUE(gw->proc->wait_for_line("redis store incident started", 5s));
  const std::string m = http_get(gw->admin_port, "/metrics").body;
  EXPECT_NE(m.find("tollgate_store_up 0"), std::string::npos);
  // Each of the 20 decisions made while Redis was down was the policy's, and counted once.
  EXPECT_EQ(metric_series(m, "tollgate_store_failures_total", {{"policy", pc.policy}}), 20.0) << m;

  server().start();
  ASSERT_TRUE(gw->proc->wait_for_line("redis store incident ended", 10s)) << gw->proc->output();
  // The restarted Redis is empty (it keeps nothing on disk): its bucket is full again at once.
  EXPECT_EQ(admitted(*gw, "/ibe/shopping/search", 20), 5);
  const std::string out = gw->proc->output();
  EXPECT_EQ(out.find("incident started"), out.rfind("incident started"));  // logged once
}

INSTANTIATE_TEST_SUITE_P(Policies, RedisOutage,
                         ::testing::Values(PolicyCase{"fail_open", 20, 0}, PolicyCase{"fail_closed", 0, 20},
                                           PolicyCase{"local", 5, 0}),
                         [](const auto& info) { return std::string(info.param.policy); });

TEST_F(RedisE2E, SlowRedisCountsAsFailedAfterTheDecisionTimeout) {
  json c = redis_config(upstream.port, server().port(), "fail_closed");
  auto gw = gateway(c);
  ASSERT_EQ(http_get(gw->port, "/ibe/shopping/search").status, 200);
  std::thread sleeper([&] { server().cli("DEBUG SLEEP 2"); });  // Redis stalls for two seconds
  // Wait for the stall itself: a PING that gets no answer within 100 ms (it is answered after).
  auto stalled = [&] {
    const int fd = connect_loopback(server().port());
    if (fd < 0) return false;
    (void)!::send(fd, "PING\r\n", 6, MSG_NOSIGNAL);
    const bool silent = !readable(fd, 100ms);
    ::close(fd);
    return silent;
  };
  ASSERT_TRUE(eventually(stalled, 5s));
  const auto t = std::chrono::steady_clock::now();
  const auto r = http_get(gw->port, "/ibe/shopping/search");
  const auto took = std::chrono::steady_clock::now() - t;
  sleeper.join();
  EXPECT_EQ(r.status, 503);
  EXPECT_LT(took, 700ms);  // the 100 ms decision timeout, not the 2 s stall
  ASSERT_TRUE(gw->proc->wait_for_line("redis store incident ended", 10s));
  EXPECT_EQ(http_get(gw->port, "/ibe/shopping/search").status, 200);
}

// ---- one OAuth2 token for the fleet ------------------------------------------------------------

// Three gateways on one Redis, each with the supplier's OAuth2 client: their first requests, all
// at once, make one token request; a supplier 401 (every token revoked) makes one more for the
// whole fleet, whichever gateway meets it first, and each gateway's refused request is retried on
// the fleet's new token.
TEST_F(RedisE2E, AFleetMakesOneTokenRequestPerTokenAndOneAfterA401) {
  MockUpstream supplier(mock_oauth2_args());
  ASSERT_GT(supplier.port, 0);
  json c = redis_config(supplier.port, server().port());
  c["upstreams"]["ibe"]["auth"] = oauth2_auth(supplier.port);
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  for (int i = 0; i < 3; ++i) {
    fleet.push_back(std::make_unique<GatewayProcess>(c, kOauth2Env));
    ASSERT_GT(fleet.back()->port, 0) << fleet.back()->proc->output();
    ASSERT_TRUE(fleet.back()->proc->wait_for_line("redis store connected", 10s)) << fleet.back()->proc->output();
  }
  const auto all_at_once = [&](const std::string& path) {
    std::vector<std::future<int>> answers;
    for (auto& g : fleet)
      for (int i = 0; i < 10; ++i)
        answers.push_back(std::async(std::launch::async, [&, port = g->port] { return http_get(port, path).status; }));
    int ok = 0;
    for (auto& a : answers) ok += a.get() == 200;
    return ok;
  };
  EXPECT_EQ(all_at_once("/other/first"), 30);
  EXPECT_EQ(supplier.token_requests(), 1);
  double fetched = 0;
  for (auto& g : fleet)
    fetched += metric_series(*g, "tollgate_upstream_auth_refresh_total", {{"upstream", "ibe"}, {"result", "ok"}}).value_or(0);
  EXPECT_EQ(fetched, 1.0);  // one gateway asked; the other two took the fleet's token

  ASSERT_EQ(supplier.revoke_tokens(), 200);
  for (auto& g : fleet) EXPECT_EQ(http_get(g->port, "/other/after-revoke").status, 200);
  EXPECT_EQ(supplier.token_requests(), 2);
  EXPECT_EQ(supplier.auth()["unauthorized"], 3);  // each gateway's one 401, then its retry went through
  EXPECT_EQ(supplier.count("/other/after-revoke"), 6);
  EXPECT_EQ(all_at_once("/other/later"), 30);
  EXPECT_EQ(supplier.token_requests(), 2);
}

// The fleet's token request fails: the other gateway does not ask again within the token
// interval, and its callers get the 502 at once instead of waiting out their window.
TEST_F(RedisE2E, AFailedTokenRequestIsSeenByTheFleetAndNotRepeated) {
  MockUpstream supplier(mock_oauth2_args());
  ASSERT_GT(supplier.port, 0);
  ASSERT_EQ(supplier.set_auth({{"mode", "fail"}}), 200);
  json c = redis_config(supplier.port, server().port());
  c["upstreams"]["ibe"]["auth"] = oauth2_auth(supplier.port);
  c["upstreams"]["ibe"]["auth"]["token_rate"] = 0.2;  // one token request per 5 s, fleet-wide
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  for (int i = 0; i < 2; ++i) {
    fleet.push_back(std::make_unique<GatewayProcess>(c, kOauth2Env));
    ASSERT_GT(fleet.back()->port, 0) << fleet.back()->proc->output();
    ASSERT_TRUE(fleet.back()->proc->wait_for_line("redis store connected", 10s)) << fleet.back()->proc->output();
  }
  EXPECT_EQ(http_get(fleet[0]->port, "/other/a").status, 502);
  const auto t0 = std::chrono::steady_clock::now();
  const HttpResponse b = http_get(fleet[1]->port, "/other/b");
  EXPECT_EQ(b.status, 502) << b.body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1200ms);  // not its 1.5 s window
  EXPECT_EQ(supplier.token_requests(), 1);
  EXPECT_EQ(supplier.count("/other/a") + supplier.count("/other/b"), 0);
}

// Redis down: each gateway fetches its own token (the token endpoint's bucket still paces it), and
// its requests go on.
TEST_F(RedisE2E, WithRedisDownEachGatewayFetchesItsOwnToken) {
  MockUpstream supplier(mock_oauth2_args());
  ASSERT_GT(supplier.port, 0);
  ClosedPort dead;
  json c = redis_config(supplier.port, dead.port());
  c["upstreams"]["ibe"]["auth"] = oauth2_auth(supplier.port);
  GatewayProcess a(c, kOauth2Env), b(c, kOauth2Env);
  ASSERT_GT(a.port, 0) << a.proc->output();
  ASSERT_GT(b.port, 0) << b.proc->output();
  EXPECT_EQ(http_get(a.port, "/other/x").status, 200);
  EXPECT_EQ(http_get(b.port, "/other/x").status, 200);
  EXPECT_EQ(supplier.token_requests(), 2);
}

}  // namespace
}  // namespace tollgate::testing

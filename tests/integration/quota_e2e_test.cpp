// Per-client limits end to end on the embedded default (in-process store): per-client quotas, keyBy, trusted
// proxies, maxShare, with the real gateway and mock upstream processes.
#include <gtest/gtest.h>

#include <future>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Sliding windows of one second forget a burst after two seconds.
constexpr auto kForgetOneSecond = 2100ms;

int ok(const std::vector<HttpResponse>& rs) { return count_status(rs, 200); }

class QuotaE2E : public ::testing::Test {
 protected:
  std::unique_ptr<GatewayProcess> gateway(json rules, json proxy = json::object(), json limits = json::object()) {
    json c = base_config(upstream.port);
    c["limits"]["rules"] = std::move(rules);
    for (auto& [k, v] : proxy.items()) c["proxy"][k] = v;
    for (auto& [k, v] : limits.items()) c["limits"][k] = v;
    auto gw = std::make_unique<GatewayProcess>(c);
    EXPECT_GT(gw->port, 0) << gw->proc->output();
    return gw;
  }
  std::vector<HttpResponse> burst(const GatewayProcess& gw, const std::string& path, int n,
                                  std::vector<std::pair<std::string, std::string>> headers = {}) {
    return concurrent_requests(gw.port, {"GET", path, std::move(headers), {}}, n);
  }
  MockUpstream upstream;
};

TEST_F(QuotaE2E, TheOriginalExampleGivesExactlyItsCounts) {
  auto gw = gateway(quota_example_rules());
  // /login: 2 per second for this client and path.
  auto rs = burst(*gw, "/ibe/login", 10);
  EXPECT_EQ(ok(rs), 2);
  ASSERT_EQ(count_status(rs, 429), 8);
  const HttpResponse* refused = nullptr;
  for (const auto& r : rs)
    if (r.status == 429) refused = &r;
  // Every policy that applied, by name; the 429 names the one that bound.
  EXPECT_EQ(refused->header("ratelimit-policy"),
            "\"/login#q3\";q=2;w=1, \"/login#q4\";q=5;w=60, \"channel:IBE+#q1\";q=3;w=1, \"channel:IBE+#q2\";q=20;w=60");
  const json body = json::parse(refused->body);
  EXPECT_EQ(body["policy"], "/login#q3");
  EXPECT_EQ(body["kind"], "quota");
  EXPECT_EQ(body["limit"], 2);
  EXPECT_EQ(body["key_by"], "client_ip_path");
  EXPECT_GE(std::stoi(refused->header("retry-after")), 1);
  EXPECT_EQ(refused->header("ratelimit").rfind("\"/login#q3\";r=0;t=", 0), 0u) << refused->header("ratelimit");

  // The channel's per-IP quota: 3 per second across the channel's interfaces.
  std::this_thread::sleep_for(kForgetOneSecond);
  EXPECT_EQ(ok(burst(*gw, "/ibe/shopping/search", 10)), 3);
  // /login again: 2 more (4 of its 5 per minute).
  std::this_thread::sleep_for(kForgetOneSecond);
  EXPECT_EQ(ok(burst(*gw, "/ibe/login", 10)), 2);
  // Then only 1: the per-minute /login quota (5) binds.
  std::this_thread::sleep_for(kForgetOneSecond);
  rs = burst(*gw, "/ibe/login", 10);
  EXPECT_EQ(ok(rs), 1);
  int by_minute = 0;
  for (const auto& r : rs)
    if (r.status == 429 && json::parse(r.body)["policy"] == "/login#q4") ++by_minute;
  EXPECT_GE(by_minute, 1);
  // The per-IP minute (20) has 8 used: the search interface still gets its 3 per second.
  std::this_thread::sleep_for(kForgetOneSecond);
  EXPECT_EQ(ok(burst(*gw, "/ibe/shopping/search", 10)), 3);

  // Counted per policy.
  const std::string m = http_get(gw->admin_port, "/metrics").body;
  EXPECT_NE(m.find("tollgate_policy_rejections_total{policy=\"/login#q3\",rule=\"/login\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("tollgate_policy_checks_total{policy=\"channel:IBE+#q1\",result=\"passed\",rule=\"channel:IBE+\"}"),
            std::string::npos);
  EXPECT_GE(metric_value(*gw, "tollgate_client_keys"), 4);  // two per-IP counters, two per-IP+path
}

TEST_F(QuotaE2E, ASpoofedForwardedForChangesNothingFromAnUntrustedPeer) {
  json rules = json::array({{{"configId", 1}, {"interfaceUrl", "/search"}, {"status", 1},
                             {"quotas", {{{"quotaId", 1}, {"periodSeconds", 60}, {"limitCount", 2},
                                          {"algorithm", "sliding"}, {"keyBy", "client_ip"}}}}}});
  auto gw = gateway(rules);  // no trusted proxies: the client is the socket peer
  EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Forwarded-For", "198.51.100.1"}})), 1);
  EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Forwarded-For", "198.51.100.2"}})), 1);
  EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Forwarded-For", "198.51.100.3"}})), 0);  // same peer: 127.0.0.1
}

TEST_F(QuotaE2E, BehindATrustedProxyTheForwardedClientIsTheKey) {
  json rules = json::array({{{"configId", 1}, {"interfaceUrl", "/search"}, {"status", 1},
                             {"quotas", {{{"quotaId", 1}, {"periodSeconds", 60}, {"limitCount", 2},
                                          {"algorithm", "sliding"}, {"keyBy", "client_ip"}}}}}});
  auto gw = gateway(rules, {{"trusted_proxies", {"127.0.0.0/8"}}});
  const std::vector<std::pair<std::string, std::string>> a{{"X-Forwarded-For", "198.51.100.1"}};
  const std::vector<std::pair<std::string, std::string>> b{{"X-Forwarded-For", "198.51.100.2"}};
  EXPECT_EQ(ok(burst(*gw, "/search", 3, a)), 2);
  EXPECT_EQ(ok(burst(*gw, "/search", 3, b)), 2);  // another client: its own allowance
  // Client a puts a fake address in front: the proxy appended a's real one, which is what counts.
  EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Forwarded-For", "203.0.113.50, 198.51.100.1"}})), 0);
  // Two X-Forwarded-For fields are one list.
  auto r = http_request(gw->port, {"GET", "/search", {{"X-Forwarded-For", "203.0.113.60"}, {"X-Forwarded-For", "198.51.100.2"}}, {}});
  EXPECT_EQ(r.status, 429);
}

TEST_F(QuotaE2E, KeyByHeaderWithAMissingHeader) {
  json rules = json::array({{{"configId", 1}, {"interfaceUrl", "/search"}, {"status", 1},
                             {"quotas", {{{"quotaId", 1}, {"periodSeconds", 60}, {"limitCount", 1},
                                          {"algorithm", "sliding"}, {"keyBy", "header:X-Api-Key"}}}}}});
  {
    auto gw = gateway(rules);  // missing_key "anonymous" (the default): one shared key for all
    EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Api-Key", "alice"}})), 1);
    EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Api-Key", "bob"}})), 1);
    EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Api-Key", "alice"}})), 0);
    EXPECT_EQ(ok(burst(*gw, "/search", 1)), 1);  // anonymous
    EXPECT_EQ(ok(burst(*gw, "/search", 1)), 0);  // anonymous again: shared
  }
  auto gw = gateway(rules, json::object(), {{"missing_key", "reject"}});
  const int before = upstream.count("/search");
  const auto r = http_get(gw->port, "/search");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("X-Api-Key is required"), std::string::npos) << r.body;
  EXPECT_EQ(upstream.count("/search"), before);  // never forwarded
  EXPECT_EQ(ok(burst(*gw, "/search", 1, {{"X-Api-Key", "carol"}})), 1);
}

TEST_F(QuotaE2E, MaxShareKeepsASecondClientQueuedWhileTheFirstIsRefused) {
  // 10/s, one stored permit, a 1 s wait window (10 permits of queue); maxShare 0.3: 3 waiting per client.
  json rules = json::array({{{"configId", 1}, {"interfaceUrl", "/search"}, {"status", 1}, {"rateLimit", 10},
                             {"burst", 1}, {"cache", 1.0}, {"maxShare", 0.3}, {"keyBy", "header:X-Client"}}});
  auto gw = gateway(rules);
  auto heavy = std::async(std::launch::async, [&] { return burst(*gw, "/search", 8, {{"X-Client", "heavy"}}); });
  // heavy's three waiting places are taken before light asks: the first maxShare refusal says so
  // (a counter, so the check cannot miss it; a sleep would only hope).
  ASSERT_TRUE(eventually([&] {
    return metric_series(http_get(gw->admin_port, "/metrics").body, "tollgate_policy_rejections_total",
                         {{"policy", "/search#maxShare"}}).value_or(0) >= 1;
  }, 5s));
  const auto light = burst(*gw, "/search", 2, {{"X-Client", "light"}});
  const auto h = heavy.get();
  // heavy: the stored permit plus 3 waiting (perhaps one more if a slot is released during the
  // burst); the rest refused at once, naming maxShare.
  EXPECT_GE(ok(h), 4);
  EXPECT_LE(ok(h), 5);
  int share_refusals = 0;
  for (const auto& r : h)
    if (r.status == 429 && json::parse(r.body)["policy"] == "/search#maxShare") ++share_refusals;
  EXPECT_EQ(share_refusals, 8 - ok(h));
  EXPECT_EQ(ok(light), 2);  // queued behind heavy, not refused
  const std::string m = http_get(gw->admin_port, "/metrics").body;
  EXPECT_NE(m.find("tollgate_policy_rejections_total{policy=\"/search#maxShare\",rule=\"/search\"} " +
                   std::to_string(share_refusals)),
            std::string::npos) << m;
}

TEST_F(QuotaE2E, WithoutMaxShareOneClientFillsTheQueue) {
  // The control for the test above: the same burst without maxShare queues all of heavy's requests.
  json rules = json::array({{{"configId", 1}, {"interfaceUrl", "/search"}, {"status", 1}, {"rateLimit", 10},
                             {"burst", 1}, {"cache", 1.0}, {"keyBy", "header:X-Client"}}});
  auto gw = gateway(rules);
  EXPECT_EQ(ok(burst(*gw, "/search", 8, {{"X-Client", "heavy"}})), 8);
}

TEST_F(QuotaE2E, ABadQuotaIsRejectedByName) {
  json c = base_config(upstream.port);
  c["limits"]["rules"][0]["quotas"] = {{{"quotaId", 1}, {"periodSeconds", 0}, {"limitCount", 5}}};
  GatewayProcess gw(c);
  EXPECT_LT(gw.port, 0);  // the file is the only config: a bad row stops the start, explained
  EXPECT_NE(gw.proc->output().find("limits.rules[0].quotas[0].periodSeconds: must be within [1, 86400]"),
            std::string::npos) << gw.proc->output();
}

TEST_F(QuotaE2E, ABadTrustedProxyIsRefusedByName) {
  json c = base_config(upstream.port);
  c["proxy"]["trusted_proxies"] = {"10.0.0.0/8", "10.0.0.0/33"};
  GatewayProcess gw(c);
  EXPECT_LT(gw.port, 0);
  EXPECT_NE(gw.proc->output().find("proxy.trusted_proxies[1]: '10.0.0.0/33' has an invalid prefix length (0-32)"),
            std::string::npos) << gw.proc->output();
}

}  // namespace
}  // namespace tollgate::testing

// The mock upstream as a throttling supplier, end to end through the gateway.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/stack.hpp"

using nlohmann::json;
using namespace std::chrono_literals;

namespace tollgate::testing {
namespace {

// The mock upstream as a throttling supplier: its own limit per path suffix,
// 429 with Retry-After and RateLimit fields past it, changed while it runs.
TEST(MockSupplier, ThrottlesPerPathAndTakesNewRatesLive) {
  MockUpstream upstream({"--limit", "/fares=2", "--limit", "/slow=1"});
  ASSERT_GT(upstream.port, 0) << upstream.proc->output();
  json config = base_config(upstream.port);
  GatewayProcess gw(config);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  // Through the gateway (no rule on /fares): the supplier's 429s reach the client as they are.
  const auto first = concurrent_requests(gw.port, {"GET", "/ibe/fares", {}, {}}, 5, 5s);
  EXPECT_EQ(count_status(first, 200), 2);
  ASSERT_EQ(count_status(first, 429), 3);
  for (const auto& r : first) {
    if (r.status != 429) continue;
    EXPECT_EQ(r.header("retry-after"), "1");
    EXPECT_EQ(r.header("ratelimit"), "\"supplier\";r=0;t=1");
    EXPECT_EQ(json::parse(r.body)["error"], "supplier_rate_limited");
    EXPECT_EQ(r.header("x-tollgate-origin"), "");  // the supplier's, passed on as it came
  }
  const json stats = upstream.stats()["paths"]["/ibe/fares"];
  EXPECT_EQ(stats["count"], 5);
  EXPECT_EQ(stats["throttled"], 3);
  // A new allowance, live: 50/s lets the next burst of 5 through; a fixed Retry-After on another.
  const HttpResponse set = http_request(upstream.port, {"PUT", "/__limits", {}, R"({"/fares": 50, "/slow": {"rate": 1, "retry_after_s": 3}})"});
  ASSERT_EQ(set.status, 200) << set.body;
  EXPECT_EQ(count_status(concurrent_requests(gw.port, {"GET", "/ibe/fares", {}, {}}, 5, 5s), 200), 5);
  EXPECT_EQ(http_get(gw.port, "/ibe/slow").status, 200);
  const HttpResponse paused = http_get(gw.port, "/ibe/slow");
  EXPECT_EQ(paused.status, 429);
  EXPECT_EQ(paused.header("retry-after"), "3");
  EXPECT_EQ(http_request(upstream.port, {"PUT", "/__limits", {}, "[1]"}).status, 400);
}

// When a rule governs the request, the supplier's RateLimit fields follow the gateway's,
// made at least as restrictive, and the gateway's own 429s say they are the gateway's.
TEST(MockSupplier, ItsRateLimitFieldsFollowTheGatewaysNeverLooser) {
  MockUpstream upstream({"--limit", "/fares=2"});
  ASSERT_GT(upstream.port, 0) << upstream.proc->output();
  json config = base_config(upstream.port);
  config["limits"]["rules"].push_back({{"configId", 2}, {"channelType", "IBE+"}, {"interfaceUrl", "/fares"},
                                       {"rateLimit", 100}, {"cache", 0}, {"status", 1}});
  config["limits"]["rules"].push_back({{"configId", 3}, {"channelType", "IBE+"}, {"interfaceUrl", "/tight"},
                                       {"rateLimit", 1}, {"cache", 0}, {"status", 1}});
  GatewayProcess gw(config);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const auto rs = concurrent_requests(gw.port, {"GET", "/ibe/fares", {}, {}}, 5, 5s);
  ASSERT_EQ(count_status(rs, 429), 3);
  for (const auto& r : rs) {
    const std::string limit = r.header("ratelimit");
    EXPECT_EQ(limit.rfind("\"/fares\";r=", 0), 0u) << limit;  // the gateway's own item first
    EXPECT_EQ(r.header("x-tollgate-origin"), "");          // forwarded: the upstream's answer
    if (r.status != 429) {
      EXPECT_EQ(limit.find("supplier"), std::string::npos) << limit;
      continue;
    }
    // The supplier's exhausted item after ours (r 0 is already the tighter), its policy after ours.
    EXPECT_TRUE(limit.ends_with(", \"supplier\";r=0;t=1")) << limit;
    EXPECT_TRUE(r.header("ratelimit-policy").ends_with(", \"supplier\";q=2;w=1")) << r.header("ratelimit-policy");
  }
  // The gateway's own 429 is marked as such.
  EXPECT_EQ(http_get(gw.port, "/ibe/tight").status, 200);
  const HttpResponse own = http_get(gw.port, "/ibe/tight");
  EXPECT_EQ(own.status, 429);
  EXPECT_EQ(own.header("x-tollgate-origin"), "gateway");
}

}  // namespace
}  // namespace tollgate::testing

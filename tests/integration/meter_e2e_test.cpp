// Three-colour meters (algorithm srtcm / trtcm) through a real gateway and the mock upstream:
// green forwarded as is, yellow forwarded with X-Tollgate-Color: yellow (a caller's own never
// forwarded), red refused with the usual fields, and "yellow": "wait" holding for a green.
#include <gtest/gtest.h>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

json meter_config(int upstream_port, json rule) {
  json c = base_config(upstream_port);
  c["access_log"] = "stdout";
  c["limits"]["rules"] = json::array({std::move(rule)});
  return c;
}

// What the upstream saw of the request (the mock echoes its fields), or "" for a 429.
std::string color_seen(const HttpResponse& r) {
  if (r.status != 200) return "";
  const json echo = json::parse(r.body);
  for (const auto& [name, value] : echo["headers"].items())
    if (name == "X-Tollgate-Color" || name == "x-tollgate-color") return value.get<std::string>();
  return "none";
}

TEST(MeterE2E, SrtcmGreenYellowRed) {
  MockUpstream up;
  GatewayProcess gw(meter_config(up.port, {{"configId", 1}, {"interfaceUrl", "/fares"}, {"status", 1}, {"cache", 0.5},
                                           {"algorithm", "srtcm"}, {"cir", 1}, {"cbs", 3}, {"ebs", 4}}));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  std::vector<std::string> seen;
  HttpResponse last;
  for (int i = 0; i < 9; ++i) {
    // A caller that marks its own request is not believed: only the gateway says yellow.
    last = http_request(gw.port, {"GET", "/ibe/fares?echo=1", {{"X-Tollgate-Color", "green"}}, {}});
    seen.push_back(last.status == 429 ? "429" : color_seen(last));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"none", "none", "none", "yellow", "yellow", "yellow", "yellow", "429", "429"}));
  EXPECT_NE(last.header("retry-after"), "");
  const json body = json::parse(last.body);
  EXPECT_EQ(body["kind"], "srtcm");
  EXPECT_EQ(body["bucket"], "/fares");
  EXPECT_NE(last.header("ratelimit-policy").find("\"/fares\";q=1;w=1;burst=3"), std::string::npos) << last.header("ratelimit-policy");
  EXPECT_EQ(metric_series(gw, "tollgate_meter_requests_total", {{"bucket", "/fares"}, {"color", "green"}}), 3);
  EXPECT_EQ(metric_series(gw, "tollgate_meter_requests_total", {{"bucket", "/fares"}, {"color", "yellow"}}), 4);
  EXPECT_EQ(metric_series(gw, "tollgate_meter_requests_total", {{"bucket", "/fares"}, {"color", "red"}}), 2);
  const json overview = gw.admin_json("/admin/overview");
  EXPECT_EQ(overview["buckets"][0]["meter"]["algorithm"], "srtcm");
  EXPECT_EQ(overview["buckets"][0]["meter"]["requests"]["yellow"], 4);
  ASSERT_TRUE(gw.proc->wait_for_line("\"color\":\"red\"", 5s));
  EXPECT_NE(gw.proc->output().find("\"color\":\"yellow\""), std::string::npos);
}

TEST(MeterE2E, TrtcmRedOncePeakIsSpent) {
  MockUpstream up;
  GatewayProcess gw(meter_config(up.port, {{"configId", 1}, {"interfaceUrl", "/fares"}, {"status", 1},
                                           {"algorithm", "trtcm"}, {"cir", 1}, {"cbs", 2}, {"pir", 2}, {"pbs", 5}}));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  std::vector<std::string> seen;
  for (int i = 0; i < 6; ++i) {
    const HttpResponse r = http_get(gw.port, "/ibe/fares?echo=1");
    seen.push_back(r.status == 429 ? "429" : color_seen(r));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"none", "none", "yellow", "yellow", "yellow", "429"}));
}

// "yellow": "wait": requests beyond the committed burst are held for a green rather than marked,
// within the wait window; nothing arrives marked yellow.
TEST(MeterE2E, YellowWaitHoldsForAGreen) {
  MockUpstream up;
  GatewayProcess gw(meter_config(up.port, {{"configId", 1}, {"interfaceUrl", "/fares"}, {"status", 1}, {"cache", 1},
                                           {"algorithm", "srtcm"}, {"cir", 4}, {"cbs", 2}, {"ebs", 0},
                                           {"yellow", "wait"}}));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const auto start = std::chrono::steady_clock::now();
  const auto rs = concurrent_requests(gw.port, {"GET", "/ibe/fares?echo=1", {}, {}}, 8);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int ok = 0, refused = 0;
  for (const auto& r : rs) {
    if (r.status == 200) {
      ++ok;
      EXPECT_EQ(color_seen(r), "none");
    } else {
      EXPECT_EQ(r.status, 429);
      ++refused;
    }
  }
  // 2 at once, then one every 250 ms for 1 s: 4 more held; the last 2 would wait longer.
  EXPECT_EQ(ok, 6);
  EXPECT_EQ(refused, 2);
  EXPECT_GE(took, 0.9);
  EXPECT_EQ(metric_value(gw, "tollgate_held_requests"), 0);  // every hold ended
}

}  // namespace
}  // namespace tollgate::testing

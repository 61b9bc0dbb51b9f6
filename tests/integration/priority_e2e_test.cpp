// Priority classes and request cost through a fleet of real gateways on a real Redis, with the mock
// upstream counting what arrives (docs/priority.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <future>

#include "support/load.hpp"
#include "support/redis.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class PriorityE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
    RedisServer::shared().flush();
    ASSERT_GT(upstream.port, 0);
  }
  json fleet_config(json rules) {
    json c = base_config(upstream.port);
    c["threads"] = 1;
    c["limits"]["store"] = "redis";
    c["limits"]["redis"] = {{"host", "127.0.0.1"},
                            {"port", RedisServer::shared().port()},
                            {"decision_timeout_ms", 200},
                            {"key_prefix", "p" + std::to_string(getpid()) + ":"}};
    c["limits"]["rules"] = std::move(rules);
    c["proxy"]["trusted_proxies"] = json::array({"127.0.0.1"});
    return c;
  }
  void start(const json& c, int n) {
    for (int i = 0; i < n; ++i) {
      fleet.push_back(std::make_unique<GatewayProcess>(c));
      ASSERT_GT(fleet.back()->port, 0) << fleet.back()->proc->output();
      ASSERT_TRUE(fleet.back()->proc->wait_for_line("redis store connected", 10s)) << fleet.back()->proc->output();
      ports.push_back(fleet.back()->port);
    }
  }
  std::vector<std::int64_t> arrivals(const std::string& path) {
    const json paths = upstream.stats()["paths"];
    if (!paths.contains(path)) return {};
    return paths[path]["arrivals_us"].get<std::vector<std::int64_t>>();
  }
  MockUpstream upstream;
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  std::vector<int> ports;
};

const Fields kBook{{"X-Tollgate-Priority", "book"}};
const Fields kLook{{"X-Tollgate-Priority", "look"}};

// One 50/s interface, three gateways. `look` (shopping) floods at about ten times the rate; `book`
// asks at 30% of it. Bookings are all but never refused, shopping takes the rest of the allowance,
// and no window admits more than burst + rate * T (+1). Then shopping alone still gets its
// (1 - reserve) of the allowance.
TEST_F(PriorityE2E, BookingsSurviveAShoppingSurgeFleetWide) {
  start(fleet_config(json::array({{{"configId", 1},
                                   {"interfaceUrl", "/air"},
                                   {"rateLimit", 50},
                                   {"cache", 0.5},
                                   {"status", 1},
                                   {"priority",
                                    {{"by", "header:X-Tollgate-Priority"},
                                     {"classes", {"book", "look"}},
                                     {"default", "look"},
                                     {"reserve", {{"book", 0.3}}}}}}})),
        3);
  upstream.reset();
  auto book = std::async(std::launch::async, [&] { return paced_load(ports, "/ibe/air", 5.0, 2, 15s, kBook); });
  // Enough shopping clients that most find the queue full (a held one offers nothing meanwhile).
  const LoadResult look = run_load(ports, "/ibe/air", 16, 15s, 50ms, kLook);
  const LoadResult booked = book.get();
  const std::vector<std::int64_t> mixed = arrivals("/ibe/air");
  std::cout << "book: " << booked.count(200) << " admitted of " << booked.total() << "; look: " << look.count(200)
            << " admitted of " << look.total() << std::endl;
  EXPECT_EQ(booked.count(0) + look.count(0), 0);
  EXPECT_GE(booked.total(), 210);  // about 15/s for 15 s
  EXPECT_LE(booked.count(429), booked.total() / 100) << "bookings refused under a shopping surge";
  EXPECT_GT(look.total(), 15 * 50 * 5) << "shopping was not offered at several times the rate";
  ASSERT_EQ(static_cast<int>(mixed.size()), booked.count(200) + look.count(200));
  const WindowCheck w = check_windows(mixed, 50, 50);
  std::cout << "mixed: " << mixed.size() << " admitted over " << w.span_s << " s = " << 100.0 * w.share
            << "% of burst + rate*T; worst window +" << w.worst_excess << std::endl;
  EXPECT_LE(w.worst_excess, 1.0);
  EXPECT_GE(w.share, 0.97);

  // Every outcome is counted per class.
  double book_forwarded = 0, look_rejected = 0;
  for (auto& g : fleet) {
    const std::string m = http_get(g->admin_port, "/metrics").body;
    const std::string name = "tollgate_priority_requests_total";
    book_forwarded += metric_series(m, name, {{"bucket", "/air"}, {"class", "book"}, {"outcome", "forwarded"}}).value_or(0) +
                      metric_series(m, name, {{"bucket", "/air"}, {"class", "book"}, {"outcome", "delayed"}}).value_or(0);
    look_rejected += metric_series(m, name, {{"bucket", "/air"}, {"class", "look"}, {"outcome", "rejected"}}).value_or(0);
  }
  EXPECT_EQ(book_forwarded, booked.count(200));
  EXPECT_EQ(look_rejected, look.count(429));
  const json overview = fleet[0]->admin_json("/admin/overview");
  ASSERT_EQ(overview["buckets"][0]["priority"]["classes"].size(), 2u);
  EXPECT_EQ(overview["buckets"][0]["priority"]["classes"][0]["class"], "book");
  EXPECT_EQ(overview["buckets"][0]["priority"]["classes"][0]["reserve"], 0.3);

  // Shopping alone: at least (1 - reserve) of the allowance.
  std::this_thread::sleep_for(1500ms);  // the bucket refills
  upstream.reset();
  const LoadResult alone = run_load(ports, "/ibe/air", 16, 6s, 50ms, kLook);
  const std::vector<std::int64_t> only = arrivals("/ibe/air");
  const WindowCheck a = check_windows(only, 50, 50);
  std::cout << "look alone: " << only.size() << " admitted over " << a.span_s << " s = " << 100.0 * a.share
            << "% of burst + rate*T" << std::endl;
  EXPECT_EQ(static_cast<int>(only.size()), alone.count(200));
  EXPECT_LE(a.worst_excess, 1.0);
  EXPECT_GE(a.share, 0.7);
}

// A caller outside proxy.trusted_proxies cannot promote itself: its "book" is the default class.
TEST_F(PriorityE2E, AnUntrustedCallerCannotPromoteItself) {
  json c = fleet_config(json::array({{{"configId", 1},
                                      {"interfaceUrl", "/air"},
                                      {"rateLimit", 10},
                                      {"cache", 0},
                                      {"status", 1},
                                      {"priority",
                                       {{"by", "header:X-Tollgate-Priority"},
                                        {"classes", {"book", "look"}},
                                        {"default", "look"},
                                        {"reserve", {{"book", 0.5}}}}}}}));
  c["proxy"]["trusted_proxies"] = json::array({"10.9.9.9"});
  c["access_log"] = "stdout";
  start(c, 1);
  int admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += http_request(ports[0], {"GET", "/ibe/air", {{"X-Tollgate-Priority", "book"}}, {}}).status == 200;
  EXPECT_EQ(admitted, 5);  // the burst of 10, less the 5 kept for book
  // Each line names the class the request was decided as.
  ASSERT_TRUE(fleet[0]->proc->wait_for_line("\"status\":429", 5s));
  const std::string out = fleet[0]->proc->output();
  EXPECT_NE(out.find("\"class\":\"look\""), std::string::npos) << out;
  EXPECT_EQ(out.find("\"class\":\"book\""), std::string::npos);
  EXPECT_EQ(metric_series(*fleet[0], "tollgate_priority_requests_total", {{"class", "look"}, {"outcome", "rejected"}}), 5);
}

// A channel of 10/s over interfaces of cost 1 and 5, through two gateways: the channel's bound holds
// in permits (one /b takes five), and a 429 for the cost says when five would be there.
TEST_F(PriorityE2E, TheChannelBoundHoldsInPermits) {
  start(fleet_config(json::array(
            {{{"configId", 1}, {"channelType", "GDS"}, {"interfaceUrl", "/a"}, {"rateLimit", 100}, {"cache", 0.2}, {"status", 1}},
             {{"configId", 2}, {"channelType", "GDS"}, {"interfaceUrl", "/b"}, {"rateLimit", 100}, {"cache", 1},
              {"status", 1}, {"channelCost", 5}},
             {{"configId", 3}, {"channelType", "GDS"}, {"scope", "channel"}, {"rateLimit", 10}, {"status", 1}}})),
        2);
  upstream.reset();
  auto b = std::async(std::launch::async, [&] { return run_load(ports, "/ibe/b", 2, 6s); });
  const LoadResult a = run_load(ports, "/ibe/a", 1, 6s);
  const LoadResult bl = b.get();
  std::vector<std::pair<std::int64_t, int>> permits;  // arrival, permits taken
  for (std::int64_t t : arrivals("/ibe/a")) permits.emplace_back(t, 1);
  for (std::int64_t t : arrivals("/ibe/b")) permits.emplace_back(t, 5);
  std::sort(permits.begin(), permits.end());
  ASSERT_FALSE(permits.empty());
  EXPECT_GT(a.count(200), 0);
  EXPECT_GT(bl.count(200), 0);
  // Every window [i, j] of arrivals: at most burst + rate * T permits, plus the one that opened it.
  double worst = -1e9;
  for (std::size_t i = 0; i < permits.size(); ++i) {
    int sum = 0;
    for (std::size_t j = i; j < permits.size(); ++j) {
      sum += permits[j].second;
      const double t = static_cast<double>(permits[j].first - permits[i].first) / 1e6;
      worst = std::max(worst, sum - permits[i].second - (10 + 10 * t));
    }
  }
  int total = 0;
  for (const auto& p : permits) total += p.second;
  const double span = static_cast<double>(permits.back().first - permits.front().first) / 1e6;
  std::cout << "channel: " << total << " permits over " << span << " s (" << a.count(200) << " /a, " << bl.count(200)
            << " /b); worst window +" << worst << std::endl;
  EXPECT_LE(worst, 0.5);
  EXPECT_GE(total, 0.9 * (10 + 10 * span));
  // A /b refused by the channel is told when five permits would be there.
  const auto r = http_get(ports[0], "/ibe/b");
  if (r.status == 429) {
    EXPECT_EQ(json::parse(r.body)["bucket"], "channel:GDS");
  }
}

// An srTCM meter shared by two gateways on Redis under constant load: the committed bucket never
// fills, so nothing overflows into the excess one: exactly ebs yellows fleet-wide, and greens at
// the committed rate.
TEST_F(PriorityE2E, AMeterIsOneForTheFleet) {
  start(fleet_config(json::array({{{"configId", 1}, {"interfaceUrl", "/fares"}, {"status", 1}, {"cache", 0},
                                   {"algorithm", "srtcm"}, {"cir", 20}, {"cbs", 10}, {"ebs", 10}}})),
        2);
  const auto begin = std::chrono::steady_clock::now();
  const LoadResult load = run_load(ports, "/ibe/fares", 2, 5s);
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  double green = 0, yellow = 0, red = 0;
  for (auto& g : fleet) {
    const std::string m = http_get(g->admin_port, "/metrics").body;
    green += metric_series(m, "tollgate_meter_requests_total", {{"color", "green"}}).value_or(0);
    yellow += metric_series(m, "tollgate_meter_requests_total", {{"color", "yellow"}}).value_or(0);
    red += metric_series(m, "tollgate_meter_requests_total", {{"color", "red"}}).value_or(0);
  }
  std::cout << "meter: " << green << " green, " << yellow << " yellow, " << red << " red in " << t << " s" << std::endl;
  EXPECT_EQ(load.count(200), green + yellow);
  EXPECT_EQ(load.count(429), red);
  EXPECT_GT(red, 100);  // the load was well over the meter
  EXPECT_EQ(yellow, 10);
  EXPECT_LE(green, 10 + 20 * t + 1);
  EXPECT_GE(green, 0.9 * (10 + 20 * (t - 0.5)));
}

}  // namespace
}  // namespace tollgate::testing

// The adaptive rate end to end: a gateway (and a fleet of three on Redis) in front of a mock supplier that
// allows less than the rule says, at an allowance that changes while traffic flows. With
// `adaptive` the gateway follows the supplier: its 429s become the gateway's own, answered at once,
// and the supplier gets close to what it allows. Without it (the control run) the supplier refuses
// the difference. A Retry-After pauses the interface fleet-wide.
//
// Set TOLLGATE_ADAPTIVE_OUT=<dir> to keep each run's per-second series as CSV (bench/adaptive.sh
// turns them into the figures and the plot of docs/BENCHMARKS.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "support/redis.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kPath = "/ibe/shopping/search";
constexpr const char* kBucket = "/shopping/search";

std::int64_t mono_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The wall clock: a fixed-window supplier counts per calendar second of it.
std::int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A rule of 50/s (cache 0.5 s) on /shopping/search, adaptive or not, on the local or the Redis store.
json supplier_config(int upstream_port, const std::string& adaptive, int redis_port = 0) {
  json c = base_config(upstream_port);
  c["limits"]["rules"][0]["rateLimit"] = 50;
  c["limits"]["rules"][0]["cache"] = 0.5;
  c["limits"]["rules"][0]["adaptive"] = adaptive;
  if (redis_port > 0) {
    c["threads"] = 1;
    c["limits"]["store"] = "redis";
    c["limits"]["redis"] = {{"host", "127.0.0.1"}, {"port", redis_port}, {"failure_policy", "fail_open"},
                            {"decision_timeout_ms", 200}, {"key_prefix", "a" + std::to_string(getpid()) + ":"}};
  }
  return c;
}

// One request the paced client sent: when, to which gateway, and what came back.
struct Sent {
  std::int64_t at_us = 0;
  int status = 0;
  bool ours = false;  // the gateway's own answer (X-Tollgate-Origin: gateway)
  std::string retry_after;
};

// An open-loop client: `rate` requests a second, spread over the gateways in turn, each on its own
// connection from a pool of threads (a held request does not delay the next one), for `duration`.
// With `callers`, request i says it comes from callers[i % n] (X-Forwarded-For, believed from a
// loopback peer when the gateway trusts it).
class PacedClient {
 public:
  PacedClient(std::vector<int> ports, double rate, std::chrono::milliseconds duration,
              std::vector<std::string> callers = {})
      : ports_(std::move(ports)), rate_(rate), total_(static_cast<int>(rate * duration.count() / 1000.0)),
        callers_(std::move(callers)) {}
  void start() {
    t0_ = mono_us();
    for (int i = 0; i < 64; ++i) threads_.emplace_back([this] { work(); });
  }
  std::vector<Sent> join() {
    for (auto& t : threads_) t.join();
    return std::move(sent_);
  }
  // Sends nothing more (a request already on its way completes).
  void stop() { stopped_ = true; }
  std::int64_t t0() const { return t0_; }

 private:
  void work() {
    for (;;) {
      const int i = next_.fetch_add(1);
      if (i >= total_) return;
      const std::int64_t at = t0_ + static_cast<std::int64_t>(i * 1e6 / rate_);
      const std::int64_t now = mono_us();
      if (at > now) std::this_thread::sleep_for(std::chrono::microseconds(at - now));
      if (stopped_) return;
      Sent s;
      s.at_us = mono_us();
      HttpRequest req{"GET", kPath, {}, {}};
      if (!callers_.empty()) req.headers.push_back({"X-Forwarded-For", callers_[static_cast<std::size_t>(i) % callers_.size()]});
      const HttpResponse r = http_request(ports_[static_cast<std::size_t>(i) % ports_.size()], req, 5s);
      s.status = r.status;
      s.ours = r.header("x-tollgate-origin") == "gateway";
      s.retry_after = r.header("retry-after");
      std::lock_guard lock(mu_);
      sent_.push_back(std::move(s));
    }
  }
  std::vector<int> ports_;
  double rate_;
  int total_;
  std::vector<std::string> callers_;
  std::int64_t t0_ = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<int> next_{0};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::vector<Sent> sent_;
};

// The value of the bucket's effective-rate gauge on one gateway (-1: not there).
double effective_rate(const GatewayProcess& gw) {
  const std::string m = http_get(gw.admin_port, "/metrics").body;
  const std::string key = std::string("tollgate_bucket_effective_rate{bucket=\"") + kBucket + "\"} ";
  const auto at = m.find(key);
  return at == std::string::npos ? -1 : std::stod(m.substr(at + key.size()));
}

double metric_sum(const GatewayProcess& gw, const std::string& series) {
  const std::string m = http_get(gw.admin_port, "/metrics").body;
  const auto at = m.find("\n" + series + " ");
  return at == std::string::npos ? 0 : std::stod(m.substr(at + series.size() + 2));
}

struct Phase {
  double allowance;  // the supplier's requests a second
  int seconds;
  // Begins at the first whole second after the supplier next refuses once the phase before has
  // had its seconds (which runs on meanwhile, at most kWaitMost s): a rise within a second after a
  // refused probe, which the gateways find about the latest (drive prints how long after).
  bool after_refusal = false;
};
constexpr int kWaitMost = 8;

// Per second of a run: what the supplier allowed, received and refused, what the gateways refused
// themselves, and the effective rate the first gateway reported.
struct Second {
  double allowance = 0;
  int received = 0, throttled = 0, gateway_429 = 0;
  double effective = -1;
};

// A phase after its first seconds. The supplier's goodput is what it accepted over what it
// allowed in that time: its allowance times the seconds, plus the permits its bucket held at the
// start, less those it still held at the end (they are allowed later). A plain accepted / (rate * T)
// would move by up to a second's burst with the bucket's level at the window's edges. A fixed
// window holds nothing over: the seconds are its windows (see drive), each allows its allowance.
struct PhaseFigures {
  double allowance = 0;
  int received = 0, throttled = 0;
  double seconds = 0;
  double tokens_start = 0, tokens_end = 0;
  double throttled_share() const { return received ? static_cast<double>(throttled) / received : 0; }
  double goodput() const { return (received - throttled) / (allowance * seconds + tokens_start - tokens_end); }
};

struct RunResult {
  std::vector<Second> seconds;
  std::vector<PhaseFigures> settled;  // per phase, after the first `settle` seconds
  int throttled_total = 0, received_total = 0;
  // For figures by the supplier's own windows (window_figures): when each phase began and the run
  // ended (steady clock), the wall clock less the steady one, and the supplier's record of the path.
  std::vector<std::int64_t> set_at_us;
  std::int64_t end_us = 0, wall_of_mono = 0;
  json stats;
};

// Drives `fleet` at 60 requests a second through the phases, changing the supplier's allowance at
// each, and reads everything back (the phases' seconds as they ran: see Phase::after_refusal).
// `kind` is the rest of the supplier's limit (the mock's "kind", "signal", "status"; empty: its
// default token bucket with every field).
RunResult drive(const std::string& name, std::vector<std::unique_ptr<GatewayProcess>>& fleet, MockUpstream& supplier,
                const std::vector<Phase>& phases, int settle, const json& kind = json::object()) {
  int total_s = 0;  // the most the phases can take
  for (const Phase& p : phases) total_s += p.seconds + (p.after_refusal ? kWaitMost : 0);
  supplier.reset();
  std::vector<int> ports;
  for (auto& gw : fleet) ports.push_back(gw->port);
  auto set_allowance = [&](double rate) {
    json limit = kind;
    limit["rate"] = rate;
    const HttpResponse r =
        http_request(supplier.port, {"PUT", "/__limits", {}, json{{"/shopping/search", limit}}.dump()});
    EXPECT_EQ(r.status, 200) << r.body;
  };
  set_allowance(phases[0].allowance);
  PacedClient client(ports, 60, std::chrono::milliseconds(total_s * 1000));
  std::vector<double> effective(static_cast<std::size_t>(total_s), -1);
  std::vector<double> tokens(static_cast<std::size_t>(total_s) + 1, 0);  // the supplier's bucket at each second's start
  auto supplier_tokens = [&] {
    const json l = json::parse(http_get(supplier.port, "/__limits").body);
    if (!l.contains("/shopping/search")) return 0.0;
    // What a window leaves unused is lost when it ends: nothing is allowed later.
    if (l["/shopping/search"]["kind"] == "fixed_window") return 0.0;
    return l["/shopping/search"]["tokens"].get<double>();
  };
  // The run's seconds are the wall clock's: it starts on a whole second, and an answer counts in
  // the calendar second it arrived in. A fixed window's allowance is then exactly its rate a second
  // (sampled at the client's own seconds, what was left of a window counted up to a window too many:
  // 86% "used" of a 12/s window sent 11-13 a second).
  const auto first = std::chrono::ceil<std::chrono::seconds>(std::chrono::system_clock::now());
  std::this_thread::sleep_until(first);
  client.start();
  const std::int64_t t0 = client.t0();
  const std::int64_t first_s = first.time_since_epoch() / 1s;
  // The wall clock at a steady instant: the middle of two steady reads around one wall read.
  const std::int64_t m1 = mono_us(), w = wall_us(), m2 = mono_us();
  const std::int64_t wall_of_mono = w - (m1 + m2) / 2;
  tokens[0] = supplier_tokens();
  int sec = 0;
  std::vector<int> lengths(phases.size(), 0);  // each phase's seconds as it ran
  auto next_second = [&](std::size_t p) {
    const std::int64_t due = t0 + (sec + 1) * 1'000'000LL;
    while (mono_us() < due) std::this_thread::sleep_for(20ms);
    // Read before the next phase's allowance is set (a new rate starts the supplier's bucket full).
    tokens[static_cast<std::size_t>(sec) + 1] = supplier_tokens();
    effective[static_cast<std::size_t>(sec)] = effective_rate(*fleet.front());
    ++sec;
    ++lengths[p];
  };
  auto refused = [&] {
    const json paths = supplier.stats()["paths"];
    return paths.contains(kPath) ? paths[kPath]["throttled_us"].size() : std::size_t{0};
  };
  std::vector<std::int64_t> set_at(phases.size(), t0);  // when each phase's allowance was set
  for (std::size_t p = 0; p < phases.size(); ++p) {
    if (p > 0 && phases[p].after_refusal) {
      const std::size_t before = refused();
      while (refused() == before && lengths[p - 1] < phases[p - 1].seconds + kWaitMost) next_second(p - 1);
      if (refused() == before)
        ADD_FAILURE() << "no refusal within " << kWaitMost << " s before the phase at " << phases[p].allowance << "/s";
    }
    set_at[p] = mono_us();
    if (p > 0) set_allowance(phases[p].allowance);
    for (int s = 0; s < phases[p].seconds; ++s) next_second(p);
  }
  const std::int64_t end_us = mono_us();
  client.stop();
  const std::vector<Sent> sent = client.join();
  const json stats = supplier.stats()["paths"][kPath];
  // How soon after the supplier's last refusal each such phase began (within the second it came in).
  for (std::size_t p = 1; p < phases.size(); ++p) {
    if (!phases[p].after_refusal) continue;
    std::int64_t last = 0;
    for (const auto& a : stats["throttled_us"])
      if (a.get<std::int64_t>() < set_at[p]) last = std::max(last, a.get<std::int64_t>());
    std::printf("[%s] the allowance became %.0f/s %.0f ms after the supplier's last refusal\n", name.c_str(),
                phases[p].allowance, (set_at[p] - last) / 1000.0);
  }

  RunResult out;
  out.set_at_us = set_at;
  out.end_us = end_us;
  out.wall_of_mono = wall_of_mono;
  out.stats = stats;
  total_s = sec;
  out.seconds.resize(static_cast<std::size_t>(total_s));
  sec = 0;
  for (std::size_t p = 0; p < phases.size(); ++p)
    for (int s = 0; s < lengths[p]; ++s) out.seconds[static_cast<std::size_t>(sec++)].allowance = phases[p].allowance;
  auto slot = [&](std::int64_t at) -> Second* {
    const std::int64_t i = (at + wall_of_mono) / 1'000'000 - first_s;
    return i >= 0 && i < total_s ? &out.seconds[static_cast<std::size_t>(i)] : nullptr;
  };
  for (const auto& a : stats["arrivals_us"]) {
    if (Second* s = slot(a.get<std::int64_t>())) ++s->received;
    ++out.received_total;
  }
  for (const auto& a : stats["throttled_us"]) {
    if (Second* s = slot(a.get<std::int64_t>())) ++s->throttled;
    ++out.throttled_total;
  }
  for (const Sent& s : sent)
    if (s.status == 429 && s.ours)
      if (Second* x = slot(s.at_us)) ++x->gateway_429;
  for (int i = 0; i < total_s; ++i) out.seconds[static_cast<std::size_t>(i)].effective = effective[static_cast<std::size_t>(i)];
  sec = 0;
  for (std::size_t p = 0; p < phases.size(); ++p) {
    PhaseFigures f;
    f.allowance = phases[p].allowance;
    for (int s = settle; s < lengths[p]; ++s) {
      const Second& x = out.seconds[static_cast<std::size_t>(sec + s)];
      f.received += x.received;
      f.throttled += x.throttled;
    }
    f.seconds = lengths[p] - settle;
    f.tokens_start = tokens[static_cast<std::size_t>(sec + settle)];
    f.tokens_end = tokens[static_cast<std::size_t>(sec + lengths[p])];
    out.settled.push_back(f);
    sec += lengths[p];
  }
  if (const char* dir = std::getenv("TOLLGATE_ADAPTIVE_OUT")) {
    std::ofstream csv(std::string(dir) + "/" + name + ".csv");
    csv << "second,allowance,received,throttled,gateway_429,effective_rate,supplier_tokens_end\n";
    for (std::size_t i = 0; i < out.seconds.size(); ++i) {
      const Second& x = out.seconds[i];
      csv << i << ',' << x.allowance << ',' << x.received << ',' << x.throttled << ',' << x.gateway_429 << ','
          << x.effective << ',' << tokens[i + 1] << '\n';
    }
    // Each throttle the supplier answered, in ms from the start, and the gateways' log lines (cuts
    // and pauses): to read an episode request by request.
    std::ofstream events(std::string(dir) + "/" + name + ".throttles");
    events << "# t0 " << t0 << '\n';
    for (const auto& a : stats["throttled_us"]) events << (a.get<std::int64_t>() - t0) / 1000.0 << '\n';
    std::ofstream logs(std::string(dir) + "/" + name + ".log");
    for (auto& gw : fleet) logs << gw->proc->read_available();
  }
  for (const PhaseFigures& f : out.settled)
    std::printf("[%s] allowance %.0f/s: supplier received %d, refused %d (%.2f%%), accepted %.1f%% of what it allowed"
                " (%.0f/s over %.0f s, bucket %.1f -> %.1f)\n",
                name.c_str(), f.allowance, f.received, f.throttled, 100 * f.throttled_share(), 100 * f.goodput(),
                f.allowance, f.seconds, f.tokens_start, f.tokens_end);
  return out;
}

const std::vector<Phase> kPhases{{20, 14}, {35, 14}, {50, 12}};
constexpr int kSettle = 4;

// With adaptive, each phase after its first seconds: the supplier refuses at most `refused` of
// what it receives and gets at least `used` of its allowance. These are guards a loaded 2-core
// machine holds on every run (a phase sees 100 to 350 requests: one refusal is 0.3-1%; before a
// cut voided the queue granted at the old rate, the phase after the first cut from 50/s, against
// a token bucket, refused 5.85% behind three gateways in a loaded test run); the figures of a
// quiet run, and the targets (3% and 90%), are bench/adaptive.sh's (docs/adaptive-and-deadlines.md).
void expect_follows_the_supplier(const RunResult& r, double refused = 0.10, double used = 0.90) {
  for (const PhaseFigures& f : r.settled) {
    SCOPED_TRACE("allowance " + std::to_string(f.allowance));
    EXPECT_LE(f.throttled_share(), refused);
    EXPECT_GE(f.goodput(), used);
  }
}

TEST(AdaptiveE2E, OneGatewayFollowsTheSupplierAndTheControlRunDoesNot) {
  MockUpstream supplier;
  ASSERT_GT(supplier.port, 0);
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  fleet.push_back(std::make_unique<GatewayProcess>(supplier_config(supplier.port, "on")));
  ASSERT_GT(fleet[0]->port, 0) << fleet[0]->proc->output();
  const RunResult adaptive = drive("local-adaptive", fleet, supplier, kPhases, kSettle);
  expect_follows_the_supplier(adaptive);
  EXPECT_GT(metric_sum(*fleet[0], std::string("tollgate_adaptive_cuts_total{bucket=\"") + kBucket + "\"}"), 0);
  // Each cut is logged once, with its cause.
  EXPECT_TRUE(fleet[0]->proc->wait_for_line("throttled by its upstream (429)", 2s)) << fleet[0]->proc->output();

  // The control run: the same traffic without adaptive. The supplier refuses what is over its allowance.
  fleet.clear();
  fleet.push_back(std::make_unique<GatewayProcess>(supplier_config(supplier.port, "off")));
  ASSERT_GT(fleet[0]->port, 0) << fleet[0]->proc->output();
  const RunResult control = drive("local-control", fleet, supplier, kPhases, kSettle);
  EXPECT_GT(control.settled[0].throttled_share(), 0.4);  // 50/s sent to a 20/s supplier: most of the excess refused
  EXPECT_GT(control.throttled_total, 5 * adaptive.throttled_total);
}

TEST(AdaptiveE2E, ShadowWatchesWithoutChangingDecisions) {
  MockUpstream supplier;
  ASSERT_GT(supplier.port, 0);
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  fleet.push_back(std::make_unique<GatewayProcess>(supplier_config(supplier.port, "shadow")));
  ASSERT_GT(fleet[0]->port, 0) << fleet[0]->proc->output();
  const RunResult shadow = drive("local-shadow", fleet, supplier, {{20, 6}}, 2);
  // Decisions at the configured 50/s: the supplier refuses as in the control run...
  EXPECT_GT(shadow.settled[0].throttled_share(), 0.4);
  // ...while the gauge shows what adaptive would do, and the log says so.
  const double rate = effective_rate(*fleet[0]);
  EXPECT_GT(rate, 0);
  EXPECT_LT(rate, 50);
  EXPECT_TRUE(fleet[0]->proc->wait_for_line("adaptive (shadow)", 2s)) << fleet[0]->proc->output();
  const json rules = fleet[0]->admin_json("/admin/rules");
  ASSERT_TRUE(rules.contains("rules")) << rules.dump();
  const json& r0 = rules["rules"][0];
  EXPECT_EQ(r0["adaptive"], "shadow");
  ASSERT_TRUE(r0.contains("adaptive_state")) << r0.dump();
  EXPECT_LT(r0["adaptive_state"]["effective_rate"].get<double>(), 50);
  EXPECT_EQ(r0["adaptive_state"]["last_cut"]["cause"], "429");
}

// `n` gateways on config `c`; with more than one (a fleet on Redis), each once its store is connected.
std::vector<std::unique_ptr<GatewayProcess>> start_gateways(const json& c, int n) {
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  for (int i = 0; i < n; ++i) {
    fleet.push_back(std::make_unique<GatewayProcess>(c));
    EXPECT_GT(fleet.back()->port, 0) << fleet.back()->proc->output();
    if (n > 1) {
      EXPECT_TRUE(fleet.back()->proc->wait_for_line("redis store connected", 10s)) << fleet.back()->proc->output();
    }
  }
  return fleet;
}

// `n` adaptive gateways (supplier_config) in front of `supplier`: one on the in-process store, more
// on the shared test Redis, flushed first (without one, the test is skipped). The caller returns
// when the test was skipped or failed here.
void start_in_front_of(const MockUpstream& supplier, int n, std::vector<std::unique_ptr<GatewayProcess>>& fleet) {
  if (n > 1) {
    if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
    RedisServer::shared().flush();
  }
  ASSERT_GT(supplier.port, 0);
  fleet = start_gateways(supplier_config(supplier.port, "on", n > 1 ? RedisServer::shared().port() : 0), n);
}

class AdaptiveFleet : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
    RedisServer::shared().flush();
    ASSERT_GT(supplier.port, 0);
  }
  void start_fleet(const json& c) {
    fleet = start_gateways(c, 3);
    ASSERT_FALSE(HasFailure());
  }
  MockUpstream supplier;
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
};

// Three gateways on one Redis share the adapted rate: they back off and recover together.
TEST_F(AdaptiveFleet, ThreeGatewaysFollowTheSupplierTogether) {
  start_fleet(supplier_config(supplier.port, "on", RedisServer::shared().port()));
  const RunResult r = drive("redis-fleet-adaptive", fleet, supplier, kPhases, kSettle);
  expect_follows_the_supplier(r);
  // One episode is one cut for the whole fleet: the supplier's 429s that come within 0.5 s of the
  // one that began an episode (from any gateway) cut nothing more.
  double cuts = 0;
  for (auto& gw : fleet) cuts += metric_sum(*gw, std::string("tollgate_adaptive_cuts_total{bucket=\"") + kBucket + "\"}");
  std::vector<std::int64_t> refusals;
  const json stats = supplier.stats();  // kept: a range-for over a member of a temporary would dangle
  for (const auto& a : stats["paths"][kPath]["throttled_us"]) refusals.push_back(a.get<std::int64_t>());
  std::sort(refusals.begin(), refusals.end());
  int episodes = 0;
  std::int64_t began = 0;
  for (const std::int64_t t : refusals)
    if (episodes == 0 || t - began >= 500'000) {
      ++episodes;
      began = t;
    }
  EXPECT_GT(cuts, 0);
  EXPECT_LE(cuts, episodes + 1) << refusals.size() << " refusals";  // +1: Redis's clock and the supplier's differ a little
}

// Retry-After: 3 from the supplier stops the interface for 3 s on every gateway of the fleet; the
// requests that cannot wait that long get the gateway's own 429 saying when to come back.
TEST_F(AdaptiveFleet, RetryAfterPausesTheWholeFleet) {
  json c = supplier_config(supplier.port, "on", RedisServer::shared().port());
  c["limits"]["rules"][0]["rateLimit"] = 10;
  c["limits"]["rules"][0]["cache"] = 1.0;
  start_fleet(c);
  supplier.reset();
  const HttpResponse set = http_request(
      supplier.port, {"PUT", "/__limits", {}, R"({"/shopping/search": {"rate": 5, "retry_after_s": 3}})"});
  ASSERT_EQ(set.status, 200) << set.body;
  std::vector<int> ports;
  for (auto& gw : fleet) ports.push_back(gw->port);
  PacedClient client(ports, 20, 9s);
  client.start();
  const std::vector<Sent> sent = client.join();
  const json stats = supplier.stats()["paths"][kPath];
  ASSERT_GT(stats["throttled_us"].size(), 0u) << "the supplier never throttled";
  const std::int64_t first = stats["throttled_us"][0].get<std::int64_t>();
  // Nothing reached the supplier from just after its first 429 (requests already on their way
  // then) until 3 s later; the pause's jitter only makes it longer.
  int during = 0, after = 0;
  for (const auto& a : stats["arrivals_us"]) {
    const std::int64_t t = a.get<std::int64_t>();
    if (t > first + 300'000 && t < first + 3'000'000) ++during;
    if (t >= first + 3'000'000 && t < first + 5'000'000) ++after;
  }
  EXPECT_EQ(during, 0);
  EXPECT_GT(after, 0);  // and it resumed
  // The gateway's 429s in the pause say when the request would fit: its window (1 s) then
  // reaches the end of the pause.
  int told = 0;
  for (const Sent& s : sent) {
    if (s.status != 429 || !s.ours || s.at_us < first + 300'000 || s.at_us > first + 2'500'000) continue;
    ++told;
    ASSERT_FALSE(s.retry_after.empty());
    const double retry_s = std::stod(s.retry_after);
    // Not too early: by then its 1 s window reaches the end of the pause...
    EXPECT_GE(static_cast<double>(s.at_us) + (retry_s + 1.0) * 1e6, static_cast<double>(first) + 2.7e6)
        << "Retry-After " << s.retry_after << " at +" << (s.at_us - first) / 1000 << " ms";
    // ...and not later than the pause (3 s, jitter up to 0.3 s) rounded up to whole seconds.
    EXPECT_LE(static_cast<double>(s.at_us) + retry_s * 1e6, static_cast<double>(first) + 4.4e6)
        << "Retry-After " << s.retry_after << " at +" << (s.at_us - first) / 1000 << " ms";
  }
  EXPECT_GT(told, 10);
  double caught = 0, pauses = 0;
  for (auto& gw : fleet) {
    caught += metric_sum(*gw, std::string("tollgate_adaptive_paused_rejections_total{bucket=\"") + kBucket + "\"}");
    pauses += metric_sum(*gw, std::string("tollgate_adaptive_pauses_total{bucket=\"") + kBucket + "\"}");
  }
  EXPECT_GT(pauses, 0);
  EXPECT_GT(caught, 0);  // held requests the pause caught answered 429 when they woke
}

// Suppliers as airlines run them: a token bucket or fixed one-second windows (N calls per calendar
// second), refusing with Retry-After, with RateLimit fields or with nothing (a bare 429), with 429
// or 503, in front of one gateway or three on Redis. The allowance drops (20 -> 12/s), then rises
// (12 -> 30/s). The targets, from 4 s after each change, are at most 3% of what the supplier receives
// refused and at least 90% of its allowance used; bench/adaptive.sh measures them. What is guarded
// here on every run is looser (at most 10% and at least 75%: the control run refuses 40-60%).
// (A bare 503 is an outage, not a throttle: 503s carry a field.)
struct SupplierCase {
  const char* name;
  const char* kind;
  const char* signal;
  int status;
  bool fleet;
};

void PrintTo(const SupplierCase& c, std::ostream* os) { *os << c.name; }

class SupplierKinds : public ::testing::TestWithParam<SupplierCase> {};

const std::vector<Phase> kDropThenRise{{20, 12}, {12, 12}, {30, 12}};

// Drives the supplier kind `k` (one gateway, or three on Redis) through `phases` and checks the
// guards. The control run refuses 40-60% (see OneGatewayFollowsTheSupplierAndTheControlRunDoesNot).
void follows_the_kind(const SupplierCase& k, const std::string& name, const std::vector<Phase>& phases) {
  MockUpstream supplier;
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  start_in_front_of(supplier, k.fleet ? 3 : 1, fleet);
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  const RunResult r =
      drive(name, fleet, supplier, phases, kSettle, {{"kind", k.kind}, {"signal", k.signal}, {"status", k.status}});
  expect_follows_the_supplier(r, 0.10, 0.75);
}

TEST_P(SupplierKinds, FollowsADropAndARise) { follows_the_kind(GetParam(), GetParam().name, kDropThenRise); }

// The same, but the rise comes at the first whole second after a refusal (the 12/s phase runs on
// until one, at most kWaitMost s): within a second after a refused probe, when the next probe is
// about furthest off. Only bench/adaptive.sh runs it (--gtest_also_run_disabled_tests), for the
// seconds the rise took to be used: at 12/s a steady level is probed once in 3 to 5 s, within 3%
// refused, so the rise cannot be found sooner than that (docs/adaptive-and-deadlines.md). Its
// guards are the test's above.
TEST_P(SupplierKinds, DISABLED_FollowsARiseJustAfterARefusedProbe) {
  follows_the_kind(GetParam(), std::string(GetParam().name) + "-late", {{20, 12}, {12, 12}, {30, 12, true}});
}

INSTANTIATE_TEST_SUITE_P(
    Suppliers, SupplierKinds,
    ::testing::Values(SupplierCase{"window-retry_after-429-one", "fixed_window", "retry_after", 429, false},
                      SupplierCase{"window-bare-429-fleet", "fixed_window", "bare", 429, true},
                      SupplierCase{"window-ratelimit-503-one", "fixed_window", "ratelimit", 503, false},
                      SupplierCase{"bucket-bare-429-one", "token_bucket", "bare", 429, false},
                      SupplierCase{"bucket-retry_after-503-fleet", "token_bucket", "retry_after", 503, true}),
    [](const ::testing::TestParamInfo<SupplierCase>& i) {
      std::string n = i.param.name;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// A fixed-window supplier's figures by its own windows (wherever they start: `offset_ms` on a
// clock `clock_offset_ms` off the wall clock, `window_ms` long): per phase, the windows wholly inside
// it from its `settle`-th on, what arrived in them, what was refused, and what was accepted over
// what they allowed (their `per_window`, from the phase's rate).
std::vector<PhaseFigures> window_figures(const RunResult& r, const std::vector<Phase>& phases, const json& kind,
                                         int settle) {
  const std::int64_t w = kind.value("window_ms", 1000) * 1000LL;
  const std::int64_t origin = kind.value("offset_ms", 0) * 1000LL - kind.value("clock_offset_ms", 0) * 1000LL -
                              r.wall_of_mono;  // a window starts at origin + k w (steady clock)
  auto in = [&](const char* field, std::int64_t from, std::int64_t to) {
    int n = 0;
    for (const auto& a : r.stats[field]) n += a.get<std::int64_t>() >= from && a.get<std::int64_t>() < to;
    return n;
  };
  std::vector<PhaseFigures> out;
  for (std::size_t p = 0; p < phases.size(); ++p) {
    const std::int64_t begin = r.set_at_us[p], end = p + 1 < phases.size() ? r.set_at_us[p + 1] : r.end_us;
    std::int64_t k = (begin - origin + w - 1) / w + settle;  // the first whole window, then `settle` more
    PhaseFigures f;
    f.allowance = std::max(1.0, std::floor(phases[p].allowance * static_cast<double>(w) / 1e6));
    for (; origin + (k + 1) * w <= end; ++k) {
      f.received += in("arrivals_us", origin + k * w, origin + (k + 1) * w);
      f.throttled += in("throttled_us", origin + k * w, origin + (k + 1) * w);
      f.seconds += 1;  // counts windows: goodput() is accepted over per_window times windows
    }
    out.push_back(f);
  }
  return out;
}

// The matrix of suppliers that advertise nothing, which only bench/adaptive.sh runs (a cell takes 40 s with
// one-second windows, 2 min with ten-second ones): each supplier kind that refuses without saying
// what is left, its windows starting 0, 100, ..., 900 ms into the second of its clock, 1 s and
// 10 s long, in front of one gateway and of three on Redis. A token bucket has no windows: its two
// kinds run once per topology. The targets in every cell, by the supplier's own windows after the
// first of each phase (4 of 1 s, 1 of 10 s): at most 3% of what it receives refused, at least 90% of
// its allowance used.
struct MatrixCell {
  std::string name;
  json kind;
  bool fleet;
};

void PrintTo(const MatrixCell& c, std::ostream* os) { *os << c.name; }

std::vector<MatrixCell> matrix_cells() {
  std::vector<MatrixCell> cells;
  const std::vector<std::tuple<const char*, const char*, int>> windows{
      {"retry_after", "429", 429}, {"bare", "429", 429}, {"ratelimit", "503", 503}};
  for (const bool fleet : {false, true}) {
    const char* where = fleet ? "fleet" : "one";
    for (const int window_ms : {1000, 10000})
      for (const auto& [signal, code, status] : windows)
        for (int offset = 0; offset < 1000; offset += 100)
          cells.push_back({std::string("window_") + signal + "_" + code + "_w" + std::to_string(window_ms / 1000) +
                               "s_o" + std::to_string(offset) + "_" + where,
                           {{"kind", "fixed_window"}, {"signal", signal}, {"status", status}, {"window_ms", window_ms},
                            {"offset_ms", offset}},
                           fleet});
    for (const auto& [signal, status] : std::vector<std::pair<const char*, int>>{{"bare", 429}, {"retry_after", 503}})
      cells.push_back({std::string("bucket_") + signal + "_" + std::to_string(status) + "_" + where,
                       {{"kind", "token_bucket"}, {"signal", signal}, {"status", status}},
                       fleet});
  }
  return cells;
}

class Matrix : public ::testing::TestWithParam<MatrixCell> {};

// Runs the cell `c` and checks each phase by the supplier's windows: at most `refused` refused, at
// least `used` of the allowance used.
void meets(const MatrixCell& c, double refused, double used) {
  MockUpstream supplier;
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  start_in_front_of(supplier, c.fleet ? 3 : 1, fleet);
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  const bool long_windows = c.kind.value("window_ms", 1000) > 1000;
  const std::vector<Phase> phases = long_windows ? std::vector<Phase>{{20, 40}, {12, 40}, {30, 40}} : kDropThenRise;
  const RunResult r = drive(c.name, fleet, supplier, phases, kSettle, c.kind);
  if (c.kind["kind"] == "token_bucket") return expect_follows_the_supplier(r, refused, used);
  if (!long_windows) {
    // Where each gateway learned the windows start: at the supplier's offset (send times on
    // loopback), within what one request's spacing and a pause's arc leave open. In a fleet, every
    // gateway: the arc is the fleet's, learned from all their answers (and adopted by each).
    for (const auto& g : fleet) {
      const json state = g->admin_json("/admin/rules")["rules"][0]["adaptive_state"];
      ASSERT_TRUE(state["window_phase_ms"].is_number()) << state.dump();
      const double off =
          std::fmod(state["window_phase_ms"].get<double>() - c.kind.value("offset_ms", 0) + 1500.0, 1000.0) - 500;
      EXPECT_LT(std::fabs(off), 100) << state.dump();
    }
  }
  for (const PhaseFigures& f : window_figures(r, phases, c.kind, long_windows ? 1 : kSettle)) {
    std::printf("[%s] by its windows, %.0f a window: received %d, refused %d (%.2f%%), accepted %.1f%% of what "
                "%.0f windows allowed\n",
                c.name.c_str(), f.allowance, f.received, f.throttled, 100 * f.throttled_share(), 100 * f.goodput(),
                f.seconds);
    SCOPED_TRACE("allowance " + std::to_string(f.allowance) + " a window");
    EXPECT_GT(f.seconds, 0);
    EXPECT_LE(f.throttled_share(), refused);
    EXPECT_GE(f.goodput(), used);
  }
}

TEST_P(Matrix, DISABLED_MeetsTheTargets) { meets(GetParam(), 0.03, 0.90); }

// What every run guards (a loaded 2-core machine; the targets are the bench's): one-second windows
// starting half a second into the wall clock's, refusing with a bare 429, one gateway. (Before the
// gateway learned where the windows start, the 20/s phase used 76% of the allowance.)
TEST(UnalignedWindows, AreFollowedByOneGateway) {
  meets({"window_bare_429_w1s_o500_one",
         {{"kind", "fixed_window"}, {"signal", "bare"}, {"status", 429}, {"offset_ms", 500}},
         false},
        0.10, 0.80);
}

// ...and three gateways on Redis, windows starting 300 ms in: they learn where together (before
// the fleet shared it, each from its own third of the answers, the 20/s phase used 75%).
TEST(UnalignedWindows, AreFollowedByAFleet) {
  meets({"window_bare_429_w1s_o300_fleet",
         {{"kind", "fixed_window"}, {"signal", "bare"}, {"status", 429}, {"offset_ms", 300}},
         true},
        0.10, 0.80);
}

INSTANTIATE_TEST_SUITE_P(Cells, Matrix, ::testing::ValuesIn(matrix_cells()),
                         [](const ::testing::TestParamInfo<MatrixCell>& i) { return i.param.name; });

// One caller's own 429s (its per-user quota at the supplier, its bad credentials) pass through to
// it and change nothing for the others: 8 in 4 s, then 100 in 10 s, among six other callers' 30
// requests a second, with one gateway and with three on Redis.
class SingleCaller : public ::testing::TestWithParam<bool> {};

TEST_P(SingleCaller, ACallersOwn429sLeaveTheRateAlone) {
  const bool fleet_mode = GetParam();
  if (fleet_mode) {
    if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
    RedisServer::shared().flush();
  }
  MockUpstream supplier;
  ASSERT_GT(supplier.port, 0);
  json c = supplier_config(supplier.port, "on", fleet_mode ? RedisServer::shared().port() : 0);
  c["proxy"]["trusted_proxies"] = json::array({"127.0.0.1"});
  auto fleet = start_gateways(c, fleet_mode ? 3 : 1);
  ASSERT_FALSE(HasFailure());
  supplier.reset();
  const HttpResponse set = http_request(
      supplier.port, {"PUT", "/__limits", {}, R"({"/shopping/search": {"rate": 100, "refuse_callers": ["10.0.0.99"]}})"});
  ASSERT_EQ(set.status, 200) << set.body;
  std::vector<int> ports;
  for (auto& gw : fleet) ports.push_back(gw->port);
  PacedClient others(ports, 30, 16s, {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"});
  others.start();
  std::this_thread::sleep_for(1s);
  PacedClient few(ports, 2, 4s, {"10.0.0.99"});
  few.start();
  std::vector<Sent> own = few.join();
  PacedClient many(ports, 10, 10s, {"10.0.0.99"});
  many.start();
  for (Sent& x : many.join()) own.push_back(x);
  const std::vector<Sent> rest = others.join();
  // The caller got the supplier's 429s, all 108 of them...
  int supplier_429 = 0;
  for (const Sent& x : own) supplier_429 += x.status == 429 && !x.ours;
  EXPECT_EQ(supplier_429, 108);
  // ...and nothing changed for anyone: no cut, the rule's rate, every other request forwarded.
  double cuts = 0, unconfirmed = 0;
  for (auto& gw : fleet) {
    cuts += metric_sum(*gw, std::string("tollgate_adaptive_cuts_total{bucket=\"") + kBucket + "\"}");
    unconfirmed += metric_sum(*gw, std::string("tollgate_adaptive_unconfirmed_total{bucket=\"") + kBucket + "\"}");
    EXPECT_EQ(effective_rate(*gw), 50);
  }
  EXPECT_EQ(cuts, 0);
  EXPECT_GT(unconfirmed, 50);  // each counted (but those within a cut's debounce: there was none)
  int forwarded = 0;
  for (const Sent& x : rest) forwarded += x.status == 200;
  EXPECT_EQ(forwarded, static_cast<int>(rest.size()));
}

INSTANTIATE_TEST_SUITE_P(Topologies, SingleCaller, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "fleet" : "one"; });

// A supplier that says on every answer what is left of its window (tools/mock_upstream's
// "advertise"), its windows starting anywhere in the second: the gateways pace on it and send no
// more than it advertises. Guards a loaded 2-core machine holds; the targets (0.1% refused, 98%
// used) are the bench's.
struct AdvertisingCase {
  const char* name;
  json kind;         // the supplier's limit options
  int gateways;      // 1: the local store; 3: on Redis
  std::vector<Phase> phases;
  double refused;    // at most this share refused, past each phase's first seconds
  double used;       // at least this share of the allowance used
};

class AdvertisingSupplier : public ::testing::TestWithParam<AdvertisingCase> {};

// The most the supplier accepted within any `span_us` (its accepted answers' arrival times), from
// `skip_us` after the first on (before its first answer, nothing was advertised).
int most_within(const json& accepted_us, std::int64_t span_us, std::int64_t skip_us) {
  std::vector<std::int64_t> at;
  for (const auto& a : accepted_us) at.push_back(a.get<std::int64_t>());
  std::sort(at.begin(), at.end());
  if (!at.empty()) std::erase_if(at, [from = at.front() + skip_us](std::int64_t t) { return t < from; });
  int most = 0;
  for (std::size_t i = 0, j = 0; j < at.size(); ++j) {
    while (at[j] - at[i] >= span_us) ++i;
    most = std::max(most, static_cast<int>(j - i + 1));
  }
  return most;
}

TEST_P(AdvertisingSupplier, IsPacedOnWhatItSaysIsLeft) {
  const AdvertisingCase& c = GetParam();
  MockUpstream supplier;
  std::vector<std::unique_ptr<GatewayProcess>> fleet;
  start_in_front_of(supplier, c.gateways, fleet);
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  const RunResult r = drive(c.name, fleet, supplier, c.phases, 2, c.kind);
  expect_follows_the_supplier(r, c.refused, c.used);
  // Read and shown: the supplier's allowance per window, as advertised.
  const json rules = fleet[0]->admin_json("/admin/rules");
  ASSERT_TRUE(rules.contains("rules")) << rules.dump();
  const json supplier_state = rules["rules"][0]["adaptive_state"]["supplier"];
  ASSERT_TRUE(supplier_state.is_object()) << rules.dump();
  const int window_s = c.kind.value("window_ms", 1000) / 1000;
  EXPECT_EQ(supplier_state["limit"].get<double>(), c.phases.back().allowance * window_s);
  EXPECT_EQ(supplier_state["ignored"].get<double>(), 0);
  if (window_s > 1) {
    // Spread over the window, not spent at its start: past the first window, a tenth of a window
    // gets about a tenth of its allowance (a burst of one second's pace at most, and the ends of
    // two windows).
    const double per_window = c.phases.back().allowance * window_s;
    const json stats = supplier.stats();
    EXPECT_LE(most_within(stats["paths"][kPath]["accepted_us"], window_s * 100'000, window_s * 1'000'000),
              0.35 * per_window);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, AdvertisingSupplier,
    ::testing::Values(
        // One-second windows starting 370 ms into the second, IETF fields (t in whole seconds,
        // rounded up); a drop and a rise.
        AdvertisingCase{"advertised-ietf-1s-one",
                        {{"kind", "fixed_window"}, {"offset_ms", 370}, {"advertise", "ietf"}},
                        1, {{20, 8}, {12, 8}, {30, 8}}, 0.01, 0.90},
        // Ten-second windows of 100 starting 2.3 s in, X-RateLimit-* with a Unix reset by a
        // supplier clock 0.7 s behind, three gateways on Redis.
        AdvertisingCase{"advertised-x-10s-fleet",
                        {{"kind", "fixed_window"}, {"window_ms", 10000}, {"offset_ms", 2300},
                         {"clock_offset_ms", -700}, {"advertise", "x"}},
                        3, {{10, 24}}, 0.01, 0.80}),
    [](const ::testing::TestParamInfo<AdvertisingCase>& i) {
      std::string n = i.param.name;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace tollgate::testing

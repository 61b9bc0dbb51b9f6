// Deadline-aware admission: the budget headers, the latency estimate, and the plans they give.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "tollgate/proxy/deadline.hpp"
#include "tollgate/proxy/request_policy.hpp"

namespace tollgate::proxy {
namespace {

TEST(Deadline, GrpcTimeout) {
  EXPECT_EQ(parse_grpc_timeout("250m"), 250'000);
  EXPECT_EQ(parse_grpc_timeout("1S"), 1'000'000);
  EXPECT_EQ(parse_grpc_timeout("2M"), 120'000'000);
  EXPECT_EQ(parse_grpc_timeout("1H"), 3'600'000'000);
  EXPECT_EQ(parse_grpc_timeout("1500u"), 1'500);
  EXPECT_EQ(parse_grpc_timeout("1500000n"), 1'500);
  EXPECT_EQ(parse_grpc_timeout("99999999m"), 99'999'999'000);
  for (const char* bad : {"", "m", "250", "250ms", "-1S", "1.5S", "123456789m", " 1S", "1s", "1x"})
    EXPECT_FALSE(parse_grpc_timeout(bad)) << bad;
  EXPECT_EQ(grpc_timeout_text(250'000), "250000u");
  EXPECT_EQ(grpc_timeout_text(200'000'000), "200000m");
  EXPECT_EQ(grpc_timeout_text(-5), "0u");
  for (std::int64_t us : {0LL, 1LL, 99'999'999LL, 100'000'000LL, 5'000'000'000LL, 900'000'000'000'000LL}) {
    const auto back = parse_grpc_timeout(grpc_timeout_text(us));
    ASSERT_TRUE(back) << us;
    EXPECT_LE(*back, us);  // never more than was left
  }
}

TEST(Deadline, RequestTimeoutSeconds) {
  EXPECT_EQ(parse_request_timeout("0.5"), 500'000);
  EXPECT_EQ(parse_request_timeout("2"), 2'000'000);
  EXPECT_EQ(parse_request_timeout("0"), 0);
  EXPECT_EQ(parse_request_timeout("0.000001"), 1);
  EXPECT_EQ(parse_request_timeout("86400"), 86'400'000'000);
  for (const char* bad : {"", ".5", "5.", "-1", "1e3", "1.0000001", "86401", "0x10", " 1", "1 "})
    EXPECT_FALSE(parse_request_timeout(bad)) << bad;
}

TEST(Deadline, TheShorterBudgetCountsAndBadOnesAreExplained) {
  Budget b;
  bool present = true;
  EXPECT_FALSE(read_budget("", "", b, present));
  EXPECT_FALSE(present);
  EXPECT_FALSE(read_budget("300m", "0.1", b, present));
  EXPECT_TRUE(present);
  EXPECT_EQ(b.us, 100'000);
  EXPECT_TRUE(b.grpc && b.request_timeout);
  EXPECT_FALSE(read_budget("", "2", b, present));
  EXPECT_EQ(b.us, 2'000'000);
  EXPECT_FALSE(b.grpc);
  const auto why = read_budget("soon", "", b, present);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("grpc-timeout"), std::string::npos);
  EXPECT_NE(read_budget("", "later", b, present)->find("Request-Timeout"), std::string::npos);
  // The longest gRPC budget is capped at a day (a clock reading plus it must not overflow).
  EXPECT_FALSE(read_budget("99999999H", "", b, present));
  EXPECT_EQ(b.us, kMaxBudgetUs);
}

TEST(LatencyEstimate, NinetiethPercentileOverTheLastMinute) {
  LatencyEstimate e;
  const std::int64_t t0 = 1'000'000'000;
  EXPECT_FALSE(e.p90_us(t0));
  // 90 fast answers (2 ms) and 10 slow ones (80 ms) in the first slot.
  for (int i = 0; i < 90; ++i) e.record(2'000, t0);
  for (int i = 0; i < 10; ++i) e.record(80'000, t0);
  EXPECT_FALSE(e.p90_us(t0 + 1'000'000));  // computed when the next slot begins
  const auto p90 = e.p90_us(t0 + LatencyEstimate::kSlotUs);
  ASSERT_TRUE(p90);
  // The 90th of 100 is a fast one: the upper edge of its bin, within a bin's width (25%).
  EXPECT_GE(*p90, 2'000);
  EXPECT_LE(*p90, 2'500);
  // More slow answers: the p90 moves up to them.
  for (int i = 0; i < 100; ++i) e.record(80'000, t0 + LatencyEstimate::kSlotUs);
  const auto later = e.p90_us(t0 + 2 * LatencyEstimate::kSlotUs);
  ASSERT_TRUE(later);
  EXPECT_GE(*later, 80'000);
  EXPECT_LE(*later, 100'000);
  // A minute with nothing: no data again.
  EXPECT_FALSE(e.p90_us(t0 + 15 * LatencyEstimate::kSlotUs));
}

TEST(LatencyEstimate, AFewSlowAnswersAreNoEstimate) {
  // Three slow calls alone once set the p90 to them for a minute: too few answers to say anything.
  LatencyEstimate e;
  const std::int64_t t0 = 1'000'000'000;
  for (int i = 0; i < 3; ++i) e.record(2'900'000, t0);
  EXPECT_FALSE(e.p90_us(t0 + LatencyEstimate::kSlotUs));
  for (std::uint64_t i = 3; i < LatencyEstimate::kMinSamples; ++i) e.record(2'900'000, t0 + LatencyEstimate::kSlotUs);
  const auto p90 = e.p90_us(t0 + 2 * LatencyEstimate::kSlotUs);
  ASSERT_TRUE(p90);
  EXPECT_GE(*p90, 2'900'000);
}

TEST(LatencyEstimate, ProbesAreTheFirstRefusalOfASlotAndOneInTen) {
  LatencyEstimate e;
  const std::int64_t t0 = 1'000'000'000;
  std::vector<int> probes;
  for (int i = 0; i < 30; ++i)
    if (e.take_probe(t0)) probes.push_back(i);
  EXPECT_EQ(probes, (std::vector<int>{0, 9, 19, 29}));
  // A new slot: its first refusal probes again.
  EXPECT_TRUE(e.take_probe(t0 + LatencyEstimate::kSlotUs));
  EXPECT_FALSE(e.take_probe(t0 + LatencyEstimate::kSlotUs));
}

TEST(LatencyEstimate, BinsCoverTheRangeInOrder) {
  EXPECT_EQ(LatencyEstimate::bin_of(0), 0);
  EXPECT_EQ(LatencyEstimate::bin_of(100), 0);
  int last = 0;
  for (std::int64_t us = 101; us < 100'000'000; us = us * 11 / 10 + 1) {
    const int b = LatencyEstimate::bin_of(us);
    EXPECT_GE(b, last);
    if (b < LatencyEstimate::kBins - 1) {
      EXPECT_LE(us, LatencyEstimate::bin_upper_us(b)) << us;
    }
    if (b > 0 && b < LatencyEstimate::kBins - 1) {
      EXPECT_GT(us, LatencyEstimate::bin_upper_us(b - 1)) << us;
    }
    last = b;
  }
  EXPECT_EQ(LatencyEstimate::bin_of(1'000'000'000'000), LatencyEstimate::kBins - 1);
}

class NoHeaders final : public HeaderSource {
 public:
  std::optional<std::string_view> find(std::string_view) const override { return std::nullopt; }
  std::string joined(std::string_view) const override { return {}; }
};

struct DeadlinePlans : ::testing::Test {
  TrustedProxies trusted;
  PolicySettings settings{100, 10, &trusted, MissingKey::anonymous};
  NoHeaders headers;
  Metrics metrics;
  std::shared_ptr<const config::Snapshot> snap;
  std::shared_ptr<const RuleViews> views;
  DeadlinePlans() {
    config::RawRow r;
    r.config_id = 1;
    r.interface_url = "/search";
    r.rate_limit = 5;
    r.cache = 1.0;
    r.status = 1;
    snap = config::make_snapshot(config::validate_rows({r}), 1, "test");
    views = std::make_shared<const RuleViews>(snap, metrics);
    settings.default_latency_us = 50'000;
  }
  void plan(const Budget* budget, Plan& out, std::int64_t now_us = 0) {
    const RequestFacts facts{"/search", "10.0.0.1", headers, 0, budget, now_us};
    plan_request(facts, views.get(), config::SwitchMode::enforce, settings, out);
  }
};

TEST_F(DeadlinePlans, NoBudgetKeepsTheRulesWindow) {
  Plan p;
  plan(nullptr, p);
  EXPECT_EQ(p.step, Step::decide);
  EXPECT_EQ(p.request.timeout_us, 1'000'000);
  EXPECT_FALSE(p.deadline_bound);
}

TEST_F(DeadlinePlans, ABudgetShortensTheWaitByTheLatencyNeverLengthensIt) {
  Budget b{300'000, false, true};
  Plan p;
  plan(&b, p);
  EXPECT_EQ(p.step, Step::decide);
  EXPECT_EQ(p.request.timeout_us, 250'000);  // 300 ms - the 50 ms default latency
  EXPECT_TRUE(p.deadline_bound);
  Budget longer{10'000'000, true, false};
  Plan q;
  plan(&longer, q);
  EXPECT_EQ(q.request.timeout_us, 1'000'000);  // the rule's cache, not more
  EXPECT_FALSE(q.deadline_bound);
}

TEST_F(DeadlinePlans, ABudgetUnderTheLatencyIsRefusedBeforeTheStore) {
  Budget b{40'000, false, true};
  Plan p;
  plan(&b, p);
  EXPECT_EQ(p.step, Step::too_late);
  EXPECT_EQ(p.outcome, Outcome::rejected);
  const Verdict v = too_late_verdict(p, b);
  EXPECT_EQ(v.action, Action::reject);
  EXPECT_EQ(v.retry_after_s, 1);
  const auto j = nlohmann::json::parse(v.body);
  EXPECT_EQ(j["error"], "deadline_too_short");
  EXPECT_EQ(j["budget_ms"], 40);
  EXPECT_EQ(j["upstream_latency_p90_ms"], 50);
}

TEST_F(DeadlinePlans, TheInterfacesMeasuredLatencyReplacesTheDefault) {
  LatencyEstimate& e = views->metrics_of(snap->rules[0]).upstream_latency;
  const std::int64_t t0 = 1'000'000'000;
  for (int i = 0; i < 50; ++i) e.record(200'000, t0);  // a slow interface: 200 ms
  Budget b{300'000, false, true};
  Plan p;
  plan(&b, p, t0 + LatencyEstimate::kSlotUs);
  EXPECT_EQ(p.step, Step::decide);
  EXPECT_GE(p.latency_us, 200'000);
  EXPECT_LE(p.request.timeout_us, 100'000);
  Budget tight{150'000, false, true};
  Plan probe;  // the slot's first request the estimate refuses goes ahead as a probe
  plan(&tight, probe, t0 + LatencyEstimate::kSlotUs);
  EXPECT_TRUE(probe.probe);
  Plan q;
  plan(&tight, q, t0 + LatencyEstimate::kSlotUs);
  EXPECT_EQ(q.step, Step::too_late);
  EXPECT_FALSE(q.probe);
}

TEST_F(DeadlinePlans, RefusalsByAMeasuredEstimateLetProbesThroughThatRefreshIt) {
  // Slow answers (2.9 s) make a 2 s budget too short; refused requests add no answers, so without
  // probes the estimate would refuse every such request until the slow answers left the window.
  LatencyEstimate& e = views->metrics_of(snap->rules[0]).upstream_latency;
  std::int64_t now = 1'000'000'000;
  for (int i = 0; i < 20; ++i) e.record(2'900'000, now);
  now += LatencyEstimate::kSlotUs;
  Budget b{2'000'000, true, false};
  int refused = 0, probes = 0;
  for (int i = 0; i < 40; ++i) {
    Plan p;
    plan(&b, p, now);
    if (p.step == Step::too_late) {
      ++refused;
      continue;
    }
    ASSERT_EQ(p.step, Step::decide);
    EXPECT_TRUE(p.probe);
    EXPECT_EQ(p.request.timeout_us, 0);  // an immediate permit or nothing
    ++probes;
    e.record(30'000, now);  // the upstream has recovered: the probe is answered in 30 ms
  }
  EXPECT_EQ(probes, 5);  // the slot's first refusal, then every tenth (the 10th, 20th, 30th, 40th)
  EXPECT_EQ(refused, 35);
  // The probes' answers are the only ones of the next slots: once the slow ones leave the window
  // (or are outnumbered), the budget fits again.
  for (int slot = 1; slot <= LatencyEstimate::kSlots; ++slot) {
    now += LatencyEstimate::kSlotUs;
    for (int i = 0; i < 40; ++i) {
      Plan p;
      plan(&b, p, now);
      if (p.step == Step::decide) e.record(30'000, now);
    }
  }
  Plan after;
  plan(&b, after, now);
  EXPECT_EQ(after.step, Step::decide);
  EXPECT_FALSE(after.probe);
  EXPECT_LT(after.latency_us, 100'000);
}

TEST_F(DeadlinePlans, TheDefaultLatencyIsNeverProbed) {
  // Without answers there is nothing to refresh: a budget under the default is refused every time.
  Budget b{10'000, false, true};
  for (int i = 0; i < 20; ++i) {
    Plan p;
    plan(&b, p);
    EXPECT_EQ(p.step, Step::too_late) << i;
  }
}

TEST_F(DeadlinePlans, TheStoresRefusalSaysTheDeadlineCutTheWait) {
  Budget b{300'000, false, true};
  Plan p;
  plan(&b, p);
  store::StoreDecision sd;
  sd.decision.granted = false;
  sd.decision.retry_after_us = 400'000;
  const Verdict v = verdict_for(p, sd);
  EXPECT_EQ(v.action, Action::reject);
  EXPECT_EQ(v.retry_after_s, 1);
  const auto j = nlohmann::json::parse(v.body);
  EXPECT_EQ(j["deadline_wait_ms"], 250);
  EXPECT_EQ(j["error"], "rate_limited");
}

TEST_F(DeadlinePlans, OffInTheConfigMeansIgnored) {
  settings.deadlines = false;
  Budget b{1'000, false, true};
  Plan p;
  plan(&b, p);
  EXPECT_EQ(p.step, Step::decide);
  EXPECT_EQ(p.request.timeout_us, 1'000'000);
}

}  // namespace
}  // namespace tollgate::proxy

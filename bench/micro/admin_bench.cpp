// Google Benchmark: what an open console costs the admin listener at 20,000 rules, with the
// history ring full and ~1,500 of the rules busy in its five minutes: /admin/overview and
// /admin/history as the console asks for them (no parameters: the busiest first, a page of them),
// and one bucket's history. Counters: the answer's size in KB.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "tollgate/admin/admin_api.hpp"
#include "tollgate/admin/history.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/store/local_store.hpp"

namespace {

using namespace tollgate;

constexpr int kRules = 20'000;

std::string url(int i) { return "/svc/interface-" + std::to_string(i); }

// One gateway's admin side, built once: the rules, five minutes of samples with five buckets
// busy each second.
struct AdminAt20k {
  limiter::SteadyClock clock;
  config::SnapshotHolder snapshots;
  config::SwitchState switch_state{config::SwitchMode::enforce, "file"};
  store::LocalStore store{clock};
  proxy::Metrics metrics;
  std::unique_ptr<admin::History> history;
  std::unique_ptr<admin::AdminApi> api;

  AdminAt20k() {
    std::vector<config::RawRow> rows;
    for (int i = 1; i <= kRules; ++i) {
      config::RawRow r;
      r.config_id = i;
      r.interface_url = url(i);
      r.rate_limit = 10;
      r.status = 1;
      rows.push_back(r);
    }
    snapshots.set(config::make_snapshot(config::validate_rows(std::move(rows)), 1, "bench"));
    history = std::make_unique<admin::History>(metrics, snapshots);
    api = std::make_unique<admin::AdminApi>(admin::AdminDeps{snapshots, switch_state, store, metrics, "t", "", nullptr,
                                                             nullptr, nullptr, nullptr, history.get()});
    for (int s = 0; s < static_cast<int>(admin::History::kSeconds); ++s) {
      for (int k = 0; k < 5; ++k) metrics.bucket(url(1 + (s * 7 + k * 131) % kRules)).count(proxy::Outcome::forwarded);
      history->sample(static_cast<std::int64_t>(s) * 1000);
    }
  }
  static AdminAt20k& get() {
    static AdminAt20k a;
    return a;
  }
};

void answer(benchmark::State& state, const char* target) {
  AdminAt20k& a = AdminAt20k::get();
  std::size_t bytes = 0;
  for (auto _ : state) {
    const admin::SimpleResponse r = a.api->handle({"GET", target, "", "", "127.0.0.1"});
    if (r.status != 200) state.SkipWithError(("status " + std::to_string(r.status)).c_str());
    bytes = r.body.size();
    benchmark::DoNotOptimize(r.body.data());
  }
  state.counters["KB"] = static_cast<double>(bytes) / 1000.0;
}

void BM_AdminOverview20k(benchmark::State& state) { answer(state, "/admin/overview"); }
void BM_AdminHistory20k(benchmark::State& state) { answer(state, "/admin/history"); }
void BM_AdminHistoryOneBucket20k(benchmark::State& state) {
  answer(state, "/admin/history?bucket=%2Fsvc%2Finterface-131");
}
BENCHMARK(BM_AdminOverview20k)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AdminHistory20k)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AdminHistoryOneBucket20k)->Unit(benchmark::kMillisecond);

}  // namespace

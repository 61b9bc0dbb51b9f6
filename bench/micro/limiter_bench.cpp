// Google Benchmark: one decision in the in-process store, uncontended and with threads on one
// bucket; with a per-client key and quotas; suffix lookup against 10, 1,000 and 100,000
// rules; memory of idle buckets and of 100,000 client keys under a cap.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tollgate/config/suffix_index.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/store/local_store.hpp"

namespace {

using namespace tollgate;

limiter::BucketParams never_binds() {
  limiter::BucketParams p;
  p.rate = 1e6;
  p.burst = 1e12;
  return p;
}

// The pure arithmetic alone.
void BM_TryAcquireArithmetic(benchmark::State& state) {
  const limiter::Shape shape = limiter::shape_of(never_binds());
  limiter::BucketState st = limiter::full_state(shape, 0);
  limiter::Micros now = 0;
  for (auto _ : state) {
    auto d = limiter::try_acquire(st, shape, limiter::Mode::pay_now, 1, 500000, ++now);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_TryAcquireArithmetic);

// One decision through the store: shard lookup, lock, arithmetic, steady clock read.
void BM_LocalStoreDecision(benchmark::State& state) {
  static limiter::SteadyClock clock;
  static store::LocalStore s(clock);
  const store::AcquireRequest req{{"/shopping/search", never_binds()}, {}, {}, 1, 500000};
  for (auto _ : state) {
    auto d = s.decide(req);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_LocalStoreDecision)->Threads(1)->Threads(2)->UseRealTime();

// A rule with its bucket, two per-client quotas (1 s and 60 s) and maxShare, for one of
// 10,000 clients in turn: client table lookups, windows, one more lock set.
void BM_LocalStoreDecisionWithQuotas(benchmark::State& state) {
  static limiter::SteadyClock clock;
  static store::LocalStore s(clock);
  std::vector<store::AcquireRequest> reqs;
  for (int i = 0; i < 10'000; ++i) {
    store::AcquireRequest r{{"/shopping/search", never_binds()}, {}, "/shopping/search", 1, 500000};
    const std::string ip = "10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256);
    r.quotas = {{"q:1:" + ip, {1'000'000, 1'000'000'000, limiter::WindowAlgorithm::fixed}, false},
                {"q:2:" + ip, {60'000'000, 1'000'000'000, limiter::WindowAlgorithm::sliding}, false}};
    r.share = store::ShareRef{"s:1:" + ip, 3};
    reqs.push_back(std::move(r));
  }
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 5'000;
  for (auto _ : state) {
    auto d = s.decide(reqs[i++ % reqs.size()]);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_LocalStoreDecisionWithQuotas)->Threads(1)->Threads(2)->UseRealTime();

void BM_SuffixLookup(benchmark::State& state) {
  config::SuffixIndex idx;
  const auto n = static_cast<std::size_t>(state.range(0));
  for (std::size_t i = 0; i < n; ++i) idx.add("/svc" + std::to_string(i) + "/op", i);
  idx.add("/shopping/search", n);
  const std::string path = "/api/v2/shopping/search";
  for (auto _ : state) benchmark::DoNotOptimize(idx.match(path));
}
BENCHMARK(BM_SuffixLookup)->Arg(10)->Arg(1000)->Arg(100000);

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

// Memory of 100,000 distinct idle buckets in the in-process store (reported as counters).
void BM_IdleBucketsMemory(benchmark::State& state) {
  for (auto _ : state) {
    limiter::SteadyClock clock;
    const long before = rss_kib();
    auto* s = new store::LocalStore(clock);
    limiter::BucketParams p;
    p.rate = 5;
    std::vector<std::string> names;
    names.reserve(100000);
    for (int i = 0; i < 100000; ++i) names.push_back("/interface/" + std::to_string(i) + "/search");
    const long with_names = rss_kib();
    for (const auto& n : names) s->decide({{n, p}, {}, {}, 1, 0});
    const long after = rss_kib();
    state.counters["buckets"] = static_cast<double>(s->size());
    state.counters["store_MiB"] = static_cast<double>(after - with_names) / 1024.0;
    state.counters["bytes_per_bucket"] = static_cast<double>(after - with_names) * 1024.0 / 100000.0;
    state.counters["names_MiB"] = static_cast<double>(with_names - before) / 1024.0;
    delete s;
  }
}
BENCHMARK(BM_IdleBucketsMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

// 100,000 distinct clients, each with a 60 s quota counter, against a cap of 10,000 and
// with no cap in the way (100,000): entries kept, RSS, bytes per entry.
void BM_ClientKeysMemory(benchmark::State& state) {
  const auto cap = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    limiter::SteadyClock clock;
    std::vector<store::AcquireRequest> reqs;
    reqs.reserve(100'000);
    for (int i = 0; i < 100'000; ++i) {
      store::AcquireRequest r{{"/login", {}}, {}, "/login", 1, 0};
      r.use_bucket = false;
      r.quotas = {{"q:1:10." + std::to_string(i / 65536) + "." + std::to_string(i / 256 % 256) + "." +
                       std::to_string(i % 256) + " /login",
                   {60'000'000, 5, limiter::WindowAlgorithm::sliding}, false}};
      reqs.push_back(std::move(r));
    }
    const long before = rss_kib();
    auto* s = new store::LocalStore(clock, cap);
    for (const auto& r : reqs) s->decide(r);
    const long after = rss_kib();
    state.counters["client_keys"] = static_cast<double>(s->client_keys());
    state.counters["store_MiB"] = static_cast<double>(after - before) / 1024.0;
    state.counters["bytes_per_key"] = static_cast<double>(after - before) * 1024.0 / static_cast<double>(s->client_keys());
    delete s;
  }
}
BENCHMARK(BM_ClientKeysMemory)->Arg(10'000)->Arg(100'000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

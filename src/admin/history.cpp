#include "tollgate/admin/history.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace tollgate::admin {

using nlohmann::json;

std::optional<double> histogram_quantile(double q, const std::vector<double>& bounds,
                                         const std::vector<double>& cumulative) {
  if (cumulative.empty() || bounds.size() != cumulative.size()) return std::nullopt;
  const double total = cumulative.back();
  if (!(total > 0)) return std::nullopt;
  const double rank = std::clamp(q, 0.0, 1.0) * total;
  std::size_t i = 0;
  while (i + 1 < cumulative.size() && cumulative[i] < rank) ++i;
  const double lower = i == 0 ? 0.0 : bounds[i - 1];
  if (std::isinf(bounds[i])) return lower;  // past the highest finite bound: that bound
  const double below = i == 0 ? 0.0 : cumulative[i - 1];
  const double in_bucket = cumulative[i] - below;
  if (!(in_bucket > 0)) return bounds[i];
  return lower + (bounds[i] - lower) * (rank - below) / in_bucket;
}

namespace {

// A histogram's cumulative counts per bound (the +Inf one last).
std::vector<double> cumulative_counts(const prometheus::Histogram& h) {
  const prometheus::ClientMetric m = h.Collect();
  std::vector<double> out;
  out.reserve(m.histogram.bucket.size());
  for (const auto& b : m.histogram.bucket) out.push_back(static_cast<double>(b.cumulative_count));
  return out;
}

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] - (i < b.size() ? b[i] : 0.0);
  return out;
}

float as_float(std::optional<double> v) { return v ? static_cast<float>(*v) : 0.0f; }
// A sample's figure as JSON: counts stay whole, milliseconds keep three decimals (not float noise).
json figure(float v) {
  const double r = std::round(static_cast<double>(v) * 1000.0) / 1000.0;
  if (r == std::trunc(r) && std::abs(r) < 1e15) return static_cast<std::int64_t>(r);
  return r;
}

}  // namespace

History::History(proxy::Metrics& metrics, config::SnapshotHolder& snapshots) : metrics_(metrics), snapshots_(snapshots) {
  for (double b : proxy::seconds_bounds()) bounds_.push_back(b * 1e3);
  bounds_.push_back(std::numeric_limits<double>::infinity());
}

void History::retrack(std::shared_ptr<const config::Snapshot> snap, std::uint64_t seq) {
  std::set<std::string_view> names;
  if (snap)
    for (const auto& r : snap->rules) names.insert(r.bucket);
  for (auto it = series_.begin(); it != series_.end();) it = names.contains(it->first) ? std::next(it) : series_.erase(it);
  tracked_.clear();
  tracked_.reserve(names.size());
  for (std::string_view name : names) {
    proxy::BucketMetrics* bm = &metrics_.bucket(name);  // made here if no request has yet
    auto [it, fresh] = series_.try_emplace(std::string(name));
    Series& x = it->second;
    if (fresh || x.metrics != bm) {
      x = Series{};
      x.metrics = bm;
      x.first_seq = seq;
      bool seen = false;
      for (std::size_t o = 0; o < proxy::kOutcomes; ++o) {
        x.counts[o] = bm->total(static_cast<proxy::Outcome>(o));
        seen = seen || x.counts[o] > 0;
      }
      // A wait is observed only with an outcome: no outcome yet, no observation to read.
      if (seen) x.wait_at = cumulative_counts(bm->wait.histogram());
    }
    tracked_.push_back(&x);
  }
  tracked_of_ = std::move(snap);
}

void History::sample_bucket(Series& x, std::size_t slot, std::uint64_t seq) {
  proxy::BucketMetrics& bm = *x.metrics;
  std::array<double, proxy::kOutcomes> counts{};
  bool moved = false;
  for (std::size_t o = 0; o < proxy::kOutcomes; ++o) {
    counts[o] = bm.total(static_cast<proxy::Outcome>(o));
    moved = moved || counts[o] != x.counts[o];
  }
  const auto held = static_cast<float>(bm.held.Value());
  if (!moved && held == 0) {
    // A zero sample: nothing to write while the ring holds only zeros; the busy part goes once
    // its last non-zero sample has left the ring.
    if (!x.busy) return;
    if (seq - x.busy_seq >= kSeconds) {
      x.busy.reset();
      return;
    }
    x.busy->ring[slot] = Sample{};
    x.busy->wait.push(x.wait_at);
    return;
  }
  if (!x.busy) {
    x.busy = std::make_unique<Busy>();
    x.busy->wait.push(x.wait_at);  // where the histogram stood while the bucket was quiet
  }
  auto delta = [&](proxy::Outcome o) {
    const auto i = static_cast<std::size_t>(o);
    return static_cast<float>(std::max(0.0, counts[i] - x.counts[i]));
  };
  Sample v;
  v.forwarded = delta(proxy::Outcome::forwarded);
  v.delayed = delta(proxy::Outcome::delayed);
  v.rejected = delta(proxy::Outcome::rejected);
  v.shadow_rejected = delta(proxy::Outcome::shadow_rejected);
  v.bypassed = delta(proxy::Outcome::bypassed);
  v.store_error = delta(proxy::Outcome::store_error);
  v.held = held;
  std::vector<double> hist = moved ? cumulative_counts(bm.wait.histogram()) : x.wait_at;
  const std::vector<double> second = minus(hist, x.busy->wait.newest());
  v.wait_p50_ms = as_float(histogram_quantile(0.5, bounds_, second));
  v.wait_p99_ms = as_float(histogram_quantile(0.99, bounds_, second));
  x.wait_at = hist;
  x.busy->wait.push(std::move(hist));
  x.counts = counts;
  x.busy->ring[slot] = v;
  x.busy_seq = seq;
}

void History::sample(std::int64_t now_ms) {
  std::shared_ptr<const config::Snapshot> snap = snapshots_.get();
  std::vector<std::pair<std::string, std::vector<double>>> upstream_now;
  metrics_.each_upstream([&](const std::string& name, const proxy::UpstreamMetrics& u) {
    std::vector<double> v = cumulative_counts(u.latency.histogram());
    for (const prometheus::Counter* c : u.errors) v.push_back(c ? c->Value() : 0.0);
    upstream_now.emplace_back(name, std::move(v));
  });

  std::lock_guard lock(mu_);
  const std::uint64_t seq = seq_;
  const std::size_t slot = seq % kSeconds;
  at_ms_[slot] = now_ms;
  if (seq == 0) started_ms_ = now_ms;
  if (snap != tracked_of_) retrack(std::move(snap), seq);
  for (Series* const tracked : tracked_) sample_bucket(*tracked, slot, seq);

  std::map<std::string, UpstreamSeries, std::less<>> ups;
  for (auto& [name, v] : upstream_now) {
    auto it = upstreams_.find(name);
    UpstreamSeries u = it != upstreams_.end() ? std::move(it->second) : UpstreamSeries{};
    u.latency.push(std::move(v));
    ups.emplace(name, std::move(u));
  }
  upstreams_ = std::move(ups);
  ++seq_;
}

std::uint64_t History::seq() const {
  std::lock_guard lock(mu_);
  return seq_;
}

std::size_t History::busy_buckets() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [name, series] : series_) n += series.busy != nullptr;
  return n;
}

std::map<std::string, double, std::less<>> History::activity() const {
  std::lock_guard lock(mu_);
  std::map<std::string, double, std::less<>> out;
  if (seq_ == 0) return out;
  const std::uint64_t newest = seq_ - 1;
  for (const auto& [name, s] : series_) {
    if (!s.busy) continue;
    double sum = s.busy->ring[newest % kSeconds].held;
    for (std::uint64_t i = 0; i < kWindow && i <= newest - s.first_seq; ++i) {
      const Sample& x = s.busy->ring[(newest - i) % kSeconds];
      sum += x.forwarded + x.delayed + x.rejected + x.shadow_rejected + x.bypassed + x.store_error;
    }
    out.emplace(name, sum);
  }
  return out;
}

json History::to_json(std::optional<std::uint64_t> since, const std::vector<std::string>* only) const {
  // Copied under the lock, written out after it: a large answer never holds up sample().
  struct Copy {
    std::string name;
    std::uint64_t first_seq;
    std::vector<Sample> samples;
  };
  std::vector<Copy> copies;
  std::vector<std::int64_t> at;
  std::uint64_t from = 0, seq = 0;
  std::int64_t started = 0;
  {
    std::lock_guard lock(mu_);
    seq = seq_;
    started = started_ms_;
    const std::uint64_t oldest = seq_ > kSeconds ? seq_ - kSeconds : 0;
    from = !since ? oldest : *since >= seq_ ? seq_ : std::max(*since + 1, oldest);
    for (std::uint64_t s = from; s < seq_; ++s) at.push_back(at_ms_[s % kSeconds]);
    auto copy = [&](const std::string& name, const Series& series) {
      Copy c{name, series.first_seq, {}};
      c.samples.reserve(seq_ - from);
      for (std::uint64_t s = from; s < seq_; ++s)
        c.samples.push_back(series.busy ? series.busy->ring[s % kSeconds] : Sample{});
      copies.push_back(std::move(c));
    };
    if (only) {
      copies.reserve(only->size());
      for (const std::string& name : *only)
        if (auto it = series_.find(name); it != series_.end()) copy(it->first, it->second);
    } else {
      copies.reserve(series_.size());
      for (const auto& [name, series] : series_) copy(name, series);
    }
  }
  json buckets = json::array();
  for (const Copy& c : copies) {
    json fwd = json::array(), del = json::array(), rej = json::array(), shadow = json::array(), held = json::array(),
         p50 = json::array(), p99 = json::array();
    for (std::uint64_t s = from; s < seq; ++s) {
      // Before the bucket's first sample: null (it did not exist yet).
      if (s < c.first_seq) {
        for (json* a : {&fwd, &del, &rej, &shadow, &held, &p50, &p99}) a->push_back(nullptr);
        continue;
      }
      const Sample& x = c.samples[s - from];
      fwd.push_back(figure(x.forwarded));
      del.push_back(figure(x.delayed));
      rej.push_back(figure(x.rejected));
      shadow.push_back(figure(x.shadow_rejected));
      held.push_back(figure(x.held));
      p50.push_back(figure(x.wait_p50_ms));
      p99.push_back(figure(x.wait_p99_ms));
    }
    buckets.push_back({{"bucket", c.name},
                       {"forwarded", std::move(fwd)},
                       {"delayed", std::move(del)},
                       {"rejected", std::move(rej)},
                       {"shadow_rejected", std::move(shadow)},
                       {"held", std::move(held)},
                       {"wait_p50_ms", std::move(p50)},
                       {"wait_p99_ms", std::move(p99)}});
  }
  return {{"interval_s", 1},
          {"capacity", kSeconds},
          {"started_at_ms", started},
          {"seq", seq},
          {"from_seq", from},
          {"at_ms", std::move(at)},
          {"buckets", std::move(buckets)}};
}

std::optional<History::Window> History::window(const std::string& bucket) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(bucket);
  if (it == series_.end() || seq_ == 0) return std::nullopt;
  const Series& s = it->second;
  Window w;
  if (!s.busy) return w;  // every sample of the last five minutes is zero
  const std::uint64_t newest = seq_ - 1;
  w.last = s.busy->ring[newest % kSeconds];
  for (std::uint64_t i = 0; i < kWindow && i <= newest - s.first_seq; ++i) {
    const Sample& x = s.busy->ring[(newest - i) % kSeconds];
    w.sum.forwarded += x.forwarded;
    w.sum.delayed += x.delayed;
    w.sum.rejected += x.rejected;
    w.sum.shadow_rejected += x.shadow_rejected;
    w.sum.bypassed += x.bypassed;
    w.sum.store_error += x.store_error;
    w.sum.held = std::max(w.sum.held, x.held);
    if (i < 10) w.rejected_10s += static_cast<std::uint64_t>(x.rejected);
  }
  const std::vector<double> minute = minus(s.busy->wait.newest(), s.busy->wait.oldest());
  w.wait_p50_ms = histogram_quantile(0.5, bounds_, minute);
  w.wait_p99_ms = histogram_quantile(0.99, bounds_, minute);
  return w;
}

std::map<std::string, History::UpstreamWindow> History::upstreams() const {
  std::lock_guard lock(mu_);
  std::map<std::string, UpstreamWindow> out;
  const std::size_t nb = bounds_.size();
  for (const auto& [name, u] : upstreams_) {
    if (u.latency.taken == 0) continue;
    const std::vector<double>& now = u.latency.newest();
    const std::vector<double> d = minus(now, u.latency.oldest());
    if (now.size() != nb + proxy::kUpstreamErrors) continue;
    UpstreamWindow w;
    const std::vector<double> hist(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(nb));
    w.p50_ms = histogram_quantile(0.5, bounds_, hist);
    w.p99_ms = histogram_quantile(0.99, bounds_, hist);
    w.responses = hist.back();
    for (std::size_t e = 0; e < proxy::kUpstreamErrors; ++e) {
      w.errors[e] = d[nb + e];
      w.errors_total[e] = now[nb + e];
    }
    out.emplace(name, w);
  }
  return out;
}

}  // namespace tollgate::admin

// The last five minutes of every bucket at one-second resolution, for the console and
// GET /admin/history: a fixed-size ring per bucket, filled once a second on the admin thread from
// the proxy's own counters (a request never writes here), plus a one-minute window of the wait and
// upstream latency histograms for the overview's quantiles.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/proxy/metrics.hpp"

namespace tollgate::admin {

// The q-quantile (0..1) of a histogram given as cumulative counts per upper bound (the last is
// +Inf), interpolated linearly inside the bucket it falls in, as Prometheus's histogram_quantile
// does. Falling in the +Inf bucket gives the highest finite bound. No observations: nullopt.
std::optional<double> histogram_quantile(double q, const std::vector<double>& bounds,
                                         const std::vector<double>& cumulative);

class History {
 public:
  static constexpr std::size_t kSeconds = 300;  // the ring: five minutes of one-second samples
  static constexpr std::size_t kWindow = 60;    // the overview's quantile window, in samples

  struct Sample {
    float forwarded = 0, delayed = 0, rejected = 0, shadow_rejected = 0, bypassed = 0, store_error = 0;
    float held = 0;                       // waiting at the sample's time
    float wait_p50_ms = 0, wait_p99_ms = 0;  // of the requests held in that second (0: none)
  };
  // What the overview shows of one bucket.
  struct Window {
    Sample last;                       // the last second
    Sample sum;                        // outcome counts over the last kWindow samples (held: max)
    std::optional<double> wait_p50_ms, wait_p99_ms;  // over the last kWindow samples
    std::uint64_t rejected_10s = 0;    // refusals over the last ten samples
  };
  struct UpstreamWindow {
    std::optional<double> p50_ms, p99_ms;
    double responses = 0;                                  // over the window
    std::array<double, proxy::kUpstreamErrors> errors{};   // over the window
    std::array<double, proxy::kUpstreamErrors> errors_total{};
  };

  History(proxy::Metrics& metrics, config::SnapshotHolder& snapshots);

  // Takes one sample (call it once a second): for each bucket of the active snapshot, the outcomes
  // counted since the previous call, the requests held now and the wait quantiles of that second.
  // A bucket seen for the first time starts from its counts now; one no rule has any more is dropped.
  void sample(std::int64_t now_ms);

  // {"interval_s":1,"capacity":300,"started_at_ms":T,"seq":N,"from_seq":F,"at_ms":[...],"buckets":[{"bucket":...,
  // "forwarded":[...],...}]}: the samples after `since` (all kept ones without it), oldest first.
  // `only`: those buckets alone (in that order; a name not tracked is left out), not every one.
  nlohmann::json to_json(std::optional<std::uint64_t> since, const std::vector<std::string>* only = nullptr) const;
  // Each busy bucket's traffic over the last kWindow samples (its outcomes, plus the requests held
  // now): what "busiest first" ranks by. A bucket not listed had none for five minutes.
  std::map<std::string, double, std::less<>> activity() const;
  std::optional<Window> window(const std::string& bucket) const;
  std::map<std::string, UpstreamWindow> upstreams() const;
  std::uint64_t seq() const;
  // Buckets with a non-zero sample in the ring, the only ones that keep a ring.
  std::size_t busy_buckets() const;

 private:
  // Cumulative figures at the last kWindow + 1 samples: differences give the window's counts.
  struct Cumulative {
    std::array<std::vector<double>, kWindow + 1> at;
    std::uint64_t taken = 0;
    void push(std::vector<double> v) { at[taken++ % at.size()] = std::move(v); }
    const std::vector<double>& newest() const { return at[(taken - 1) % at.size()]; }
    const std::vector<double>& oldest() const { return at[taken > at.size() ? taken % at.size() : 0]; }
  };
  // What a bucket keeps while it is busy: kept from its first non-zero sample until the ring holds
  // none (five minutes on), so that an idle rule costs its Series alone (a couple of hundred
  // bytes, where the ring and the window take ~20 KiB): ten thousand rules, most of them quiet at
  // any moment, would otherwise take 200 MB.
  struct Busy {
    std::array<Sample, kSeconds> ring{};  // zero before it was made
    Cumulative wait;                      // the wait histogram's cumulative bucket counts
  };
  struct Series {
    proxy::BucketMetrics* metrics = nullptr;
    std::uint64_t first_seq = 0;  // its first sample
    std::uint64_t busy_seq = 0;   // its last non-zero sample (while `busy`)
    std::array<double, proxy::kOutcomes> counts{};
    std::vector<double> wait_at;  // the wait histogram when last read (empty: no observation yet)
    std::unique_ptr<Busy> busy;   // null: every sample in the ring is zero
  };
  struct UpstreamSeries {
    Cumulative latency;  // cumulative bucket counts, then the error counters
  };
  // The tracked buckets made again from a new snapshot (mu_ held): buckets no rule has any more
  // leave, new ones start from their counts now.
  void retrack(std::shared_ptr<const config::Snapshot> snap, std::uint64_t seq);
  // One bucket's second into its ring at `slot` (mu_ held).
  void sample_bucket(Series& x, std::size_t slot, std::uint64_t seq);

  proxy::Metrics& metrics_;
  config::SnapshotHolder& snapshots_;
  std::vector<double> bounds_;  // seconds_bounds() in milliseconds, then +Inf

  mutable std::mutex mu_;
  std::uint64_t seq_ = 0;  // samples taken; the newest is seq_ - 1
  std::array<std::int64_t, kSeconds> at_ms_{};
  std::int64_t started_ms_ = 0;  // the first sample's time: tells one process's samples from another's
  std::map<std::string, Series, std::less<>> series_;
  std::shared_ptr<const config::Snapshot> tracked_of_;  // the snapshot `tracked_` was made from
  std::vector<Series*> tracked_;  // its buckets' series, made again only when the snapshot changes
  std::map<std::string, UpstreamSeries, std::less<>> upstreams_;
};

}  // namespace tollgate::admin

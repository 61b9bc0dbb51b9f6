// Deadline-aware admission: a request may say how long its caller will wait for the
// answer, and the gateway then holds it only if its wait plus the interface's recent upstream
// latency fits that budget.
//   grpc-timeout:     gRPC's "<1-8 digits><unit>", unit H, M, S, m (ms), u (µs) or n (ns)
//   Request-Timeout:  seconds, a decimal number ("0.5", "2")
// Both come from the client, so they can only shorten what the rule allows (its wait window),
// never lengthen it. With both, the shorter counts. A malformed value is refused (400), not guessed.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tollgate::proxy {

// Microseconds, or nullopt when malformed. grpc-timeout values past 8 digits are malformed (gRPC).
std::optional<std::int64_t> parse_grpc_timeout(std::string_view value);
// Microseconds, or nullopt when malformed (not a non-negative decimal, or over a day).
std::optional<std::int64_t> parse_request_timeout(std::string_view value);
// gRPC's text for a budget: the finest unit that keeps it within 8 digits ("250m", "3S").
std::string grpc_timeout_text(std::int64_t us);

inline constexpr std::int64_t kMaxBudgetUs = 86'400'000'000;  // budgets are capped at a day

struct Budget {
  std::int64_t us = 0;         // the time the caller will wait, from when the request arrived
  bool grpc = false;           // it came from grpc-timeout (passed on upstream, rewritten)
  bool request_timeout = false;  // it came from Request-Timeout (passed on upstream, rewritten)
};

// The budget of a request with these field values ("" for absent). Returns why it is refused when
// one is malformed; `present` says whether either was there.
std::optional<std::string> read_budget(std::string_view grpc_timeout, std::string_view request_timeout, Budget& out,
                                       bool& present);

// The upstream latency of one interface over about the last minute, for the admission check: a
// histogram per 5-second slot (12 slots, 80 log-spaced bins, four per doubling (at most 25% wide), from 0.1 ms to ~100 s); the p90 of the
// slots still in the window is recomputed whenever the clock enters a new slot. Lock-free: a
// request records with one relaxed atomic add; a count lost to a slot being recycled at that
// instant only blurs an estimate. The histogram (3.8 KiB) is made by the first record: a rule
// whose requests never reach an upstream costs no more than the object itself.
//
// The estimate refuses requests, and a refused request adds no sample: left alone, a few slow
// answers would refuse every shorter budget until they left the window, with nothing to show the
// upstream had recovered. Two things keep it honest: a p90 resting on fewer than kMinSamples
// answers is no estimate (the configured default stands in), and a request the estimate would
// refuse goes ahead as a probe, with only an immediate permit, if it is the tenth such refusal
// or no probe went in the last slot (take_probe()), so that fresh answers keep arriving.
class LatencyEstimate {
 public:
  static constexpr int kSlots = 12;
  static constexpr std::int64_t kSlotUs = 5'000'000;
  static constexpr int kBins = 80;
  static constexpr std::uint64_t kMinSamples = 10;  // fewer answers in the window: no p90
  static constexpr std::uint64_t kProbeEvery = 10;  // one in this many would-be refusals probes

  LatencyEstimate() = default;
  LatencyEstimate(const LatencyEstimate&) = delete;
  LatencyEstimate& operator=(const LatencyEstimate&) = delete;
  ~LatencyEstimate() { delete counts_.load(std::memory_order_acquire); }

  void record(std::int64_t latency_us, std::int64_t now_us);
  // The p90 over the window as of the last slot change (nullopt: no response in the window).
  std::optional<std::int64_t> p90_us(std::int64_t now_us);
  // Called for a request the p90 would refuse: true if it goes ahead as a probe instead (every
  // kProbeEvery-th such request, and the first in a slot with no probe yet).
  bool take_probe(std::int64_t now_us);

  static int bin_of(std::int64_t us);
  static std::int64_t bin_upper_us(int bin);

 private:
  using Counts = std::array<std::array<std::atomic<std::uint32_t>, kBins>, kSlots>;
  void advance(std::int64_t now_us);
  Counts& counts();  // made on first use

  std::atomic<Counts*> counts_{nullptr};
  std::atomic<std::int64_t> slot_{-1};     // the current slot's number (now / kSlotUs)
  std::atomic<std::int64_t> p90_us_{-1};   // -1: no data
  std::atomic<std::uint64_t> refusals_{0};      // requests the p90 would have refused
  std::atomic<std::int64_t> probe_slot_{-1};    // the slot of the last probe
};

}  // namespace tollgate::proxy

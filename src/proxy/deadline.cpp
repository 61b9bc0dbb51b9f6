#include "tollgate/proxy/deadline.hpp"

#include <charconv>
#include <cmath>
#include <memory>
#include <string>

namespace tollgate::proxy {

std::optional<std::int64_t> parse_grpc_timeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  const char unit = v.back();
  const std::string_view digits = v.substr(0, v.size() - 1);
  std::int64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  switch (unit) {
    case 'H': return n * 3'600'000'000LL;
    case 'M': return n * 60'000'000LL;
    case 'S': return n * 1'000'000LL;
    case 'm': return n * 1'000LL;
    case 'u': return n;
    case 'n': return n / 1'000;
    default: return std::nullopt;
  }
}

std::optional<std::int64_t> parse_request_timeout(std::string_view v) {
  // digits, optionally '.' and up to 6 more digits: no sign, no exponent, no spaces inside.
  const auto dot = v.find('.');
  const std::string_view whole = v.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? std::string_view() : v.substr(dot + 1);
  if (whole.empty() || whole.size() > 6 || frac.size() > 6 || (dot != std::string_view::npos && frac.empty()))
    return std::nullopt;
  std::int64_t s = 0, us = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') return std::nullopt;
    s = s * 10 + (c - '0');
  }
  std::int64_t scale = 100'000;
  for (char c : frac) {
    if (c < '0' || c > '9') return std::nullopt;
    us += (c - '0') * scale;
    scale /= 10;
  }
  if (s > 86'400) return std::nullopt;
  return s * 1'000'000 + us;
}

std::string grpc_timeout_text(std::int64_t us) {
  if (us < 0) us = 0;
  constexpr std::int64_t kMax = 99'999'999;
  if (us <= kMax) return std::to_string(us) + "u";
  if (us / 1'000 <= kMax) return std::to_string(us / 1'000) + "m";
  if (us / 1'000'000 <= kMax) return std::to_string(us / 1'000'000) + "S";
  return std::to_string(std::min<std::int64_t>(us / 60'000'000, kMax)) + "M";
}

std::optional<std::string> read_budget(std::string_view grpc, std::string_view request_timeout, Budget& out,
                                       bool& present) {
  present = false;
  out = {};
  if (!grpc.empty()) {
    const auto us = parse_grpc_timeout(grpc);
    if (!us) return "grpc-timeout must be 1 to 8 digits and a unit (H, M, S, m, u, n), e.g. 250m";
    out.us = *us;
    out.grpc = present = true;
  }
  if (!request_timeout.empty()) {
    const auto us = parse_request_timeout(request_timeout);
    if (!us) return "Request-Timeout must be seconds, a decimal number from 0 to 86400 (e.g. 0.5)";
    if (!present || *us < out.us) out.us = *us;
    out.request_timeout = present = true;
  }
  // A day at most (gRPC allows 99,999,999 hours): a deadline further off is no deadline, and the
  // sum with a clock reading must not overflow.
  out.us = std::min<std::int64_t>(out.us, kMaxBudgetUs);
  return std::nullopt;
}

// Bins, in units of 100 µs (x = us / 100, rounded up): bin 0 for x <= 1, then four per factor of
// two, by the exponent of x and the two bits after its leading one (integer arithmetic only: this
// runs for every response); each bin is at most 25% wide. The last is open-ended (~100 s and up).
int LatencyEstimate::bin_of(std::int64_t us) {
  if (us <= 100) return 0;
  const auto x = static_cast<std::uint64_t>((us + 99) / 100) - 1;  // >= 1
  const int e = 63 - __builtin_clzll(x);
  const auto quarter = static_cast<int>(e >= 2 ? (x >> (e - 2)) & 3 : (x << (2 - e)) & 3);
  const int b = 1 + 4 * e + quarter;
  return b >= kBins - 1 ? kBins - 1 : b;
}

std::int64_t LatencyEstimate::bin_upper_us(int bin) {
  if (bin <= 0) return 100;
  const int e = (bin - 1) / 4, quarter = (bin - 1) % 4;
  // The bin holds x < 2^e (5 + quarter) / 4, so x + 1 <= that, rounded up; us <= 100 (x + 1).
  return ((std::int64_t{1} << e) * (5 + quarter) + 3) / 4 * 100;
}

LatencyEstimate::Counts& LatencyEstimate::counts() {
  Counts* c = counts_.load(std::memory_order_acquire);
  if (c) return *c;
  auto fresh = std::make_unique<Counts>();  // value-initialised: every count 0
  if (counts_.compare_exchange_strong(c, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *c;  // another thread made it first
}

void LatencyEstimate::advance(std::int64_t now_us) {
  Counts* const counts = counts_.load(std::memory_order_acquire);
  if (!counts) return;  // nothing recorded yet: no p90
  const std::int64_t slot = now_us / kSlotUs;
  std::int64_t seen = slot_.load(std::memory_order_acquire);
  if (slot <= seen) return;
  if (!slot_.compare_exchange_strong(seen, slot, std::memory_order_acq_rel)) return;  // another thread does it
  // The slots entered since `seen` start empty (the one for `slot` included).
  if (seen < 0 || slot - seen >= kSlots) {
    for (auto& slot_counts : *counts)
      for (auto& c : slot_counts) c.store(0, std::memory_order_relaxed);
  } else {
    for (std::int64_t s = seen + 1; s <= slot; ++s)
      for (auto& c : (*counts)[static_cast<std::size_t>(s % kSlots)]) c.store(0, std::memory_order_relaxed);
  }
  // The p90 of the other slots (the finished ones of the last minute).
  std::array<std::uint64_t, kBins> sum{};
  std::uint64_t total = 0;
  for (std::size_t s = 0; s < kSlots; ++s)
    for (int b = 0; b < kBins; ++b) {
      const std::uint32_t n = (*counts)[s][static_cast<std::size_t>(b)].load(std::memory_order_relaxed);
      sum[static_cast<std::size_t>(b)] += n;
      total += n;
    }
  if (total < kMinSamples) {
    p90_us_.store(-1, std::memory_order_release);
    return;
  }
  const auto rank = static_cast<std::uint64_t>(std::ceil(0.9 * static_cast<double>(total)));
  std::uint64_t acc = 0;
  for (int b = 0; b < kBins; ++b) {
    acc += sum[static_cast<std::size_t>(b)];
    if (acc >= rank) {
      p90_us_.store(bin_upper_us(b), std::memory_order_release);
      return;
    }
  }
}

void LatencyEstimate::record(std::int64_t latency_us, std::int64_t now_us) {
  Counts& c = counts();
  advance(now_us);
  const std::int64_t slot = slot_.load(std::memory_order_relaxed);
  c[static_cast<std::size_t>(slot % kSlots)][static_cast<std::size_t>(bin_of(latency_us))].fetch_add(
      1, std::memory_order_relaxed);
}

std::optional<std::int64_t> LatencyEstimate::p90_us(std::int64_t now_us) {
  advance(now_us);
  const std::int64_t v = p90_us_.load(std::memory_order_acquire);
  if (v < 0) return std::nullopt;
  return v;
}

bool LatencyEstimate::take_probe(std::int64_t now_us) {
  const std::int64_t slot = now_us / kSlotUs;
  std::int64_t last = probe_slot_.load(std::memory_order_relaxed);
  const bool nth = refusals_.fetch_add(1, std::memory_order_relaxed) % kProbeEvery == kProbeEvery - 1;
  if (nth) {
    probe_slot_.store(slot, std::memory_order_relaxed);
    return true;
  }
  return last < slot && probe_slot_.compare_exchange_strong(last, slot, std::memory_order_relaxed);
}

}  // namespace tollgate::proxy

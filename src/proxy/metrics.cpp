#include "tollgate/proxy/metrics.hpp"

#include <cstdio>
#include <unordered_map>

namespace tollgate::proxy {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::forwarded: return "forwarded";
    case Outcome::delayed: return "delayed";
    case Outcome::rejected: return "rejected";
    case Outcome::bypassed: return "bypassed";
    case Outcome::unmatched: return "unmatched";
    case Outcome::store_error: return "store_error";
    case Outcome::shadow_rejected: return "shadow_rejected";
    case Outcome::count_: break;
  }
  return "unknown";
}

const char* upstream_error_name(UpstreamError e) {
  switch (e) {
    case UpstreamError::connect: return "connect";
    case UpstreamError::reset: return "reset";
    case UpstreamError::timeout: return "timeout";
    case UpstreamError::count_: break;
  }
  return "unknown";
}

std::string label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

void Histogram::observe_us(std::int64_t us) {
  const double s = static_cast<double>(us) / 1e6;
  std::size_t i = 0;
  while (i < kBounds.size() && s > kBounds[i]) ++i;
  counts[i].fetch_add(1, std::memory_order_relaxed);
  sum_us.fetch_add(static_cast<std::uint64_t>(us < 0 ? 0 : us), std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += counts[i].load(std::memory_order_relaxed);
    char le[32] = "+Inf";
    if (i < kBounds.size()) std::snprintf(le, sizeof le, "%g", kBounds[i]);
    out += name + "_bucket{" + labels + ",le=\"" + std::string(le) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + std::to_string(static_cast<double>(sum_us.load()) / 1e6) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(cumulative) + "\n";
}

namespace {
template <class T, class Map>
T& find_or_create(std::mutex& mu, Map& map, std::string_view name, std::unordered_map<std::string, T*>& cache) {
  if (auto it = cache.find(std::string(name)); it != cache.end()) return *it->second;
  std::lock_guard lock(mu);
  auto it = map.find(name);
  if (it == map.end()) it = map.emplace(std::string(name), std::make_unique<T>()).first;
  cache.emplace(std::string(name), it->second.get());
  return *it->second;
}
}  // namespace

namespace {
// One per-thread cache per series type, dropped when another Metrics object asks (tests make several).
template <class T, class Map>
T& cached(const Metrics* self, std::mutex& mu, Map& map, std::string_view name) {
  thread_local std::unordered_map<std::string, T*> cache;
  thread_local const Metrics* owner = nullptr;
  if (owner != self) {
    cache.clear();
    owner = self;
  }
  return find_or_create(mu, map, name, cache);
}
}  // namespace

BucketMetrics& Metrics::bucket(std::string_view name) { return cached<BucketMetrics>(this, mu_, buckets_, name); }

// Keyed "<rule>\x1f<policy>": neither a bucket name nor a policy name holds a control character.
PolicyMetrics& Metrics::policy(std::string_view rule, std::string_view policy) {
  std::string key;
  key.reserve(rule.size() + 1 + policy.size());
  key.append(rule).append(1, '\x1f').append(policy);
  return cached<PolicyMetrics>(this, mu_, policies_, key);
}

UpstreamMetrics& Metrics::upstream(std::string_view name) { return cached<UpstreamMetrics>(this, mu_, upstreams_, name); }

std::string Metrics::render() const {
  std::string out;
  out += "# HELP tollgate_requests_total Requests by throttling outcome.\n# TYPE tollgate_requests_total counter\n";
  for (int i = 0; i < static_cast<int>(Outcome::count_); ++i)
    out += std::string("tollgate_requests_total{outcome=\"") + outcome_name(static_cast<Outcome>(i)) + "\"} " +
           std::to_string(outcomes[i].load(std::memory_order_relaxed)) + "\n";
  out += "# HELP tollgate_upstream_errors_total Upstream failures by kind.\n# TYPE tollgate_upstream_errors_total counter\n";
  for (int i = 0; i < static_cast<int>(UpstreamError::count_); ++i)
    out += std::string("tollgate_upstream_errors_total{kind=\"") + upstream_error_name(static_cast<UpstreamError>(i)) +
           "\"} " + std::to_string(upstream_errors[i].load(std::memory_order_relaxed)) + "\n";
  out += "# HELP tollgate_bad_requests_total Requests the gateway answered itself with a 4xx.\n"
         "# TYPE tollgate_bad_requests_total counter\ntollgate_bad_requests_total " +
         std::to_string(bad_requests.load()) + "\n";
  out += "# HELP tollgate_held_requests Requests waiting for their permit right now.\n"
         "# TYPE tollgate_held_requests gauge\ntollgate_held_requests " + std::to_string(held.load()) + "\n";
  out += "# HELP tollgate_refunds_total Reservations given back because the client left before its slot.\n"
         "# TYPE tollgate_refunds_total counter\ntollgate_refunds_total " + std::to_string(refunds.load()) + "\n";
  out += "# HELP tollgate_upstream_conns_discarded_total Idle pooled upstream connections closed instead of reused "
         "(data or a close arrived while idle, or idle too long).\n"
         "# TYPE tollgate_upstream_conns_discarded_total counter\ntollgate_upstream_conns_discarded_total " +
         std::to_string(upstream_conns_discarded.load()) + "\n";
  out += "# HELP tollgate_upstream_retries_total Requests sent again on a fresh connection after a reused one failed "
         "before any response byte (idempotent methods, or nothing written).\n"
         "# TYPE tollgate_upstream_retries_total counter\ntollgate_upstream_retries_total " +
         std::to_string(upstream_retries.load()) + "\n";
  out += "# HELP tollgate_abandoned_total Held requests whose client left before their slot (never forwarded).\n"
         "# TYPE tollgate_abandoned_total counter\ntollgate_abandoned_total " + std::to_string(abandoned.load()) + "\n";
  out += "# HELP tollgate_store_degraded_total Decisions made by the local fallback while the shared store was down.\n"
         "# TYPE tollgate_store_degraded_total counter\ntollgate_store_degraded_total " +
         std::to_string(store_degraded.load()) + "\n";
  out += "# HELP tollgate_connections Open client connections.\n"
         "# TYPE tollgate_connections gauge\ntollgate_connections " + std::to_string(connections.load()) + "\n";
  out += "# HELP tollgate_connections_refused_total Connections closed at once because proxy.max_connections were open.\n"
         "# TYPE tollgate_connections_refused_total counter\ntollgate_connections_refused_total " +
         std::to_string(connections_refused.load()) + "\n";

  std::lock_guard lock(mu_);
  out += "# HELP tollgate_bucket_requests_total Requests by bucket and outcome.\n"
         "# TYPE tollgate_bucket_requests_total counter\n";
  for (const auto& [name, b] : buckets_)
    for (int i = 0; i < static_cast<int>(Outcome::count_); ++i) {
      const auto n = b->outcomes[i].load(std::memory_order_relaxed);
      if (n) out += "tollgate_bucket_requests_total{bucket=\"" + label_value(name) + "\",outcome=\"" +
                    outcome_name(static_cast<Outcome>(i)) + "\"} " + std::to_string(n) + "\n";
    }
  out += "# HELP tollgate_bucket_held_requests Requests waiting on a bucket right now.\n"
         "# TYPE tollgate_bucket_held_requests gauge\n";
  for (const auto& [name, b] : buckets_)
    out += "tollgate_bucket_held_requests{bucket=\"" + label_value(name) + "\"} " + std::to_string(b->held.load()) + "\n";
  out += "# HELP tollgate_bucket_cap_rejections_total 429s because a hold cap (global or per bucket) was reached.\n"
         "# TYPE tollgate_bucket_cap_rejections_total counter\n";
  for (const auto& [name, b] : buckets_)
    out += "tollgate_bucket_cap_rejections_total{bucket=\"" + label_value(name) + "\"} " +
           std::to_string(b->cap_rejections.load()) + "\n";
  out += "# HELP tollgate_bucket_wait_seconds Time requests were held before being forwarded.\n"
         "# TYPE tollgate_bucket_wait_seconds histogram\n";
  for (const auto& [name, b] : buckets_) b->wait.render(out, "tollgate_bucket_wait_seconds", "bucket=\"" + label_value(name) + "\"");
  out += "# HELP tollgate_policy_checks_total Quota checks by rule, policy and result.\n"
         "# TYPE tollgate_policy_checks_total counter\n";
  auto labels = [](const std::string& key) {
    const auto sep = key.find('\x1f');
    return "rule=\"" + label_value(std::string_view(key).substr(0, sep)) + "\",policy=\"" +
           label_value(std::string_view(key).substr(sep + 1)) + "\"";
  };
  for (const auto& [key, p] : policies_) {
    if (p->passed.load() + p->failed.load() == 0) continue;  // never checked on its own (a bucket)
    const std::string l = "tollgate_policy_checks_total{" + labels(key) + ",result=\"";
    out += l + "passed\"} " + std::to_string(p->passed.load()) + "\n";
    out += l + "failed\"} " + std::to_string(p->failed.load()) + "\n";
  }
  out += "# HELP tollgate_policy_rejections_total 429s by the rule and policy that bound them.\n"
         "# TYPE tollgate_policy_rejections_total counter\n";
  for (const auto& [key, p] : policies_)
    out += "tollgate_policy_rejections_total{" + labels(key) + "} " + std::to_string(p->bound.load()) + "\n";
  out += "# HELP tollgate_upstream_response_seconds Request sent to response header received, by upstream.\n"
         "# TYPE tollgate_upstream_response_seconds histogram\n";
  for (const auto& [name, u] : upstreams_)
    u->latency.render(out, "tollgate_upstream_response_seconds", "upstream=\"" + label_value(name) + "\"");
  out += "# HELP tollgate_upstream_failures_total Upstream failures by upstream and kind.\n"
         "# TYPE tollgate_upstream_failures_total counter\n";
  for (const auto& [name, u] : upstreams_)
    for (int i = 0; i < static_cast<int>(UpstreamError::count_); ++i)
      out += "tollgate_upstream_failures_total{upstream=\"" + label_value(name) + "\",kind=\"" +
             upstream_error_name(static_cast<UpstreamError>(i)) + "\"} " + std::to_string(u->errors[i].load()) + "\n";
  return out;
}

}  // namespace tollgate::proxy

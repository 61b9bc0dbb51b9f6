#include "tollgate/proxy/throttle.hpp"

#include <charconv>
#include <cmath>

#include "tollgate/proxy/json_text.hpp"
#include "tollgate/proxy/rate_headers.hpp"

namespace tollgate::proxy {

std::string_view path_of(std::string_view target) {
  const std::size_t q = target.find_first_of("?#");
  return q == std::string_view::npos ? target : target.substr(0, q);
}

long long ceil_seconds(limiter::Micros us) {
  if (us <= 0) return 0;
  return us / 1'000'000 + (us % 1'000'000 != 0 ? 1 : 0);  // no overflow at "never" (kInfinite)
}


namespace {
// One RateLimit item: "<name>";r=<whole requests left>;t=<seconds, rounded up>
// Written into one string sized once: it is made for every limited request.
std::string rl_item(std::string_view name, double remaining, limiter::Micros t_us) {
  const long long r = remaining >= 1 ? static_cast<long long>(std::floor(remaining)) : 0;
  std::string out;
  out.reserve(name.size() + 2 + 3 + 20 + 3 + 20);
  append_sf_string(out, name);
  char digits[24];
  out.append(";r=");
  out.append(digits, std::to_chars(digits, digits + sizeof digits, r).ptr);
  out.append(";t=");
  out.append(digits, std::to_chars(digits, digits + sizeof digits, ceil_seconds(t_us)).ptr);
  return out;
}
}  // namespace

std::string ratelimit_header(const config::Rule& rule, const limiter::Decision& d) {
  return rl_item(rule.bucket, d.remaining, d.granted ? 0 : d.retry_after_us);
}

const config::Quota& quota_at(const config::Rule& rule, const config::Rule* channel, std::size_t i) {
  return i < rule.quotas.size() ? rule.quotas[i] : channel->quotas.at(i - rule.quotas.size());
}

const config::Rule& quota_owner(const config::Rule& rule, const config::Rule* channel, std::size_t i) {
  return i < rule.quotas.size() || channel == nullptr ? rule : *channel;
}

const config::Rule& bound_owner(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd) {
  switch (sd.bound) {
    case store::Bound::parent: return channel ? *channel : rule;
    case store::Bound::quota: return quota_owner(rule, channel, sd.bound_quota);
    default: return rule;
  }
}

std::string bound_policy(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd) {
  switch (sd.bound) {
    case store::Bound::bucket: return rule.bucket;
    case store::Bound::parent: return channel ? channel->bucket : rule.bucket;
    case store::Bound::share: return rule.bucket + "#maxShare";
    case store::Bound::quota: return quota_at(rule, channel, sd.bound_quota).name;
  }
  return rule.bucket;
}

std::string ratelimit_header(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd) {
  const limiter::Decision& d = sd.decision;
  const bool has_bucket = rule.has_bucket || rule.meter || (channel && channel->has_bucket);
  if (!d.granted) {
    switch (sd.bound) {
      case store::Bound::bucket:
      case store::Bound::parent: return ratelimit_header(sd.bound == store::Bound::parent && channel ? *channel : rule, d);
      case store::Bound::share: return rl_item(rule.bucket + "#maxShare", 0, d.retry_after_us);
      case store::Bound::quota: {
        const auto& q = sd.quotas.at(sd.bound_quota);
        return rl_item(quota_at(rule, channel, sd.bound_quota).name, q.remaining, d.retry_after_us);
      }
    }
  }
  // Admitted: the policy with the smallest share of its quota left.
  double best = 2.0;
  std::string out;
  if (has_bucket && sd.max_permits > 0) {
    best = d.remaining / sd.max_permits;
    out = ratelimit_header(sd.bound == store::Bound::parent && channel ? *channel : rule, d);
  }
  for (std::size_t i = 0; i < sd.quotas.size(); ++i) {
    const config::Quota& q = quota_at(rule, channel, i);
    const double share = sd.quotas[i].remaining / static_cast<double>(q.limit);
    if (share < best) {
      best = share;
      out = rl_item(q.name, sd.quotas[i].remaining, sd.quotas[i].reset_us);
    }
  }
  return out;
}

std::string rejection_body(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd,
                           std::int64_t deadline_wait_us) {
  const limiter::Decision& d = sd.decision;
  const config::Rule& owner = sd.bound == store::Bound::parent && channel ? *channel : rule;
  const std::string policy = bound_policy(rule, channel, sd);
  const long long retry_ms = d.retry_after_us / 1000 + (d.retry_after_us % 1000 > 0 ? 1 : 0);
  std::string detail;
  detail.reserve(policy.size() + 64);
  detail.append("policy ").append(policy).append(" admits no more requests now; retry after ");
  detail.append(std::to_string(retry_ms)).append(" ms");
  JsonObject j(512);
  j.add_literal("type", kQuotaExceeded)
      .add_literal("title", "Request refused: a rate-limit policy's quota is exceeded")
      .add("status", 429)
      .add("detail", detail)
      .add_string_array("violated-policies", policy)
      .add_literal("error", "rate_limited")
      .add("policy", policy)
      .add("retry_after_ms", static_cast<std::int64_t>(retry_ms));
  if (deadline_wait_us >= 0) j.add("deadline_wait_ms", static_cast<double>(deadline_wait_us) / 1e3);
  switch (sd.bound) {
    case store::Bound::bucket:
    case store::Bound::parent:
      j.add("bucket", owner.bucket)
          .add("configId", owner.config_id)
          .add_literal("kind", owner.meter ? owner.meter->algorithm() : "token_bucket")
          .add("rate_limit_per_s", owner.rate_limit)
          .add("wait_window_ms", static_cast<std::int64_t>(owner.cache_s * 1000));
      break;
    case store::Bound::share:
      j.add("bucket", owner.bucket)
          .add("configId", owner.config_id)
          .add_literal("kind", "max_share")
          .add("max_share", rule.max_share.value_or(1.0))
          .add("max_waiting_per_client", rule.max_held_per_client)
          .add("key_by", rule.share_key.text());
      break;
    case store::Bound::quota: {
      const config::Quota& q = quota_at(rule, channel, sd.bound_quota);
      const config::Rule& qowner = quota_owner(rule, channel, sd.bound_quota);
      j.add("bucket", qowner.bucket)
          .add("configId", qowner.config_id)
          .add_literal("kind", "quota")
          .add("quotaId", q.quota_id)
          .add("limit", q.limit)
          .add("period_s", q.period_s)
          .add_literal("algorithm", q.algorithm == limiter::WindowAlgorithm::sliding ? "sliding" : "fixed")
          .add("key_by", q.key_by.text());
      break;
    }
  }
  return std::move(j).done();
}

std::string deadline_body(const config::Rule& rule, std::int64_t budget_us, std::int64_t latency_us) {
  const auto ms = [](std::int64_t us) { return static_cast<double>(us) / 1e3; };
  std::string detail = "the request's time budget (" + std::to_string((budget_us + 999) / 1000) +
                       " ms) is shorter than the interface's upstream latency (p90 " +
                       std::to_string((latency_us + 999) / 1000) + " ms): it would time out anyway";
  JsonObject j(384);
  j.add_literal("type", "about:blank")
      .add_literal("title", "Too Many Requests")
      .add("status", 429)
      .add("detail", detail)
      .add_literal("error", "deadline_too_short")
      .add("bucket", rule.bucket)
      .add("configId", rule.config_id)
      .add("budget_ms", ms(budget_us))
      .add("upstream_latency_p90_ms", ms(latency_us));
  return std::move(j).done();
}

std::string problem_body(int status, std::string_view title, std::string_view code, std::string_view detail,
                         std::string_view type) {
  // Details can quote untrusted bytes (a parse error cites them): not UTF-8 becomes U+FFFD.
  JsonObject j;
  j.add("type", type).add("title", title).add("status", status).add("detail", detail).add("error", code);
  return std::move(j).done();
}

std::string error_body(std::string_view code, std::string_view detail) {
  JsonObject j;
  j.add("error", code).add("detail", detail);
  return std::move(j).done();
}

}  // namespace tollgate::proxy

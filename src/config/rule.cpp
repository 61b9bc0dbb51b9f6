#include "tollgate/config/rule.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <sstream>

namespace tollgate::config {

std::string RejectedRow::message() const {
  std::ostringstream o;
  o << (origin.empty() ? std::string("row") : origin) << "." << field << ": " << reason;
  if (config_id && origin.find("configId") == std::string::npos) o << " (configId " << *config_id << ")";
  if (kept_previous) o << "; its last valid version stays in force";
  return o.str();
}

std::string check_interface_url(const std::string& url) {
  if (url.empty()) return "must not be empty";
  if (url.front() != '/') return "must start with '/'";
  if (url.size() == 1) return "must name at least one path segment, e.g. /shopping/search";
  if (url.back() == '/') return "must not end with '/'";
  if (url.find("//") != std::string::npos) return "must not contain an empty segment ('//')";
  for (unsigned char c : url) {
    if (c <= 0x20 || c == 0x7f || c == '?' || c == '#') return "must be a path without spaces, '?' or '#'";
  }
  if (url.size() > 128) return "must be at most 128 characters";
  return {};
}

std::string KeySpec::text() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::client_ip: return "client_ip";
    case Kind::client_ip_path: return "client_ip_path";
    case Kind::header: return "header:" + header;
  }
  return "none";
}

std::optional<KeySpec> parse_key_by(const std::string& text, std::string& why) {
  KeySpec k;
  if (text == "none") return k;
  if (text == "client_ip") {
    k.kind = KeySpec::Kind::client_ip;
    return k;
  }
  if (text == "client_ip_path") {
    k.kind = KeySpec::Kind::client_ip_path;
    return k;
  }
  if (text.rfind("header:", 0) == 0) {
    k.kind = KeySpec::Kind::header;
    k.header = text.substr(7);
    const bool token = !k.header.empty() && k.header.size() <= 64 &&
                       std::all_of(k.header.begin(), k.header.end(), [](unsigned char c) {
                         return std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
                       });
    if (token) return k;
    why = "header:<Name> needs a header name (letters, digits, '-', at most 64)";
    return std::nullopt;
  }
  why = "must be none, client_ip, client_ip_path or header:<Name>";
  return std::nullopt;
}

namespace {

std::optional<RejectedRow> check_quota(const RawQuota& raw, const Rule& rule, Quota& q) {
  auto reject = [&](std::string field, std::string reason) {
    RejectedRow r{raw.config_id ? raw.config_id : std::optional<std::int64_t>(rule.config_id), raw.origin,
                  std::move(field), std::move(reason)};
    r.quota_id = raw.quota_id;
    return r;
  };
  if (!raw.type_errors.empty()) {
    const std::string& e = raw.type_errors.front();
    auto colon = e.find(':');
    return reject(e.substr(0, colon), colon == std::string::npos ? e : e.substr(colon + 2));
  }
  if (!raw.quota_id) return reject("quotaId", "is required");
  if (!raw.period_seconds) return reject("periodSeconds", "is required");
  if (*raw.period_seconds < 1 || *raw.period_seconds > kMaxQuotaPeriod)
    return reject("periodSeconds", "must be within [1, 86400]");
  if (!raw.limit_count) return reject("limitCount", "is required");
  if (*raw.limit_count < 1 || *raw.limit_count > kMaxQuotaLimit)
    return reject("limitCount", "must be within [1, 1000000000]");
  const std::string algo = raw.algorithm.value_or("fixed");
  if (algo != "fixed" && algo != "sliding") return reject("algorithm", "must be \"fixed\" or \"sliding\"");
  std::string why;
  auto key = parse_key_by(raw.key_by.value_or("none"), why);
  if (!key) return reject("keyBy", why);
  const std::int64_t status = raw.status.value_or(1);
  if (status != 0 && status != 1) return reject("status", "must be 0 or 1");
  q.quota_id = *raw.quota_id;
  q.period_s = *raw.period_seconds;
  q.limit = *raw.limit_count;
  q.algorithm = algo == "sliding" ? limiter::WindowAlgorithm::sliding : limiter::WindowAlgorithm::fixed;
  q.key_by = *key;
  name_quota(q, rule.bucket);
  return std::nullopt;
}

std::optional<RejectedRow> check(const RawRow& row, Rule& rule) {
  auto reject = [&](std::string field, std::string reason) {
    return RejectedRow{row.config_id, row.origin, std::move(field), std::move(reason)};
  };
  if (!row.type_errors.empty()) {
    const std::string& e = row.type_errors.front();
    auto colon = e.find(':');
    return reject(e.substr(0, colon), colon == std::string::npos ? e : e.substr(colon + 2));
  }
  if (!row.config_id) return reject("configId", "is required");
  const std::string scope = row.scope.value_or("interface");
  if (scope != "interface" && scope != "channel") return reject("scope", "must be \"interface\" or \"channel\"");
  rule.channel = scope == "channel";
  if (row.mode) {
    auto m = parse_switch_mode(*row.mode);
    if (!m) return reject("mode", "must be \"enforce\", \"shadow\" or \"off\"");
    rule.mode = *m;
  }
  if (rule.channel) {
    if (!row.channel_type || row.channel_type->empty()) return reject("channelType", "is required for a channel limit");
    if (row.channel_type->size() > 24) return reject("channelType", "must be at most 24 characters");
  } else {
    if (!row.interface_url) return reject("interfaceUrl", "is required");
    if (auto why = check_interface_url(*row.interface_url); !why.empty()) return reject("interfaceUrl", why);
  }
  const std::int64_t status = row.status.value_or(0);  // NOT NULL DEFAULT 0 in the table
  if (status != 0 && status != 1) return reject("status", "must be 0 or 1");
  rule.has_bucket = row.rate_limit.has_value() || row.quotas.empty();
  if (!row.rate_limit && row.quotas.empty()) return reject("rateLimit", "is required (or give the rule quotas)");
  const double rate = row.rate_limit.value_or(1.0);
  if (!std::isfinite(rate) || rate <= 0) return reject("rateLimit", "must be > 0");
  if (rate > kMaxRate) return reject("rateLimit", "must be <= 1000000 (one permit per microsecond)");
  const double cache = row.cache.value_or(kDefaultCache);
  if (!std::isfinite(cache) || cache < 0 || cache > kMaxCache) return reject("cache", "must be within [0, 60] seconds");
  if (row.burst) {
    if (!std::isfinite(*row.burst) || *row.burst < 1) return reject("burst", "must be >= 1");
  }
  if (row.warmup_seconds) {
    if (!std::isfinite(*row.warmup_seconds) || *row.warmup_seconds < 0 || *row.warmup_seconds > 3600)
      return reject("warmupSeconds", "must be within [0, 3600]");
    if (row.burst && *row.warmup_seconds > 0)
      return reject("burst", "cannot be combined with warmupSeconds (warm-up sizes the bucket itself)");
  }
  if (row.key_by) {
    std::string why;
    auto k = parse_key_by(*row.key_by, why);
    if (!k) return reject("keyBy", why);
    if (rule.channel && k->kind != KeySpec::Kind::none) return reject("keyBy", "is not supported on a channel limit");
    rule.key_by = *k;
  }
  if (row.max_share) {
    if (!std::isfinite(*row.max_share) || *row.max_share <= 0 || *row.max_share > 1)
      return reject("maxShare", "must be within (0, 1]");
    if (rule.channel) return reject("maxShare", "is not supported on a channel limit");
    if (!row.rate_limit) return reject("maxShare", "needs a token bucket (rateLimit) whose wait window it shares");
    rule.max_share = row.max_share;
    rule.share_key = rule.key_by.kind == KeySpec::Kind::none ? KeySpec{KeySpec::Kind::client_ip, {}} : rule.key_by;
    rule.max_held_per_client =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(*row.max_share * rate * cache + 1e-9)));
  }
  if (!rule.has_bucket && rule.key_by.kind != KeySpec::Kind::none)
    return reject("keyBy", "keys the token bucket, and this rule has none (rateLimit is NULL)");
  rule.config_id = *row.config_id;
  rule.channel_type = row.channel_type.value_or("");
  rule.interface_no = row.interface_no.value_or("");
  rule.interface_url = rule.channel ? "" : *row.interface_url;
  rule.bucket = rule.channel ? "channel:" + rule.channel_type : rule.interface_url;
  rule.rate_limit = rate;
  rule.cache_s = cache;
  rule.enabled = status == 1;
  rule.params.rate = rate;
  rule.params.burst = row.burst;
  rule.params.warmup_us = static_cast<limiter::Micros>(row.warmup_seconds.value_or(0) * 1e6);
  rule.params.mode = limiter::Mode::pay_now;
  rule.policy_header =
      rule.has_bucket ? ratelimit_policy(rule.bucket, rule.rate_limit, limiter::shape_of(rule.params).max_permits) : "";
  return std::nullopt;
}

// Validates a rule's quota rows; rejected ones are listed and skipped, the rule keeps the others.
void check_quotas(const RawRow& row, Rule& rule, std::map<std::int64_t, std::string>& quota_ids,
                  std::vector<RejectedRow>& rejected) {
  for (const RawQuota& raw : row.quotas) {
    Quota q;
    if (auto bad = check_quota(raw, rule, q)) {
      rejected.push_back(std::move(*bad));
      continue;
    }
    if (auto [it, fresh] = quota_ids.emplace(q.quota_id, raw.origin); !fresh) {
      rejected.push_back({rule.config_id, raw.origin, "quotaId", "duplicate quotaId (also " + it->second + ")", q.quota_id});
      continue;
    }
    if (raw.status.value_or(1) == 0) continue;  // disabled: valid, limits nothing
    if (rule.quotas.size() >= kMaxQuotasPerRule) {
      rejected.push_back({rule.config_id, raw.origin, "quotaId", "a rule has at most 16 enabled quotas", q.quota_id});
      continue;
    }
    rule.policy_header += (rule.policy_header.empty() ? "" : ", ") + q.policy;
    rule.quotas.push_back(std::move(q));
  }
}

}  // namespace

void name_quota(Quota& q, const std::string& bucket) {
  q.name = bucket + "#q" + std::to_string(q.quota_id);
  q.policy = sf_string(q.name) + ";q=" + std::to_string(q.limit) + ";w=" + std::to_string(q.period_s);
}

std::string sf_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string ratelimit_policy(const std::string& bucket, double rate, double max_permits) {
  auto number = [](double v) {
    if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    return std::string(buf);
  };
  return sf_string(bucket) + ";q=" + number(rate) + ";w=1;burst=" + number(std::floor(max_permits));
}

ValidatedRules validate_rows(const std::vector<RawRow>& rows) {
  ValidatedRules out;
  std::map<std::string, std::int64_t> enabled_urls;  // url -> configId of the row that holds it
  std::map<std::int64_t, bool> ids;
  std::map<std::int64_t, std::string> quota_ids;
  for (const RawRow& row : rows) {
    Rule rule;
    if (auto bad = check(row, rule)) {
      out.rejected.push_back(std::move(*bad));
      continue;
    }
    check_quotas(row, rule, quota_ids, out.rejected);
    if (!ids.emplace(rule.config_id, true).second) {
      out.rejected.push_back({row.config_id, row.origin, "configId", "duplicate configId"});
      continue;
    }
    if (rule.enabled) {
      auto [it, fresh] = enabled_urls.emplace(rule.bucket, rule.config_id);
      if (!fresh) {
        out.rejected.push_back({row.config_id, row.origin, rule.channel ? "channelType" : "interfaceUrl",
                                "another enabled row (configId " + std::to_string(it->second) + ") already limits " +
                                    (rule.channel ? "channel " + rule.channel_type : rule.interface_url)});
        continue;
      }
    }
    out.rules.push_back(std::move(rule));
  }
  return out;
}

}  // namespace tollgate::config

#include "tollgate/config/rule.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace tollgate::config {

std::string RejectedRow::message() const {
  std::ostringstream o;
  o << (origin.empty() ? std::string("row") : origin) << "." << field << ": " << reason;
  if (config_id && origin.find("configId") == std::string::npos) o << " (configId " << *config_id << ")";
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

namespace {

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
  if (!row.rate_limit) return reject("rateLimit", "is required");
  const double rate = *row.rate_limit;
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
  rule.policy_header = ratelimit_policy(rule.bucket, rule.rate_limit, limiter::shape_of(rule.params).max_permits);
  return std::nullopt;
}

}  // namespace

std::string ratelimit_policy(const std::string& bucket, double rate, double max_permits) {
  auto number = [](double v) {
    if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    return std::string(buf);
  };
  std::string out = "\"";
  for (char c : bucket) {  // sf-string: escape '"' and '\'
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out += "\";q=" + number(rate) + ";w=1;burst=" + number(std::floor(max_permits));
  return out;
}

ValidatedRules validate_rows(const std::vector<RawRow>& rows) {
  ValidatedRules out;
  std::map<std::string, std::int64_t> enabled_urls;  // url -> configId of the row that holds it
  std::map<std::int64_t, bool> ids;
  for (const RawRow& row : rows) {
    Rule rule;
    if (auto bad = check(row, rule)) {
      out.rejected.push_back(std::move(*bad));
      continue;
    }
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

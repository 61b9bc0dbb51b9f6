#include "tollgate/proxy/rate_headers.hpp"

#include <cmath>
#include <cstdio>

namespace tollgate::proxy {

void append_sf_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) {
      out.push_back('?');  // no escape exists for it in an sf-string, and a CR or LF would end the header
      continue;
    }
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(static_cast<char>(c));
  }
  out.push_back('"');
}

std::string sf_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_sf_string(out, s);
  return out;
}

std::string ratelimit_policy(std::string_view bucket, double rate, double max_permits) {
  auto number = [](double v) {
    if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    return std::string(buf);
  };
  return sf_string(bucket) + ";q=" + number(rate) + ";w=1;burst=" + number(std::floor(max_permits));
}

std::string quota_policy(const config::Quota& q) {
  return sf_string(q.name) + ";q=" + std::to_string(q.limit) + ";w=" + std::to_string(q.period_s);
}

namespace {
void add_item(std::string& list, const std::string& item) {
  if (item.empty()) return;
  if (!list.empty()) list += ", ";
  list += item;
}
}  // namespace

std::string rule_policies(const config::Rule& rule) {
  std::string out;
  if (rule.has_bucket) out = ratelimit_policy(rule.bucket, rule.rate_limit, limiter::shape_of(rule.params).max_permits);
  // A meter: its committed rate and burst (green is what it commits to).
  else if (rule.meter) out = ratelimit_policy(rule.bucket, rule.rate_limit, rule.meter->committed_burst());
  for (const config::Quota& q : rule.quotas) add_item(out, quota_policy(q));
  return out;
}

std::string request_policies(const config::Rule& rule, const config::Rule* channel) {
  std::string out = rule_policies(rule);
  if (channel) add_item(out, rule_policies(*channel));
  return out;
}

}  // namespace tollgate::proxy

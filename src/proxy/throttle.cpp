#include "tollgate/proxy/throttle.hpp"

#include <cmath>
#include <nlohmann/json.hpp>


namespace tollgate::proxy {

std::string_view path_of(std::string_view target) {
  const std::size_t q = target.find_first_of("?#");
  return q == std::string_view::npos ? target : target.substr(0, q);
}

long long ceil_seconds(limiter::Micros us) {
  if (us <= 0) return 0;
  return (us + 999'999) / 1'000'000;
}

namespace {
std::string sf_string(std::string_view s) {
  // sf-string: escape '"' and '\'; interfaceUrls are validated to printable ASCII.
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}
}  // namespace

std::string ratelimit_policy_header(const config::Rule& rule, double max_permits) {
  return config::ratelimit_policy(rule.bucket, rule.rate_limit, max_permits);
}

std::string ratelimit_header(const config::Rule& rule, const limiter::Decision& d) {
  const long long remaining = d.granted || d.remaining >= 1 ? static_cast<long long>(std::floor(d.remaining)) : 0;
  const long long t = d.granted ? 0 : ceil_seconds(d.retry_after_us);
  return sf_string(rule.bucket) + ";r=" + std::to_string(remaining) + ";t=" + std::to_string(t);
}

std::string rejection_body(const config::Rule& rule, const limiter::Decision& d) {
  nlohmann::json j = {{"error", "rate_limited"},
                      {"bucket", rule.bucket},
                      {"configId", rule.config_id},
                      {"rate_limit_per_s", rule.rate_limit},
                      {"wait_window_ms", static_cast<long long>(rule.cache_s * 1000)},
                      {"retry_after_ms", (d.retry_after_us + 999) / 1000}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_body(std::string_view code, std::string_view detail) {
  // Details can quote untrusted bytes (a parse error cites them): never throw on invalid UTF-8.
  nlohmann::json j = {{"error", code}, {"detail", detail}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tollgate::proxy

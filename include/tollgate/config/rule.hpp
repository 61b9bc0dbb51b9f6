// One row of t_ratelimite_conf (or of "limits.rules" in the JSON file) and its validator.
// Both config sources hand raw rows to validate_rows(), so a row means the same wherever it lives.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tollgate/config/switch_state.hpp"
#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::config {

// A row as read, before validation. Absent/NULL columns are empty optionals.
struct RawRow {
  std::optional<std::int64_t> config_id;
  std::optional<std::string> channel_type;
  std::optional<std::string> interface_no;
  std::optional<std::string> interface_url;
  std::optional<double> rate_limit;
  std::optional<double> cache;
  std::optional<std::int64_t> status;
  std::optional<double> burst;            // Tollgate extension: maxPermits (default rateLimit)
  std::optional<double> warmup_seconds;   // Tollgate extension: SmoothWarmingUp period
  std::optional<std::string> scope;       // Tollgate extension: "interface" (default) or "channel"
  std::optional<std::string> mode;        // Tollgate extension: "enforce" (default), "shadow" or "off"
  std::string origin;                     // where the row came from, for messages: "limits.rules[3]"
  std::vector<std::string> type_errors;   // "field: must be a number" found while reading
};

struct Rule {
  std::int64_t config_id = 0;
  std::string channel_type;
  std::string interface_no;
  std::string interface_url;  // the URL suffix it governs (interface rules)
  bool channel = false;       // a channel-wide limit: every interface rule of channel_type draws from it too
  SwitchMode mode = SwitchMode::enforce;  // this rule's own switch (the global one can override it)
  std::string bucket;         // the bucket's name: interface_url, or "channel:<channelType>"
  double rate_limit = 0;      // permits per second
  double cache_s = 0.5;       // wait window in seconds
  bool enabled = false;
  limiter::BucketParams params;
  std::string policy_header;  // RateLimit-Policy value, made once per snapshot (it never changes)
  limiter::Micros timeout_us() const { return static_cast<limiter::Micros>(cache_s * 1e6 + 0.5); }
};

struct RejectedRow {
  std::optional<std::int64_t> config_id;
  std::string origin;
  std::string field;
  std::string reason;
  std::string message() const;  // "limits.rules[2].rateLimit: must be > 0 (configId 7)"
};

struct ValidatedRules {
  std::vector<Rule> rules;            // enabled and disabled rows that passed
  std::vector<RejectedRow> rejected;
};

inline constexpr double kDefaultCache = 0.5;
inline constexpr double kMaxCache = 60.0;
inline constexpr double kMaxRate = 1e6;  // a permit must cost at least one whole microsecond

// Returns the first problem with an interfaceUrl, or empty when it is acceptable.
std::string check_interface_url(const std::string& url);

ValidatedRules validate_rows(const std::vector<RawRow>& rows);

// The RateLimit-Policy field of a bucket (draft-ietf-httpapi-ratelimit-headers, structured field):
// "<bucket>";q=<rate>;w=1;burst=<max permits>
std::string ratelimit_policy(const std::string& bucket, double rate, double max_permits);

}  // namespace tollgate::config

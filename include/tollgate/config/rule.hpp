// One row of t_ratelimite_conf (or of "limits.rules" in the JSON file) and its validator.
// Both config sources hand raw rows to validate_rows(), so a row means the same wherever it lives.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/config/switch_state.hpp"
#include "tollgate/limiter/adaptive_rate.hpp"
#include "tollgate/limiter/three_color.hpp"
#include "tollgate/limiter/token_bucket.hpp"
#include "tollgate/limiter/window.hpp"

namespace tollgate::config {

// Whose counter a request uses: one shared by all callers, or one per client key.
//   none | client_ip | client_ip_path | header:<Name>
struct KeySpec {
  enum class Kind : std::uint8_t { none, client_ip, client_ip_path, header };
  Kind kind = Kind::none;
  std::string header;  // the header's name for Kind::header
  std::string text() const;
  bool operator==(const KeySpec&) const = default;
};
// The spec a keyBy value names, or nullopt with `why` set.
std::optional<KeySpec> parse_key_by(const std::string& text, std::string& why);

// How a rule's interfaceUrl compares with a request path: byte for byte, or with ASCII letters in
// either case (for a supplier whose server is case-insensitive, as IIS and ASP.NET Core are).
// limits.match.case is the default; a row's matchCase overrides it.
enum class MatchCase : std::uint8_t { sensitive, insensitive };

// A row of t_ratelimite_quota (or a rule's "quotas" entry in the JSON file), before validation.
struct RawQuota {
  std::optional<std::int64_t> quota_id;
  std::optional<std::int64_t> config_id;
  std::optional<std::int64_t> period_seconds;
  std::optional<std::int64_t> limit_count;
  std::optional<std::string> algorithm;  // fixed (default) | sliding
  std::optional<std::string> key_by;     // default none
  std::optional<std::int64_t> status;    // default 1
  std::string origin;
  std::vector<std::string> type_errors;
};

struct Quota {
  std::int64_t quota_id = 0;
  std::int64_t period_s = 1;
  std::int64_t limit = 1;
  limiter::WindowAlgorithm algorithm = limiter::WindowAlgorithm::fixed;
  KeySpec key_by;
  std::string name;    // policy name: "<bucket>#q<quotaId>"
  limiter::WindowParams params() const { return {period_s * 1'000'000, limit, algorithm}; }
};

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
  std::optional<std::string> key_by;      // Tollgate extension: the token bucket per client key
  std::optional<double> max_share;        // Tollgate extension: (0, 1] of the wait window per client key
  std::optional<std::string> adaptive;    // Tollgate extension: "on", "shadow" or "off" (default)
  std::optional<std::string> match_case;  // Tollgate extension: matchCase, "sensitive" or "insensitive"
  std::optional<double> cost;             // Tollgate extension: permits a request takes from its bucket (1)
  std::optional<double> channel_cost;     // Tollgate extension: channelCost, permits from its channel's bucket (cost)
  std::optional<std::string> priority;    // Tollgate extension: the priority object as JSON text
  std::optional<std::string> algorithm;   // Tollgate extension: "bucket" (default), "srtcm" or "trtcm"
  std::optional<double> cir, cbs, ebs, pir, pbs;  // Tollgate extension: a meter's rates and sizes
  std::optional<std::string> yellow;      // Tollgate extension: "forward" (default) or "wait"
  MatchCase default_case = MatchCase::sensitive;  // limits.match.case, set by the reader: matchCase when absent
  std::vector<RawQuota> quotas;           // its quota rows
  std::string origin;                     // where the row came from, for messages: "limits.rules[3]"
  std::vector<std::string> type_errors;   // "field: must be a number" found while reading
};

// Priority classes of a rule's bucket (docs/priority.md): `"priority": {"by", "classes",
// "default", "reserve"}`. Classes are ordered highest first; class i may take a permit only while
// the bucket keeps `keep[i]` of its burst (the reserves of the classes above i) after it.
struct Priority {
  enum class By : std::uint8_t { header, method };
  By by = By::header;
  std::string header;                // By::header: the field's name ("X-Tollgate-Priority")
  std::vector<std::string> classes;  // highest first, 2 to 8
  std::size_t default_class = 0;     // index into classes
  std::vector<double> reserve;       // per class, as configured (0 where not given)
  std::vector<double> keep;          // per class: the sum of the reserves of the classes above it
  std::string text;                  // the object as JSON, for the admin API
  // The class a value names (the header's value, or the request's method), else the default.
  std::size_t class_of(std::string_view value) const;
  bool operator==(const Priority&) const = default;
};
// The priority object in `text` (JSON), or nullopt with `field` ("priority.reserve") and `why` set.
std::optional<Priority> parse_priority(const std::string& text, std::string& field, std::string& why);

// A three-colour marker in place of the token bucket (docs/priority.md, "Meters"): `"algorithm":
// "srtcm"` (cir, cbs, ebs) or `"trtcm"` (cir, cbs, pir, pbs). Green is forwarded, yellow forwarded
// marked `X-Tollgate-Color: yellow` (or, with `"yellow": "wait"`, held in the window for a green),
// red refused.
struct Meter {
  bool two_rate = false;
  limiter::SrtcmParams sr;
  limiter::TrtcmParams tr;
  bool wait_green = false;
  const char* algorithm() const { return two_rate ? "trtcm" : "srtcm"; }
  double committed_burst() const { return two_rate ? tr.cbs : sr.cbs; }
  bool operator==(const Meter&) const = default;
};

struct Rule {
  std::int64_t config_id = 0;
  std::string channel_type;
  std::string interface_no;
  std::string interface_url;  // the URL suffix it governs (interface rules)
  MatchCase match_case = MatchCase::sensitive;  // how interface_url is compared (interface rules)
  bool channel = false;       // a channel-wide limit: every interface rule of channel_type draws from it too
  SwitchMode mode = SwitchMode::enforce;  // this rule's own switch (the global one can override it)
  std::string bucket;         // the bucket's name: interface_url, or "channel:<channelType>"
  double rate_limit = 0;      // permits per second
  double cache_s = 0.5;       // wait window in seconds
  bool enabled = false;
  limiter::BucketParams params;
  bool has_bucket = true;     // false: no token bucket (quotas only, or a meter in its place)
  KeySpec key_by;             // the token bucket: one shared (none) or one per client key
  std::optional<double> max_share;  // no client key may hold more than this share of the wait window
  std::string share_key_text;       // maxShare's client key: keyBy, or client_ip when keyBy is none
  KeySpec share_key;
  std::int64_t max_held_per_client = 0;  // maxShare * rateLimit * cache, at least 1
  limiter::Adaptive adaptive = limiter::Adaptive::off;  // the bucket's rate follows upstream throttling
  double cost = 1;            // permits a request takes from the rule's own bucket
  double channel_cost = 1;    // permits it takes from its channel's bucket (default: cost)
  std::optional<Priority> priority;  // classes sharing the bucket (none: first come, first served)
  std::optional<Meter> meter;        // a three-colour marker instead of the bucket (has_bucket false)
  std::vector<Quota> quotas;  // its enabled, valid quotas
  bool limits_anything() const { return has_bucket || meter.has_value() || !quotas.empty(); }
  limiter::Micros timeout_us() const { return static_cast<limiter::Micros>(cache_s * 1e6 + 0.5); }
};

struct RejectedRow {
  std::optional<std::int64_t> config_id;
  std::string origin;
  std::string field;
  std::string reason;
  std::optional<std::int64_t> quota_id = std::nullopt;  // a quota row (t_ratelimite_quota) rather than a rule row
  bool kept_previous = false;  // the row's last valid version stays in force (see keep_last_good)
  std::string message() const;  // "limits.rules[2].rateLimit: must be > 0 (configId 7)"
};

// One input row after its own checks, before the checks across rows (duplicate configId or URL).
struct CheckedRow {
  std::string origin;                       // the row's, for messages
  std::optional<Rule> rule;                 // it passed its own checks
  std::optional<RejectedRow> failure;       // or why not (a quota row that names no rule comes alone as one)
  std::vector<RejectedRow> quota_failures;  // its quota rows that did not pass (the rule keeps the others)
};

struct ValidatedRules {
  std::vector<Rule> rules;            // enabled and disabled rows that passed
  std::vector<RejectedRow> rejected;  // rule rows and quota rows that did not
  // The rows in input order as their own checks left them: keep_last_good settles the duplicates
  // again from these once a rejected row's last valid version takes its place.
  std::vector<CheckedRow> checked;
};

inline constexpr std::int64_t kMaxQuotaPeriod = 86'400;       // one day
inline constexpr std::int64_t kMaxQuotaLimit = 1'000'000'000;
inline constexpr std::size_t kMaxQuotasPerRule = 16;

// Rule strings end up in response headers (RateLimit-Policy, RateLimit), in headers to the
// upstream (X-Tollgate-Shadow), in problem bodies, logs, metric labels and Redis keys, so they are
// held to character sets that are safe in all of them (see check_interface_url, check_channel_type).
inline constexpr std::size_t kMaxUrlLength = 128;         // t_ratelimite_conf.interfaceUrl VARCHAR(128)
inline constexpr std::size_t kMaxChannelTypeLength = 24;  // t_ratelimite_conf.channelType VARCHAR(24)
inline constexpr std::size_t kMaxInterfaceNoBytes = 96;   // VARCHAR(24) of utf8mb4: up to 4 bytes a character

inline constexpr double kDefaultCache = 0.5;
inline constexpr double kMaxCache = 60.0;
inline constexpr double kMaxRate = 1e6;  // a permit must cost at least one whole microsecond
inline constexpr double kMaxBurst = 1e9;
inline constexpr double kMaxCost = 1e6;
inline constexpr std::size_t kMaxClasses = 8;

// Names a quota after its rule's bucket: "<bucket>#q<quotaId>".
void name_quota(Quota& q, const std::string& bucket);

// Returns the first problem with an interfaceUrl, or empty when it is acceptable: '/' and then
// segments of RFC 3986 path characters only (letters, digits, -._~!$&'()*+,=:@ and %XX), in the
// normal form request paths are matched in (no ';', no '.' or '..' segment, no segment ending in
// '.', escapes upper-case and only for what must be escaped, never %2F, %5C, %00-%1F or %7F, no
// %20 at either end of a segment), no empty segment, no trailing '/', at most 128 characters.
std::string check_interface_url(const std::string& url);
// The same for a channelType: an HTTP token (RFC 9110 tchar: letters, digits, !#$%&'*+-.^_`|~),
// 1 to 24 characters.
std::string check_channel_type(const std::string& type);
// The same for an interfaceNo (informational, only listed by the admin API): no control
// characters, at most 96 bytes.
std::string check_interface_no(const std::string& no);

// Validates rows read from a file or a table. `unattached`: rejections the reader found that belong
// to no row (a quota row naming no rule); they are listed after the rows' own.
ValidatedRules validate_rows(const std::vector<RawRow>& rows, std::vector<RejectedRow> unattached = {});

// Settles the checks across rows (duplicate configId, one enabled row per interfaceUrl or channel)
// in input order. With `in_force` (the rules of the active snapshot), a row that was rejected and
// whose configId has a valid version there keeps that version in its place: that version still
// holds its URL, so a later row claiming the same URL is the duplicate, exactly as if the bad edit
// had not been made. A quota row that was rejected likewise keeps its last valid version.
ValidatedRules settle_rows(std::vector<CheckedRow> checked, const std::vector<Rule>* in_force);

}  // namespace tollgate::config

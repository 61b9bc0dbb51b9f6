// Throttle signals in an upstream's response: whether the upstream says it is out of
// capacity or quota, and for how long, so that the gateway can hold the interface's traffic back
// instead of passing on requests only to have them refused.
//   Retry-After:  delay-seconds or an HTTP-date (RFC 9110 10.2.3); a date is read against the
//                 response's own Date field (the upstream's clock), never against ours
//   RateLimit:    draft-ietf-httpapi-ratelimit-headers, a structured-field list (RFC 8941) of
//                 items "<policy>";r=<units left>;t=<seconds until reset>
// And what an upstream advertises it has left (read_advert): the IETF RateLimit and
// RateLimit-Policy fields, the older RateLimit-Limit/-Remaining/-Reset, X-RateLimit-*, or fields
// of its own (upstreams.<name>.rate_fields).
// Pure functions, std only (and the config's plain structs): unit-testable and fuzzable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/config/gateway_config.hpp"

namespace tollgate::proxy {

inline constexpr std::int64_t kMaxPauseUs = 86'400'000'000;  // an upstream's pause is capped at a day

// Seconds since the Unix epoch of an HTTP-date (RFC 9110 5.6.7): IMF-fixdate
// ("Sun, 06 Nov 1994 08:49:37 GMT") or the obsolete RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT")
// and asctime ("Sun Nov  6 08:49:37 1994") forms. Strict (case, spacing, ranges, the day name
// matching the date): nullopt otherwise. An RFC 850 two-digit year is the one within 50 years of
// `now_s` (a date more than 50 years ahead is in the past century); the one-argument form takes
// `now_s` from the system clock (only its year matters).
std::optional<std::int64_t> parse_http_date(std::string_view value, std::int64_t now_s);
std::optional<std::int64_t> parse_http_date(std::string_view value);

// The delay a Retry-After value asks for, in microseconds, at most kMaxPauseUs: delay-seconds, or
// an HTTP-date minus the response's Date (`date`; a date already past is 0). nullopt when
// malformed, or for an HTTP-date without a usable Date. Surrounding spaces are not part of a value.
std::optional<std::int64_t> retry_after_us(std::string_view value, std::optional<std::string_view> date);

struct RateLimitItem {
  std::string name;        // the policy: an sf-string or a token
  std::optional<double> r;  // units left
  std::optional<double> t;  // seconds until the quota resets
  // RateLimit-Policy's parameters (parse_ratelimit_policy only):
  std::optional<double> q;  // the quota: units per window
  std::optional<double> w;  // the window, in seconds
  std::string qu;           // the quota's unit ("": requests, the default)
};

// The items of RateLimit field values (several field lines joined with ", "). r and t are
// non-negative numbers (integers, or decimals with up to 9 fraction digits), at most 15 integer
// digits; other parameters are ignored. A malformed item is skipped, the others are kept;
// `skipped`, when given, is increased by the number skipped.
std::vector<RateLimitItem> parse_ratelimit(std::string_view value, int* skipped = nullptr);

// The same for RateLimit-Policy values: q and w are the numbers, qu a string or a token; r and t
// are not read.
std::vector<RateLimitItem> parse_ratelimit_policy(std::string_view value, int* skipped = nullptr);



// The RateLimit value a client gets when both the gateway (`ours`) and the upstream sent one: ours,
// then each upstream item made at least as restrictive as ours (r = min(its r, our smallest r),
// t = max(its t, our largest t), whole numbers: r rounded down, t up). Upstream items that do not
// parse are dropped, never passed on unclamped; their unknown parameters are not kept.
std::string restrict_ratelimit(std::string_view ours, std::string_view upstream);

// What an upstream advertises it has left, so that the gateway can pace on the supplier's allowance.
struct Advert {
  double remaining = 0;        // units left in the supplier's current window
  double limit = 0;            // its quota per window (0: not said)
  std::int64_t reset_us = 0;   // from the answer to the window's end (>= 0, capped at kMaxPauseUs; 0: not said or now)
  std::int64_t window_us = 0;  // the window's length (0: not said; rate_fields.window_s when set)
  int ignored = 0;             // fields or items present but unusable and left out (count them, as malformed)
};
enum class AdvertRead : std::uint8_t { none, ok, malformed };  // none: no such fields; malformed: present but unusable (count it)
struct HeaderView {
  std::string_view name, value;
};

// Reads the rate-limit fields of one answer as `cfg` says, into `out` (written only on ok).
// `fields`: the answer's fields (names in any case, a name may repeat); `date`: the answer's Date
// value if any; `now_unix_s`: the gateway's wall clock (only for a Unix-time reset without a
// usable Date). Style "auto" takes the first usable of: the IETF RateLimit (+ RateLimit-Policy),
// RateLimit-Limit/-Remaining/-Reset, X-RateLimit-Limit/-Remaining/-Reset. The IETF rules hold:
// a malformed, contradictory (remaining over the limit) or absurd (a reset over a day, a count
// over 1e12) field or item is ignored; malformed when nothing usable remains. Never throws.
// The caller, not this function: Retry-After takes precedence over these fields, and an answer
// carrying an `Age` field (served from a cache) must not be believed: its fields are stale.
AdvertRead read_advert(const config::RateFieldsConfig& cfg, const std::vector<HeaderView>& fields,
                       std::optional<std::string_view> date, std::int64_t now_unix_s, Advert& out);

// What an upstream's answer says about its limit: whether it throttles (classify_response below),
// and, for an adaptive rule that asks (want_advert), the allowance its rate-limit fields advertise
// (read_advert) and when they were read on the steady clock. Only an answer that is no throttle is
// read for its allowance: a refusal's Retry-After and RateLimit take precedence.
struct ThrottleSignal {
  bool throttled = false;
  std::int64_t pause_us = 0;  // how long the upstream asks to be left alone (0: it did not say)
  std::string_view cause;     // "429", "503" or "ratelimit_r0" (static strings); empty when not throttled
  bool want_advert = false;   // set by the caller: read the advertised allowance
  AdvertRead advert_read = AdvertRead::none;
  Advert advert;
  std::int64_t read_at_us = 0;
};

// Whether a response is the upstream throttling: a 429; a 503 with a Retry-After or RateLimit
// field (without either it is an outage, not a throttle); any response with a RateLimit item
// without a whole unit left (r < 1). The pause is the longer of the Retry-After delay and the t of
// those items. `ratelimit` is the joined RateLimit values ("" for none).
ThrottleSignal classify_response(int status, std::optional<std::string_view> retry_after,
                                 std::optional<std::string_view> date, std::string_view ratelimit);

}  // namespace tollgate::proxy

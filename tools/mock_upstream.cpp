// tollgate-mock-upstream --port P [--host H] [--latency-ms N] [--connect-delay-ms N]
//                        [--limit SUFFIX=RATE|SUFFIX={JSON} ...] [--auth JSON]
//                        [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
// A small airline-style upstream for demos, tests and benchmarks. Every path answers with small
// JSON; the query can ask for special behaviour:
//   ?status=N      answer with status N          ?delay_ms=N  answer after N ms (a timer)
//   ?chunked=1     send the body chunked         ?echo=1      echo method, target, headers, body
//   ?size=N        pad the body to about N bytes
//   ?reply_request_id=V  the response carries X-Request-Id: V (and, with &reply_twice=1, a second
//                  one, V-2); ?echo=1 also lists the request's fields in order, repeated ones
//                  included ("fields": [[name, value], ...])
// GET /__stats returns per-path counts and arrival times (CLOCK_MONOTONIC microseconds, the clock
// the gateway uses), the connections accepted and those open now (the one asking included); POST
// /__reset clears them ("open" stays). --connect-delay-ms N holds each new connection N ms before
// its TLS handshake (plain HTTP: before its first request), standing in for the round trips of a
// distant supplier. Port 0 picks a free port; the chosen one is printed.
//
// A throttling supplier: --limit SUFFIX=RATE (repeatable) or PUT /__limits with
// {"<suffix>": RATE, ...} (0 or null: no limit; the rates in force are replaced, and can change
// while it runs) makes every path ending in SUFFIX allow RATE requests a second (a token bucket of
// one second's burst); past it the answer is 429 with Retry-After (whole seconds until a permit),
// RateLimit-Policy and RateLimit (r=0, t=seconds). {"<suffix>": {"rate": R, "retry_after_s": N}}
// answers every 429 with Retry-After N instead. GET /__limits shows them (with the permits each
// holds now, "tokens"); /__stats counts each
// path's "throttled" answers beside its "count" of arrivals, and their times ("throttled_us").
//
// The object form takes more options, since real suppliers count and refuse in different ways
// and the gateway has to read each of them (also as --limit 'SUFFIX={"rate": R, ...}'):
//   "kind": "token_bucket" (the default, above) or "fixed_window": at most a window's allowance
//          (see "per_window") per window of its clock (by default the calendar seconds of the wall
//          clock, CLOCK_REALTIME: the window is floor(now_us / 1e6)), the count starting again at
//          each window's start: twice the allowance can pass within a moment across a boundary,
//          which a token bucket never lets through. A refusal's time is the rest of the window,
//          rounded up (1 s for one-second windows). Its "tokens" in GET /__limits is what is left
//          of the current window's allowance (per_window - used, at least 0), shown beside
//          "per_window".
//   "signal": what a refusal carries: "full" (the default: Retry-After, RateLimit-Policy and
//          RateLimit), "retry_after" (Retry-After only), "ratelimit" (RateLimit-Policy and
//          RateLimit only) or "bare" (none of them). The body's "retry_after_s" goes with the
//          Retry-After field. "retry_after_s" sets the seconds of Retry-After and of RateLimit's t
//          alike, where they are sent. RateLimit-Policy's q is the integer part of the rate, at
//          least 1 (a fixed window's allowance per window, w its length in seconds).
//   "status": 429 (the default) or 503, the status of the limit's refusals.
//   "refuse_callers": ["10.0.0.99", ...]: a request whose X-Real-IP (the gateway sets it to the
//          client's address) is one of them is refused for that caller's own quota: 429 with
//          neither Retry-After nor RateLimit fields and {"error":"caller_quota_exceeded"}, before
//          the limit is asked, so that it takes nothing from the others' allowance. It counts in
//          "throttled" (and "throttled_us") like every refusal, and in "caller_refused" and
//          "caller_refused_us" too. Any other caller is decided by the limit as usual. A rate of 0
//          drops the limit with its callers; a limit that should only refuse callers takes a rate
//          it never reaches.
//   "window_ms": a fixed window's length (1000 by default; 10000 for "100 per 10 s", 60000 for a
//          minute). "rate" stays per second: the allowance per window is floor(rate x W / 1000), at
//          least 1, unless "per_window" (a whole number >= 1) says it outright ("5000 per hour":
//          {"rate": 1, "window_ms": 3600000, "per_window": 5000}).
//   "offset_ms": where the windows start within the supplier's clock (0 to window_ms - 1): they
//          are [k*W + offset, (k+1)*W + offset) of its CLOCK_REALTIME microseconds.
//   "clock_offset_ms": the supplier's clock ahead of the wall clock (negative: behind), a few
//          seconds at most in practice: its windows fall by its clock, and so do the Date field
//          and the Unix times it sends. A limit with a clock offset or "advertise" sends Date (its
//          clock, whole seconds) on every answer it decides (not refuse_callers' refusals).
//   "advertise": the rate-limit fields it sends on EVERY answer of the limit, successes and
//          refusals alike (default "none": fields only on refusals, as "signal" says):
//          "ietf"     RateLimit-Policy: "default";q=<per window>;w=<window s> and
//                     RateLimit: "default";r=<left>;t=<seconds to the window's end, rounded up>
//          "ietf_ms"  the same with t to 3 decimals (a precise supplier, on its refusals too)
//          "legacy"   RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (seconds, rounded up)
//          "x"        X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset as a Unix time in
//                     seconds (rounded up) by its clock, GitHub style
//          "x_delta"  the same with X-RateLimit-Reset in seconds from now (rounded up)
//          "x_ms"     the same with X-RateLimit-Reset as a Unix time in milliseconds (rounded up)
//          Left is what the current window still allows (0 once refused); the reset is the
//          window's end. A token bucket advertises its whole tokens left, its burst as the limit
//          (w=1), and the seconds until it is full again (0 when full). Its refusals under
//          "full" or "ratelimit" then carry RateLimit r=0 with the same policy name (and the
//          window's w); a limit that advertises nothing names its policy "supplier" on them, as
//          it always did. A caller refused by refuse_callers gets none of these fields.
//   "advertise_lie": {"remaining": N}: a supplier whose fields are wrong on purpose: it claims N
//          left whatever is true, and still refuses by its real count.
// GET /__limits also counts, per limit, the requests it let through ("accepted"), those it
// refused ("refused"; not the refuse_callers ones), and the most it let through in any one window
// ("max_in_window": of window_ms at offset_ms on its clock, for a token bucket too, which these
// windows do not govern), so that a test can tell no window was ever exceeded. POST /__reset
// clears these counts and keeps the limits' state.
// A limit kept at the same rate and kind keeps its bucket or window; a new or changed one starts
// full; its other options change at once. A wrong option is a 400 naming it. GET /__limits shows
// every option of each limit, in the form PUT takes. /__stats also counts each path's "accepted"
// (answered 2xx) and their arrival times ("accepted_us"). An unknown option is ignored, as it was
// before there were options.
//
// An HTTPS upstream: --tls-cert FILE --tls-key FILE (PEM; the certificate file may hold the chain)
// serve TLS 1.2 and 1.3 only on the port, with the same answers, stats and keep-alive as plain
// HTTP. --tls-client-ca FILE also requires a client certificate signed by a CA in FILE (a
// handshake without one fails). Server-side session resumption (cache and tickets) is on, as
// OpenSSL has it by default. The listening line then ends in " (https)".
//
// An OAuth2 supplier: POST /oauth2/token answers the client-credentials grant (RFC 6749 4.4). Its
// body is a form (application/x-www-form-urlencoded; '+' and %XX are decoded) holding
// grant_type=client_credentials and, optionally, scope. The client's id and secret come in
// Authorization: Basic base64(id:secret), each form-encoded before base64 (RFC 6749 2.3.1), or as
// the form's client_id and client_secret (Basic wins when both are sent). A request that passes is
// answered 200 {"access_token": "tok-<N>-<hex>", "token_type": "Bearer", "expires_in": E}, with
// "scope" echoing the one asked for, if any. Wrong or missing credentials, where expected ones are
// set, are a 401 {"error":"invalid_client"} with WWW-Authenticate: Basic, and so is a Basic field
// that does not decode to id:secret, whatever is expected; a missing grant_type or a field sent
// twice is a 400 {"error":"invalid_request"}, another grant_type a 400
// {"error":"unsupported_grant_type"}, a method other than POST a 405. Every answer of the endpoint
// carries Cache-Control: no-store. A token is valid until E seconds after its answer was sent (the
// monotonic clock) or until it is revoked. The endpoint is not counted in /__stats.
// PUT (or POST) /__auth with an object changes the settings it names and keeps the others (--auth
// JSON does the same at start); it answers as GET /__auth does:
//   "expires_in": E, seconds (an integer >= 1; 1800 at start), for the tokens issued from then on.
//   "mode": what a request that passes the checks gets: "ok" (the default), "fail" (500
//          {"error":"server_error"}), "slow" (every answer, refusals included, comes after slow_ms
//          milliseconds, on a timer), "garbage" (200 with the body <html>oops</html>, still said to
//          be application/json) or "no_token" (200 {"token_type": "Bearer", "expires_in": E}).
//   "slow_ms": milliseconds (an integer >= 0; 1000 at start).
//   "client_id", "client_secret": the credentials expected. "" (as at start; null too) accepts
//          any, none included; each of the two is checked on its own.
//   "require": true makes every API path (one not starting with /__, other than /oauth2/token)
//          require Authorization: Bearer <a valid token>; without one the answer is 401
//          {"error":"invalid_token"} with WWW-Authenticate: Bearer error="invalid_token".
//   "require_header": {"name": N, "value": V} makes every API path require field N with exactly
//          the value V, a 401 {"error":"missing_api_key"} otherwise; null drops it.
//   "unauthorized_callers": ["10.0.0.99", ...]: a request whose X-Real-IP is one of them gets the
//          401 {"error":"invalid_token"} whatever token it carries (one caller's own refusal: its
//          account or entitlement), checked first.
// The bearer token is checked first, then the field, both before the limits: a refused request is
// counted in /__stats as an arrival and in its path's "unauthorized" (and "unauthorized_us"),
// never as accepted, and takes nothing from a limit. A wrong type or value, or an unknown field, is
// a 400 naming it, and nothing changes. POST /__auth/revoke invalidates every token issued so far
// (answering {"revoked": n}, the tokens that were still valid).
// GET /__auth shows the settings, in the form PUT takes, and these counts:
//   "token_requests", "token_ok" (tokens issued), "token_failed" (the other answers),
//   "token_outcomes" (answers by outcome: {"ok": n, "invalid_client": n, "invalid_request": n,
//   "unsupported_grant_type": n, "server_error": n, "garbage": n, "no_token": n,
//   "method_not_allowed": n}, those seen only), "token_times_us" (the arrival of each request, the
//   clock of /__stats), "token_styles" (how each sent its credentials: "basic", "body" or "none"),
//   "token_scopes" (the scope each asked for, or null), "tokens_valid" (now), "unauthorized" (API
//   requests refused by either check), "last_authorization" (the Authorization field of the last
//   API request, null without one) and "last_header_value" (its field named by require_header, or
//   X-Api-Key when none is required; null without one). POST /__reset clears these counts too, and
//   keeps the settings and the tokens.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using nlohmann::json;

namespace {

struct PathStats {
  std::uint64_t count = 0;
  std::uint64_t throttled = 0;        // refusals of either kind: the limit's and the callers'
  std::uint64_t caller_refused = 0;   // of those, refused for the caller (refuse_callers)
  std::uint64_t accepted = 0;         // answered 2xx
  std::uint64_t unauthorized = 0;     // refused 401 by "require" or "require_header"
  std::vector<std::int64_t> arrivals_us;
  std::vector<std::int64_t> throttled_us;  // arrivals refused (429, or 503 with "status": 503)
  std::vector<std::int64_t> caller_refused_us;
  std::vector<std::int64_t> accepted_us;
  std::vector<std::int64_t> unauthorized_us;
};

std::int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

// The wall clock, for fixed windows: a supplier counting per calendar second resets on the second
// boundaries of its own clock, which the monotonic clock does not have.
std::int64_t wall_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

enum class Kind { token_bucket, fixed_window };
// Which rate-limit fields it sends on every answer (see "advertise" above).
enum class Advertise { none, ietf, ietf_ms, legacy, x, x_delta, x_ms };
// Which fields a refusal carries: real suppliers send all, one, or none of them.
enum class Signal { full, retry_after, ratelimit, bare };

constexpr std::pair<Kind, const char*> kKinds[] = {{Kind::token_bucket, "token_bucket"},
                                                   {Kind::fixed_window, "fixed_window"}};
constexpr std::pair<Advertise, const char*> kAdvertise[] = {
    {Advertise::none, "none"}, {Advertise::ietf, "ietf"}, {Advertise::ietf_ms, "ietf_ms"},
    {Advertise::legacy, "legacy"}, {Advertise::x, "x"}, {Advertise::x_delta, "x_delta"}, {Advertise::x_ms, "x_ms"}};
constexpr std::pair<Signal, const char*> kSignals[] = {
    {Signal::full, "full"}, {Signal::retry_after, "retry_after"}, {Signal::ratelimit, "ratelimit"}, {Signal::bare, "bare"}};

template <class E, std::size_t N>
const char* name_of(E e, const std::pair<E, const char*> (&names)[N]) {
  for (const auto& [v, n] : names)
    if (v == e) return n;
  return "";
}

// One supplier limit: a token bucket holding up to `rate` permits (one second's worth), or a count
// per second of the wall clock.
struct Limit {
  double rate = 0;
  int retry_after_s = 0;  // > 0: every refusal that sends a time says this
  Kind kind = Kind::token_bucket;
  Signal signal = Signal::full;
  int status = 429;
  std::vector<std::string> refuse_callers;  // X-Real-IP values always refused, outside the limit
  // token_bucket
  double tokens = 0;
  std::int64_t last_us = 0;
  // fixed_window
  std::int64_t window_s = 0;  // the index of the window `used` counts
  std::int64_t used = 0;
  std::int64_t window_ms = 1000, offset_ms = 0, clock_offset_ms = 0;
  std::int64_t per_window_set = 0;  // 0: from the rate
  Advertise advertise = Advertise::none;
  std::int64_t lie = -1;  // >= 0: the remaining it claims (advertise_lie)
  // What the limit let through and refused, and the most it let through in one window (of
  // window_ms at offset_ms on its clock, for a token bucket too), so that a test can tell that no
  // window was ever exceeded.
  std::uint64_t accepted = 0, refused = 0;
  std::int64_t counted_window = LLONG_MIN, in_window = 0, max_in_window = 0;

  // A fixed window's allowance: a fraction of a request cannot pass, and a rate under 1/s still
  // lets one through, as the bucket does.
  std::int64_t per_window() const {
    if (per_window_set > 0) return per_window_set;
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(rate * static_cast<double>(window_ms) / 1000.0));
  }
  // The supplier's clock, and the window it is in (windows start at `offset_ms` past multiples of W).
  std::int64_t clock_us() const { return wall_us() + clock_offset_ms * 1000; }
  std::int64_t window_of(std::int64_t clock) const {
    const std::int64_t w = window_ms * 1000;
    const std::int64_t t = clock - offset_ms * 1000;
    return t >= 0 ? t / w : (t - w + 1) / w;
  }
  std::int64_t window_end(std::int64_t index) const { return (index + 1) * window_ms * 1000 + offset_ms * 1000; }
  // Its answers carry a Date of its own clock where a client may read it: a point-in-time reset,
  // or a clock that is off.
  bool sends_date() const { return advertise != Advertise::none || clock_offset_ms != 0; }
  // The IETF fields' policy name: "default" where it advertises (as the draft's examples name a
  // supplier's one policy), "supplier" on the refusals of one that does not, as it always said.
  const char* policy_name() const { return advertise == Advertise::none ? "supplier" : "default"; }
  void count(bool passed, std::int64_t clock) {
    if (!passed) {
      ++refused;
      return;
    }
    ++accepted;
    if (const std::int64_t index = window_of(clock); index != counted_window) {
      counted_window = index;
      in_window = 0;
    }
    max_in_window = std::max(max_in_window, ++in_window);
  }
  void clear_counts() {
    accepted = refused = 0;
    counted_window = LLONG_MIN;
    in_window = max_in_window = 0;
  }
  // Full: as a new or changed limit starts.
  void fill() {
    tokens = std::max(rate, 1.0);
    last_us = now_us();
    window_s = window_of(clock_us());
    used = 0;
  }
};
std::map<std::string, Limit> g_limits;  // by path suffix

// The limit a path falls under (the longest suffix), or null.
Limit* limit_for(const std::string& path) {
  Limit* best = nullptr;
  std::size_t best_len = 0;
  for (auto& [suffix, l] : g_limits)
    if (path.ends_with(suffix) && suffix.size() >= best_len) {
      best = &l;
      best_len = suffix.size();
    }
  return best;
}

// Takes a permit from a token bucket now, or returns the microseconds until one.
std::int64_t take_token(Limit& l, std::int64_t now) {
  // Up to one second's worth, and at least one permit (a rate under 1/s still lets one through).
  l.tokens = std::min(std::max(l.rate, 1.0), l.tokens + static_cast<double>(now - l.last_us) / 1e6 * l.rate);
  l.last_us = now;
  if (l.tokens >= 1) {
    l.tokens -= 1;
    return 0;
  }
  return static_cast<std::int64_t>((1 - l.tokens) / l.rate * 1e6) + 1;
}

// Counts a request in a fixed window at the supplier's time `clock`, or returns the microseconds
// until the window ends.
std::int64_t take_in_window(Limit& l, std::int64_t clock) {
  const std::int64_t index = l.window_of(clock);
  if (index != l.window_s) {
    l.window_s = index;
    l.used = 0;
  }
  if (l.used < l.per_window()) {
    ++l.used;
    return 0;
  }
  return l.window_end(index) - clock;
}

// What is left of the limit now and the microseconds until it is whole again (a window's end, a
// bucket full), the allowance per window and the window's length in seconds: what it advertises.
struct Left {
  std::int64_t remaining = 0, reset_us = 0, limit = 0;
  double window_s = 1;
};
Left left_of(const Limit& l) {
  Left out;
  if (l.kind == Kind::fixed_window) {
    const std::int64_t clock = l.clock_us();
    const std::int64_t index = l.window_of(clock);
    out.remaining = std::max<std::int64_t>(0, l.per_window() - (index == l.window_s ? l.used : 0));
    out.reset_us = l.window_end(index) - clock;
    out.limit = l.per_window();
    out.window_s = static_cast<double>(l.window_ms) / 1000.0;
  } else {
    const double cap = std::max(l.rate, 1.0);
    const double tokens = std::min(cap, l.tokens + static_cast<double>(now_us() - l.last_us) / 1e6 * l.rate);
    out.remaining = static_cast<std::int64_t>(tokens);
    out.reset_us = static_cast<std::int64_t>((cap - tokens) / l.rate * 1e6);
    out.limit = static_cast<std::int64_t>(cap);
  }
  if (l.lie >= 0) out.remaining = l.lie;
  return out;
}

// The supplier's clock as an HTTP-date (the Date field of a supplier whose clock is off).
std::string http_date_of(std::int64_t clock_us) {
  const std::time_t t = static_cast<std::time_t>(clock_us / 1'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

// Its RateLimit-Policy value: the allowance per window (a bucket's burst) and the window in seconds.
std::string policy_field(const Limit& l, const Left& x) {
  char w[32];
  std::snprintf(w, sizeof w, "%g", x.window_s);
  return std::string("\"") + l.policy_name() + "\";q=" + std::to_string(x.limit) + ";w=" + w;
}

// The fields of "advertise" on an answer, as (name, value) pairs, with the Date of its clock.
std::vector<std::pair<std::string, std::string>> advertised_fields(const Limit& l) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::int64_t clock = l.clock_us();
  if (l.sends_date()) out.push_back({"Date", http_date_of(clock)});
  if (l.advertise == Advertise::none) return out;
  const Left x = left_of(l);
  const long long up_s = (x.reset_us + 999'999) / 1'000'000;
  const std::string limit = std::to_string(x.limit), remaining = std::to_string(x.remaining);
  switch (l.advertise) {
    case Advertise::ietf:
    case Advertise::ietf_ms: {
      char t[32];
      if (l.advertise == Advertise::ietf) std::snprintf(t, sizeof t, "%lld", up_s);
      else std::snprintf(t, sizeof t, "%.3f", static_cast<double>(x.reset_us) / 1e6);
      out.push_back({"RateLimit-Policy", policy_field(l, x)});
      out.push_back({"RateLimit", std::string("\"") + l.policy_name() + "\";r=" + remaining + ";t=" + t});
      break;
    }
    case Advertise::legacy:
      out.push_back({"RateLimit-Limit", limit});
      out.push_back({"RateLimit-Remaining", remaining});
      out.push_back({"RateLimit-Reset", std::to_string(up_s)});
      break;
    case Advertise::x:
    case Advertise::x_delta:
    case Advertise::x_ms: {
      out.push_back({"X-RateLimit-Limit", limit});
      out.push_back({"X-RateLimit-Remaining", remaining});
      const std::int64_t reset_at = clock + x.reset_us;  // by its clock
      out.push_back({"X-RateLimit-Reset", l.advertise == Advertise::x_delta ? std::to_string(up_s)
                                          : l.advertise == Advertise::x      ? std::to_string((reset_at + 999'999) / 1'000'000)
                                                                             : std::to_string((reset_at + 999) / 1'000)});
      break;
    }
    case Advertise::none:
      break;
  }
  return out;
}

// What a request under a limit gets.
struct Decision {
  enum What { pass, limited, caller } what = pass;
  const Limit* limit = nullptr;
  std::int64_t wait_us = 0;  // limited: until the limit would let it through
};

// A caller listed in refuse_callers is refused before the limit is asked, so that its requests
// take nothing from the others' allowance, as a supplier's per-user quota would not.
Decision decide(const std::string& path, std::string_view real_ip) {
  Limit* l = limit_for(path);
  if (!l) return {};
  if (!real_ip.empty() && std::find(l->refuse_callers.begin(), l->refuse_callers.end(), real_ip) != l->refuse_callers.end())
    return {Decision::caller, l, 0};
  const std::int64_t clock = l->clock_us();
  const std::int64_t wait = l->kind == Kind::fixed_window ? take_in_window(*l, clock) : take_token(*l, now_us());
  l->count(wait == 0, clock);
  if (wait > 0) return {Decision::limited, l, wait};
  return {Decision::pass, l, 0};
}

// Reads the object form's optional fields into `l`; returns why they are wrong, or "".
std::string read_options(const std::string& suffix, const json& v, Limit& l) {
  const std::string where = "limit for " + suffix + ": ";
  if (v.contains("retry_after_s") && v["retry_after_s"].is_number_integer()) l.retry_after_s = v["retry_after_s"];
  auto pick = [&](const char* field, auto& out, const auto& names, const std::string& expected) -> std::string {
    if (!v.contains(field)) return {};
    const json& f = v[field];
    if (f.is_string())
      for (const auto& [e, n] : names)
        if (f.get<std::string>() == n) {
          out = e;
          return {};
        }
    return where + field + " must be " + expected;
  };
  if (std::string why = pick("kind", l.kind, kKinds, R"("token_bucket" or "fixed_window")"); !why.empty()) return why;
  if (std::string why = pick("signal", l.signal, kSignals, R"("full", "retry_after", "ratelimit" or "bare")");
      !why.empty())
    return why;
  if (v.contains("status")) {
    const json& f = v["status"];
    if (!f.is_number_integer() || (f.get<long long>() != 429 && f.get<long long>() != 503))
      return where + "status must be 429 or 503";
    l.status = f.get<int>();
  }
  if (std::string why = pick("advertise", l.advertise, kAdvertise,
                              R"("none", "ietf", "ietf_ms", "legacy", "x", "x_delta" or "x_ms")");
      !why.empty())
    return why;
  auto whole = [&](const char* field, std::int64_t& out, std::int64_t lo, std::int64_t hi) -> std::string {
    if (!v.contains(field)) return {};
    const json& f = v[field];
    if (!f.is_number_integer() || f.get<std::int64_t>() < lo || f.get<std::int64_t>() > hi)
      return where + field + " must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
    out = f.get<std::int64_t>();
    return {};
  };
  for (const auto& [field, out, lo, hi] :
       {std::tuple<const char*, std::int64_t*, std::int64_t, std::int64_t>{"window_ms", &l.window_ms, 1, 86'400'000},
        {"per_window", &l.per_window_set, 1, 1'000'000'000},
        {"clock_offset_ms", &l.clock_offset_ms, -3'600'000, 3'600'000}})
    if (std::string why = whole(field, *out, lo, hi); !why.empty()) return why;
  if (v.contains("advertise_lie") && !v["advertise_lie"].is_null()) {
    // An object, so that a lie about another field can join it.
    const json& f = v["advertise_lie"];
    if (!f.is_object() || f.size() != 1 || !f.contains("remaining") || !f["remaining"].is_number_integer() ||
        f["remaining"].get<std::int64_t>() < 0 || f["remaining"].get<std::int64_t>() > 1'000'000'000)
      return where + "advertise_lie must be {\"remaining\": N}, N a whole number from 0 to 1000000000";
    l.lie = f["remaining"].get<std::int64_t>();
  }
  if (std::string why = whole("offset_ms", l.offset_ms, 0, l.window_ms - 1); !why.empty()) return why;
  if (v.contains("refuse_callers")) {
    const json& f = v["refuse_callers"];
    const std::string why = where + "refuse_callers must be an array of addresses (non-empty strings)";
    if (!f.is_array()) return why;
    for (const json& a : f) {
      if (!a.is_string() || a.get<std::string>().empty()) return why;
      l.refuse_callers.push_back(a.get<std::string>());
    }
  }
  return {};
}

// Replaces the limits with {"suffix": rate | {"rate": r, ...options} | 0 | null}.
std::string set_limits(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const std::exception& e) {
    return std::string("not JSON: ") + e.what();
  }
  if (!j.is_object()) return "expected an object of path suffix -> rate";
  std::map<std::string, Limit> next;
  for (auto it = j.begin(); it != j.end(); ++it) {
    Limit l;
    const json& v = it.value();
    if (v.is_null()) continue;
    if (v.is_number()) {
      l.rate = v.get<double>();
    } else if (v.is_object() && v.contains("rate") && v["rate"].is_number()) {
      l.rate = v["rate"].get<double>();
      if (std::string why = read_options(it.key(), v, l); !why.empty()) return why;
    } else {
      return "limit for " + it.key() + ": expected a rate or {\"rate\": r, \"retry_after_s\": n}";
    }
    if (l.rate < 0) return "limit for " + it.key() + ": rate must be >= 0";
    if (l.rate == 0) continue;
    // A limit kept at the same rate and kind keeps its bucket or window; a new or changed one
    // starts full. Its other options take effect at once.
    auto old = g_limits.find(it.key());
    if (old != g_limits.end() && old->second.rate == l.rate && old->second.kind == l.kind &&
        old->second.window_ms == l.window_ms && old->second.offset_ms == l.offset_ms &&
        old->second.clock_offset_ms == l.clock_offset_ms && old->second.per_window_set == l.per_window_set) {
      l.tokens = old->second.tokens;
      l.last_us = old->second.last_us;
      l.window_s = old->second.window_s;
      l.used = old->second.used;
      l.accepted = old->second.accepted;
      l.refused = old->second.refused;
      l.counted_window = old->second.counted_window;
      l.in_window = old->second.in_window;
      l.max_in_window = old->second.max_in_window;
    } else {
      l.fill();
    }
    next.emplace(it.key(), std::move(l));
  }
  g_limits = std::move(next);
  return {};
}

// The limits in force, each with the permits it holds now ("tokens": what it would still let
// through at once; a test reads it to tell what it allowed from what was used). A fixed window
// holds what is left of the current second's allowance. Each entry is also a valid limit for
// PUT, which is how --limit adds to the earlier flags.
json limits_json() {
  json out = json::object();
  const std::int64_t now = now_us();
  for (const auto& [suffix, l] : g_limits) {
    json e = {{"rate", l.rate},
              {"retry_after_s", l.retry_after_s},
              {"kind", name_of(l.kind, kKinds)},
              {"signal", name_of(l.signal, kSignals)},
              {"status", l.status},
              {"refuse_callers", l.refuse_callers}};
    e["advertise"] = name_of(l.advertise, kAdvertise);
    if (l.lie >= 0) e["advertise_lie"] = {{"remaining", l.lie}};
    e["window_ms"] = l.window_ms;
    e["offset_ms"] = l.offset_ms;
    e["clock_offset_ms"] = l.clock_offset_ms;
    e["accepted"] = l.accepted;
    e["refused"] = l.refused;
    e["max_in_window"] = l.max_in_window;
    if (l.kind == Kind::fixed_window) {
      const std::int64_t used = l.window_s == l.window_of(l.clock_us()) ? l.used : 0;
      e["tokens"] = static_cast<double>(std::max<std::int64_t>(0, l.per_window() - used));
      e["per_window"] = l.per_window();
    } else {
      e["tokens"] = std::min(std::max(l.rate, 1.0), l.tokens + static_cast<double>(now - l.last_us) / 1e6 * l.rate);
    }
    out[suffix] = std::move(e);
  }
  return out;
}
std::map<std::string, PathStats> g_stats;  // single-threaded server: no lock
std::uint64_t g_total = 0;
int g_latency_ms = 0;
int g_connect_delay_ms = 0;
std::uint64_t g_connections = 0;  // accepted since start (or /__reset)
std::uint64_t g_open = 0;         // open now


std::string query_param(std::string_view target, std::string_view key) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    const auto eq = kv.find('=');
    if (kv.substr(0, eq) == key) return eq == std::string_view::npos ? "1" : std::string(kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return {};
}

int int_param(std::string_view target, std::string_view key, int def) {
  const std::string v = query_param(target, key);
  if (v.empty()) return def;
  try {
    return std::stoi(v);
  } catch (...) {
    return def;
  }
}

json airline_body(std::string_view path) {
  if (path.ends_with("/shopping/search"))
    return {{"flights", json::array({{{"flight", "TG101"}, {"from", "PEK"}, {"to", "SHA"}, {"fare", 880}},
                                     {{"flight", "TG205"}, {"from", "PEK"}, {"to", "SHA"}, {"fare", 1020}}})}};
  if (path.ends_with("/pricing")) return {{"fare", 880}, {"currency", "CNY"}, {"taxes", 50}};
  if (path.ends_with("/booking")) return {{"pnr", "TG7Q2X"}, {"status", "HK"}};
  return {{"ok", true}};
}

// The OAuth2 supplier: what /oauth2/token answers, the tokens it issued and what it has seen.
enum class TokenMode { ok, fail, slow, garbage, no_token };
constexpr std::pair<TokenMode, const char*> kTokenModes[] = {{TokenMode::ok, "ok"},
                                                             {TokenMode::fail, "fail"},
                                                             {TokenMode::slow, "slow"},
                                                             {TokenMode::garbage, "garbage"},
                                                             {TokenMode::no_token, "no_token"}};

struct AuthSettings {
  int expires_in = 1800;
  TokenMode mode = TokenMode::ok;
  int slow_ms = 1000;
  std::string client_id;      // "": any
  std::string client_secret;  // "": any
  bool require = false;
  std::string header_name;  // "": no field required
  std::string header_value;
  std::vector<std::string> unauthorized_callers;  // X-Real-IP values answered 401 whatever they send
};

struct AuthCounts {
  std::uint64_t requests = 0;
  std::uint64_t ok = 0;
  std::uint64_t failed = 0;
  std::uint64_t unauthorized = 0;
  std::map<std::string, std::uint64_t> outcomes;
  std::vector<std::int64_t> times_us;
  std::vector<std::string> styles;
  std::vector<json> scopes;      // a string, or null
  json last_authorization;       // null: none seen
  json last_header_value;
};

AuthSettings g_auth;
AuthCounts g_auth_counts;
std::map<std::string, std::int64_t> g_tokens;  // valid tokens, to when they expire (now_us)
std::uint64_t g_token_seq = 0;                 // never reset, so that every token differs

void drop_expired_tokens() {
  const std::int64_t now = now_us();
  std::erase_if(g_tokens, [&](const auto& t) { return t.second <= now; });
}

std::string random_hex() {
  static std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Form decoding: '+' is a space, %XX a byte; a '%' not followed by two hex digits stays as it is.
std::string form_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Form {
  std::map<std::string, std::string> fields;
  bool repeated = false;  // a field sent twice (RFC 6749 3.2 forbids it)
};

Form parse_form(std::string_view body) {
  Form f;
  while (!body.empty()) {
    const auto amp = body.find('&');
    const std::string_view kv = body.substr(0, amp);
    if (!kv.empty()) {
      const auto eq = kv.find('=');
      const std::string key = form_decode(kv.substr(0, eq));
      const std::string value = eq == std::string_view::npos ? std::string() : form_decode(kv.substr(eq + 1));
      if (!f.fields.emplace(key, value).second) f.repeated = true;
    }
    if (amp == std::string_view::npos) break;
    body = body.substr(amp + 1);
  }
  return f;
}

std::optional<std::string> base64_decode(std::string_view in) {
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  std::size_t i = 0;
  for (; i < in.size() && in[i] != '='; ++i) {
    const char c = in[i];
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else return std::nullopt;
    buf = ((buf << 6) | static_cast<unsigned>(v)) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xff);
    }
  }
  for (; i < in.size(); ++i)
    if (in[i] != '=') return std::nullopt;
  return out;
}

// The credentials of `field` if it is of `scheme` (named in any case, as RFC 7235 has it).
std::optional<std::string_view> credentials_of(std::string_view field, std::string_view scheme) {
  if (field.size() <= scheme.size() || field[scheme.size()] != ' ') return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(field[i])) != std::tolower(static_cast<unsigned char>(scheme[i])))
      return std::nullopt;
  field.remove_prefix(scheme.size());
  while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
  while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
  return field;
}

// Answers a request to /oauth2/token into `res`, counting it; returns the milliseconds to hold
// the answer ("slow").
int token_answer(const http::request<http::string_body>& req, http::response<http::string_body>& res) {
  AuthCounts& c = g_auth_counts;
  ++c.requests;
  c.times_us.push_back(now_us());
  res.set(http::field::cache_control, "no-store");
  res.set(http::field::pragma, "no-cache");
  const Form form = parse_form(req.body());

  std::string style = "none";
  std::optional<std::string> id, secret;
  bool undecodable = false;
  if (const auto basic = credentials_of(req[http::field::authorization], "Basic")) {
    style = "basic";
    const std::optional<std::string> pair = base64_decode(*basic);
    const auto colon = pair ? pair->find(':') : std::string::npos;
    if (colon == std::string::npos) {
      undecodable = true;
    } else {
      id = form_decode(std::string_view(*pair).substr(0, colon));
      secret = form_decode(std::string_view(*pair).substr(colon + 1));
    }
  } else if (form.fields.contains("client_id") || form.fields.contains("client_secret")) {
    style = "body";
    if (const auto it = form.fields.find("client_id"); it != form.fields.end()) id = it->second;
    if (const auto it = form.fields.find("client_secret"); it != form.fields.end()) secret = it->second;
  }
  c.styles.push_back(style);
  const auto scope = form.fields.find("scope");
  c.scopes.push_back(scope == form.fields.end() ? json(nullptr) : json(scope->second));

  const auto matches = [](const std::optional<std::string>& got, const std::string& want) {
    return want.empty() || (got && *got == want);
  };
  const auto grant = form.fields.find("grant_type");
  std::string outcome;
  const auto refuse = [&](http::status status, const char* error) {
    res.result(status);
    res.body() = json{{"error", error}}.dump();
    outcome = error;
  };
  if (req.method() != http::verb::post) {
    refuse(http::status::method_not_allowed, "invalid_request");
    res.set(http::field::allow, "POST");
    outcome = "method_not_allowed";
  } else if (form.repeated) {
    refuse(http::status::bad_request, "invalid_request");
  } else if (undecodable || !matches(id, g_auth.client_id) || !matches(secret, g_auth.client_secret)) {
    refuse(http::status::unauthorized, "invalid_client");
    res.set(http::field::www_authenticate, "Basic realm=\"tollgate-mock-upstream\"");
  } else if (grant == form.fields.end()) {
    refuse(http::status::bad_request, "invalid_request");
  } else if (grant->second != "client_credentials") {
    refuse(http::status::bad_request, "unsupported_grant_type");
  } else if (g_auth.mode == TokenMode::fail) {
    refuse(http::status::internal_server_error, "server_error");
  } else if (g_auth.mode == TokenMode::garbage) {
    res.body() = "<html>oops</html>";
    outcome = "garbage";
  } else if (g_auth.mode == TokenMode::no_token) {
    res.body() = json{{"token_type", "Bearer"}, {"expires_in", g_auth.expires_in}}.dump();
    outcome = "no_token";
  } else {
    const std::string token = "tok-" + std::to_string(++g_token_seq) + "-" + random_hex();
    // Valid for E seconds from when the answer leaves, a slow one included.
    const int held_ms = g_auth.mode == TokenMode::slow ? g_auth.slow_ms : 0;
    g_tokens[token] = now_us() + (static_cast<std::int64_t>(g_auth.expires_in) * 1000 + held_ms) * 1000;
    json body = {{"access_token", token}, {"token_type", "Bearer"}, {"expires_in", g_auth.expires_in}};
    if (scope != form.fields.end() && !scope->second.empty()) body["scope"] = scope->second;
    res.body() = body.dump();
    outcome = "ok";
  }
  if (outcome == "ok") ++c.ok;
  else ++c.failed;
  ++c.outcomes[outcome];
  return g_auth.mode == TokenMode::slow ? g_auth.slow_ms : 0;
}

// Why an API request is refused ("invalid_token" or "missing_api_key"), or null; notes its
// Authorization and its key field for GET /__auth.
const char* api_refusal(const http::request<http::string_body>& req) {
  AuthCounts& c = g_auth_counts;
  const auto field_or_null = [&](std::string_view name) {
    const auto it = req.find(name);
    return it == req.end() ? json(nullptr) : json(std::string(it->value()));
  };
  c.last_authorization = field_or_null("Authorization");
  c.last_header_value = field_or_null(g_auth.header_name.empty() ? "X-Api-Key" : g_auth.header_name);
  if (const auto ip = req.find("X-Real-IP"); ip != req.end() && std::find(g_auth.unauthorized_callers.begin(),
                                                                             g_auth.unauthorized_callers.end(),
                                                                             ip->value()) != g_auth.unauthorized_callers.end())
    return "invalid_token";  // one caller's own refusal (its account, its entitlement), whatever the token
  if (g_auth.require) {
    const auto token = credentials_of(req[http::field::authorization], "Bearer");
    drop_expired_tokens();
    if (!token || !g_tokens.contains(std::string(*token))) return "invalid_token";
  }
  if (!g_auth.header_name.empty()) {
    const auto it = req.find(g_auth.header_name);
    if (it == req.end() || it->value() != g_auth.header_value) return "missing_api_key";
  }
  return nullptr;
}

// A header field name: RFC 9110's token.
bool is_field_name(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("!#$%&'*+-.^_`|~", c)) return false;
  return true;
}

// Changes the settings `j` names; returns why it is wrong (and changes nothing), or "".
std::string set_auth(const json& j) {
  if (!j.is_object()) return "expected an object of settings";
  AuthSettings next = g_auth;
  const auto integer = [](const json& v, int min, int& out) {
    if (!v.is_number_integer()) return false;
    // A large unsigned one would wrap as a long long.
    const long long n = v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(INT_MAX)
                            ? LLONG_MAX
                            : v.get<long long>();
    if (n < min || n > INT_MAX) return false;
    out = static_cast<int>(n);
    return true;
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "expires_in") {
      if (!integer(v, 1, next.expires_in)) return "expires_in must be an integer >= 1";
    } else if (k == "slow_ms") {
      if (!integer(v, 0, next.slow_ms)) return "slow_ms must be an integer >= 0";
    } else if (k == "mode") {
      bool known = false;
      if (v.is_string())
        for (const auto& [m, n] : kTokenModes)
          if (v.get<std::string>() == n) {
            next.mode = m;
            known = true;
          }
      if (!known) return R"(mode must be "ok", "fail", "slow", "garbage" or "no_token")";
    } else if (k == "client_id" || k == "client_secret") {
      if (!v.is_string() && !v.is_null()) return k + " must be a string";
      (k == "client_id" ? next.client_id : next.client_secret) = v.is_null() ? "" : v.get<std::string>();
    } else if (k == "require") {
      if (!v.is_boolean()) return "require must be true or false";
      next.require = v.get<bool>();
    } else if (k == "unauthorized_callers") {
      const std::string why = "unauthorized_callers must be an array of addresses (non-empty strings)";
      if (!v.is_array()) return why;
      next.unauthorized_callers.clear();
      for (const json& a : v) {
        if (!a.is_string() || a.get<std::string>().empty()) return why;
        next.unauthorized_callers.push_back(a.get<std::string>());
      }
    } else if (k == "require_header") {
      const std::string why = R"(require_header must be {"name": field name, "value": string} or null)";
      if (v.is_null()) {
        next.header_name.clear();
        next.header_value.clear();
        continue;
      }
      if (!v.is_object() || v.size() != 2 || !v.contains("name") || !v.contains("value") || !v["name"].is_string() ||
          !is_field_name(v["name"].get<std::string>()) || !v["value"].is_string())
        return why;
      next.header_name = v["name"].get<std::string>();
      next.header_value = v["value"].get<std::string>();
    } else {
      return "unknown field " + k;
    }
  }
  g_auth = std::move(next);
  return {};
}

std::string set_auth_text(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return "not JSON";
  return set_auth(j);
}

json auth_json() {
  drop_expired_tokens();
  const AuthCounts& c = g_auth_counts;
  json outcomes = json::object();
  for (const auto& [o, n] : c.outcomes) outcomes[o] = n;
  return {{"expires_in", g_auth.expires_in},
          {"mode", name_of(g_auth.mode, kTokenModes)},
          {"slow_ms", g_auth.slow_ms},
          {"client_id", g_auth.client_id},
          {"client_secret", g_auth.client_secret},
          {"require", g_auth.require},
          {"unauthorized_callers", g_auth.unauthorized_callers},
          {"require_header", g_auth.header_name.empty()
                                 ? json(nullptr)
                                 : json{{"name", g_auth.header_name}, {"value", g_auth.header_value}}},
          {"token_requests", c.requests},
          {"token_ok", c.ok},
          {"token_failed", c.failed},
          {"token_outcomes", outcomes},
          {"tokens_valid", g_tokens.size()},
          {"unauthorized", c.unauthorized},
          {"token_times_us", c.times_us},
          {"token_styles", c.styles},
          {"token_scopes", c.scopes},
          {"last_authorization", c.last_authorization},
          {"last_header_value", c.last_header_value}};
}

// The stream a session reads and writes: plain TCP, or TLS over it.
template <class Stream>
Stream make_stream(tcp::socket sock, ssl::context* tls) {
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) return Stream(std::move(sock));
  else return Stream(std::move(sock), *tls);
}

// One connection: answers requests until the client closes it or asks to. `Stream` is the plain
// beast::tcp_stream or TLS over it, so both modes answer alike. The coroutine takes the socket and
// makes its stream inside: with the stream itself as the parameter, g++ 12 warns
// (-Wmismatched-new-delete, a false alarm on Asio's frame allocator) about the coroutine's start.
template <class Stream>
net::awaitable<void> session(tcp::socket sock, ssl::context* tls) {
  constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  Stream stream = make_stream<Stream>(std::move(sock), tls);
  beast::tcp_stream& tcp_layer = beast::get_lowest_layer(stream);
  ++g_connections;
  ++g_open;
  struct Closed {
    ~Closed() { --g_open; }
  } closed;
  if (g_connect_delay_ms > 0) {
    net::steady_timer t(co_await net::this_coro::executor, std::chrono::milliseconds(g_connect_delay_ms));
    beast::error_code ec;
    co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  if constexpr (kTls) {
    beast::error_code ec;
    // A client that connects and never says hello would otherwise hold its coroutine for good.
    tcp_layer.expires_after(std::chrono::seconds(10));
    co_await stream.async_handshake(ssl::stream_base::server, net::redirect_error(net::use_awaitable, ec));
    tcp_layer.expires_never();
    if (ec) co_return;  // closes the socket
  }
  beast::flat_buffer buffer;
  for (;;) {
    beast::error_code ec;
    http::request<http::string_body> req;
    co_await http::async_read(stream, buffer, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));

    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::server, "tollgate-mock-upstream");
    res.keep_alive(req.keep_alive());
    int token_delay_ms = 0;  // "slow" token answers
    if (path == "/__stats") {
      json paths = json::object();
      for (const auto& [p, s] : g_stats)
        paths[p] = {{"count", s.count},
                    {"throttled", s.throttled},
                    {"caller_refused", s.caller_refused},
                    {"accepted", s.accepted},
                    {"unauthorized", s.unauthorized},
                    {"arrivals_us", s.arrivals_us},
                    {"throttled_us", s.throttled_us},
                    {"caller_refused_us", s.caller_refused_us},
                    {"accepted_us", s.accepted_us},
                    {"unauthorized_us", s.unauthorized_us}};
      res.body() = json{{"total", g_total}, {"connections", g_connections}, {"open", g_open}, {"paths", paths}}.dump();
    } else if (path == "/__reset") {
      g_stats.clear();
      g_total = 0;
      g_connections = 0;
      g_auth_counts = {};  // the settings and the tokens stay
      for (auto& [suffix, l] : g_limits) l.clear_counts();  // the limits and their state stay
      res.body() = R"({"reset":true})";
    } else if (path == "/__limits") {
      if (req.method() == http::verb::put || req.method() == http::verb::post) {
        if (const std::string why = set_limits(req.body()); !why.empty()) {
          res.result(http::status::bad_request);
          res.body() = json{{"error", why}}.dump();
        } else {
          res.body() = limits_json().dump();
        }
      } else {
        res.body() = limits_json().dump();
      }
    } else if (path == "/__auth") {
      if (req.method() == http::verb::put || req.method() == http::verb::post) {
        if (const std::string why = set_auth_text(req.body()); !why.empty()) {
          res.result(http::status::bad_request);
          res.body() = json{{"error", why}}.dump();
        } else {
          res.body() = auth_json().dump();
        }
      } else {
        res.body() = auth_json().dump();
      }
    } else if (path == "/__auth/revoke") {
      if (req.method() == http::verb::post) {
        const std::size_t revoked = g_tokens.size();
        g_tokens.clear();
        res.body() = json{{"revoked", revoked}}.dump();
      } else {
        res.result(http::status::method_not_allowed);
        res.set(http::field::allow, "POST");
        res.body() = R"({"error":"POST /__auth/revoke"})";
      }
    } else if (path == "/oauth2/token") {
      token_delay_ms = token_answer(req, res);
    } else if (const char* refusal = path.starts_with("/__") ? nullptr : api_refusal(req)) {
      // Refused for its credentials: an arrival, never accepted, and nothing taken from a limit.
      auto& s = g_stats[path];
      ++s.count;
      ++s.unauthorized;
      ++g_total;
      ++g_auth_counts.unauthorized;
      s.arrivals_us.push_back(now_us());
      s.unauthorized_us.push_back(s.arrivals_us.back());
      res.result(http::status::unauthorized);
      if (std::strcmp(refusal, "invalid_token") == 0)
        res.set(http::field::www_authenticate, R"(Bearer error="invalid_token")");
      res.body() = json{{"error", refusal}}.dump();
    } else if (const Decision d = decide(path, req["X-Real-IP"]); d.what == Decision::caller) {
      // Refused for the caller's own quota: nothing says when to come back, since it is not the
      // supplier's capacity that ran out. Counted as throttled too, as every refusal is.
      auto& s = g_stats[path];
      ++s.count;
      ++s.throttled;
      ++s.caller_refused;
      ++g_total;
      s.arrivals_us.push_back(now_us());
      s.throttled_us.push_back(s.arrivals_us.back());
      s.caller_refused_us.push_back(s.arrivals_us.back());
      res.result(http::status::too_many_requests);
      res.body() = R"({"error":"caller_quota_exceeded"})";
    } else if (d.what == Decision::limited) {
      // Throttled: counted as an arrival and as throttled, answered at once.
      const Limit& l = *d.limit;
      auto& s = g_stats[path];
      ++s.count;
      ++s.throttled;
      ++g_total;
      s.arrivals_us.push_back(now_us());
      s.throttled_us.push_back(s.arrivals_us.back());
      const long long t = l.retry_after_s > 0 ? l.retry_after_s : (d.wait_us + 999'999) / 1'000'000;
      res.result(static_cast<http::status>(l.status));
      for (auto& [name, value] : advertised_fields(l)) res.set(name, value);
      json body = {{"error", "supplier_rate_limited"}};
      if (l.signal == Signal::full || l.signal == Signal::retry_after) {
        res.set(http::field::retry_after, std::to_string(t));
        body["retry_after_s"] = t;  // only beside the field: a bare refusal says nothing anywhere
      }
      if (l.signal == Signal::full || l.signal == Signal::ratelimit) {
        // The policy it advertises (the same name, the window's length), exhausted.
        res.set("RateLimit-Policy", policy_field(l, left_of(l)));
        // A precise supplier is precise on its refusals too (Retry-After has whole seconds only).
        char precise[32];
        std::snprintf(precise, sizeof precise, "%.3f", static_cast<double>(d.wait_us) / 1e6);
        const bool ms = l.advertise == Advertise::ietf_ms && l.retry_after_s == 0;
        res.set("RateLimit", std::string("\"") + l.policy_name() + "\";r=0;t=" + (ms ? precise : std::to_string(t)));
      }
      res.body() = body.dump();
    } else {
      // The status is known before any delay, so the answer is counted with its arrival (and
      // a /__reset during the delay leaves nothing dangling).
      const int status = int_param(target, "status", 200);
      auto& s = g_stats[path];
      ++s.count;
      ++g_total;
      s.arrivals_us.push_back(now_us());
      if (status >= 200 && status < 300) {
        ++s.accepted;
        s.accepted_us.push_back(s.arrivals_us.back());
      }
      // What is left as of its arrival (a PUT /__limits during a delay replaces the limit).
      const auto advertised = d.limit ? advertised_fields(*d.limit) : std::vector<std::pair<std::string, std::string>>{};
      const int delay = int_param(target, "delay_ms", g_latency_ms);
      if (delay > 0) {
        net::steady_timer t(stream.get_executor(), std::chrono::milliseconds(delay));
        co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
      res.result(static_cast<http::status>(status));
      for (const auto& [name, value] : advertised) res.set(name, value);
      json body = airline_body(path);
      if (!query_param(target, "echo").empty()) {
        json headers = json::object();
        json fields = json::array();
        for (const auto& f : req) {
          headers[std::string(f.name_string())] = std::string(f.value());
          fields.push_back({std::string(f.name_string()), std::string(f.value())});
        }
        body = {{"method", std::string(req.method_string())}, {"target", target}, {"headers", headers},
                {"fields", fields}, {"body", req.body()}};
      }
      std::string text = body.dump();
      if (const int size = int_param(target, "size", 0); size > static_cast<int>(text.size()))
        text = json{{"data", body}, {"pad", std::string(size - text.size(), 'x')}}.dump();
      res.body() = std::move(text);
    }
    if (token_delay_ms > 0) {
      net::steady_timer t(stream.get_executor(), std::chrono::milliseconds(token_delay_ms));
      co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    if (const std::string id = query_param(target, "reply_request_id"); !id.empty()) {
      res.insert("X-Request-Id", id);
      if (!query_param(target, "reply_twice").empty()) res.insert("X-Request-Id", id + "-2");
    }
    res.prepare_payload();
    if (!query_param(target, "chunked").empty()) {
      res.erase(http::field::content_length);
      res.chunked(true);
    }
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  if constexpr (kTls) {
    // close_notify, so that a client tells a finished answer from a cut connection; bounded,
    // since a client that already went away never answers it.
    beast::error_code ec;
    tcp_layer.expires_after(std::chrono::seconds(2));
    co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ec));
  }
  beast::error_code ignored;
  tcp_layer.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// tls: null for plain HTTP.
net::awaitable<void> listen(tcp::acceptor& acc, ssl::context* tls) {
  for (;;) {
    beast::error_code ec;
    tcp::socket sock = co_await acc.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) continue;
    sock.set_option(tcp::no_delay(true), ec);
    if (tls)
      net::co_spawn(acc.get_executor(), session<ssl::stream<beast::tcp_stream>>(std::move(sock), tls), net::detached);
    else
      net::co_spawn(acc.get_executor(), session<beast::tcp_stream>(std::move(sock), nullptr), net::detached);
  }
}

// A server context for --tls-cert/--tls-key (and --tls-client-ca); throws on unreadable files.
std::unique_ptr<ssl::context> make_tls(const std::string& cert, const std::string& key, const std::string& client_ca) {
  auto tls = std::make_unique<ssl::context>(ssl::context::tls_server);
  tls->set_options(ssl::context::default_workarounds);
  SSL_CTX_set_min_proto_version(tls->native_handle(), TLS1_2_VERSION);
  // Asio's own message ("asio.ssl error") names neither the flag nor the file.
  auto load = [](const char* flag, const std::string& file, auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(flag) + " " + file + ": cannot load (" + e.what() + ")");
    }
  };
  load("--tls-cert", cert, [&] { tls->use_certificate_chain_file(cert); });
  load("--tls-key", key, [&] { tls->use_private_key_file(key, ssl::context::pem); });
  // OpenSSL refuses to resume a session whose id context is unset once peers are verified; set
  // it in both modes so that resumption behaves the same with and without client certificates.
  static const unsigned char kSessionContext[] = "tollgate-mock-upstream";
  SSL_CTX_set_session_id_context(tls->native_handle(), kSessionContext, sizeof kSessionContext - 1);
  if (!client_ca.empty()) {
    load("--tls-client-ca", client_ca, [&] { tls->load_verify_file(client_ca); });
    // Names the accepted CAs in the CertificateRequest, so that a client holding several
    // certificates can pick the right one.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca.c_str()))
      SSL_CTX_set_client_CA_list(tls->native_handle(), names);
    tls->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return tls;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int port = 9000;
  std::string tls_cert, tls_key, tls_client_ca;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (a == "--tls-cert" && i + 1 < argc) tls_cert = argv[++i];
    else if (a == "--tls-key" && i + 1 < argc) tls_key = argv[++i];
    else if (a == "--tls-client-ca" && i + 1 < argc) tls_client_ca = argv[++i];
    else if (a == "--host" && i + 1 < argc) host = argv[++i];
    else if (a == "--latency-ms" && i + 1 < argc) g_latency_ms = std::atoi(argv[++i]);
    else if (a == "--connect-delay-ms" && i + 1 < argc) g_connect_delay_ms = std::atoi(argv[++i]);
    else if (a == "--limit" && i + 1 < argc) {
      const std::string spec = argv[++i];
      const auto eq = spec.find('=');
      std::string why = "expected SUFFIX=RATE or SUFFIX={JSON}";
      if (eq != std::string::npos) {
        json merged = limits_json();  // earlier --limit flags stay
        const std::string value = spec.substr(eq + 1);
        char* end = nullptr;
        const double rate = std::strtod(value.c_str(), &end);
        if (value.starts_with('{')) {
          // The object form, as PUT /__limits takes it; set_limits says what is wrong with it.
          merged[spec.substr(0, eq)] = json::parse(value, nullptr, false);
          why = merged[spec.substr(0, eq)].is_discarded() ? "the object is not JSON" : set_limits(merged.dump());
        } else if (end == value.c_str() || *end != '\0') {
          why = "RATE must be a number";
        } else {
          merged[spec.substr(0, eq)] = rate;
          why = set_limits(merged.dump());
        }
      }
      if (!why.empty()) {
        std::cerr << "mock-upstream: --limit " << spec << ": " << why << "\n";
        return 2;
      }
    } else if (a == "--auth" && i + 1 < argc) {
      const std::string spec = argv[++i];
      if (const std::string why = set_auth_text(spec); !why.empty()) {
        std::cerr << "mock-upstream: --auth " << spec << ": " << why << "\n";
        return 2;
      }
    } else {
      std::cerr << "usage: tollgate-mock-upstream [--host H] [--port P] [--latency-ms N] [--limit SUFFIX=RATE|SUFFIX={JSON} ...]\n"
                   "                              [--auth JSON]\n"
                   "                              [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n";
      return 2;
    }
  }
  if (tls_cert.empty() != tls_key.empty() || (!tls_client_ca.empty() && tls_cert.empty())) {
    std::cerr << "mock-upstream: --tls-cert and --tls-key go together, and --tls-client-ca needs them\n";
    return 2;
  }
  try {
    std::unique_ptr<ssl::context> tls;
    if (!tls_cert.empty()) tls = make_tls(tls_cert, tls_key, tls_client_ca);
    net::io_context ctx(1);
    tcp::acceptor acc(ctx);
    tcp::endpoint ep(net::ip::make_address(host), static_cast<unsigned short>(port));
    acc.open(ep.protocol());
    acc.set_option(net::socket_base::reuse_address(true));
    acc.bind(ep);
    acc.listen(net::socket_base::max_listen_connections);
    std::cout << "mock-upstream: listening on " << host << ":" << acc.local_endpoint().port()
              << (tls ? " (https)" : "") << std::endl;
    net::signal_set signals(ctx, SIGINT, SIGTERM);
    signals.async_wait([&](auto, int) { ctx.stop(); });
    net::co_spawn(ctx, listen(acc, tls.get()), net::detached);
    ctx.run();
  } catch (const std::exception& e) {
    std::cerr << "mock-upstream: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

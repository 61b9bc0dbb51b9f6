#include "tollgate/proxy/upstream_signal.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <tuple>

#include "tollgate/proxy/rate_headers.hpp"

namespace tollgate::proxy {

namespace {

constexpr std::int64_t kMaxPauseS = kMaxPauseUs / 1'000'000;
constexpr double kSfIntegerMax = 999'999'999'999'999.0;  // RFC 8941: at most 15 digits

constexpr std::array<std::string_view, 7> kDays = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::array<std::string_view, 7> kLongDays = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                                        "Thursday", "Friday", "Saturday"};
constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

template <std::size_t N>
int index_of(const std::array<std::string_view, N>& names, std::string_view s) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<int>(i);
  return -1;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Exactly s.size() digits (no sign, unlike from_chars), or -1.
int digits(std::string_view s) {
  if (s.empty()) return -1;
  int n = 0;
  for (char c : s) {
    if (!is_digit(c)) return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's algorithms).
std::int64_t days_from_civil(std::int64_t y, int m, int d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146'097 + doe - 719'468;
}

void civil_from_days(std::int64_t z, std::int64_t& y, int& m, int& d) {
  z += 719'468;
  const std::int64_t era = (z >= 0 ? z : z - 146'096) / 146'097;
  const std::int64_t doe = z - era * 146'097;
  const std::int64_t yoe = (doe - doe / 1'460 + doe / 36'524 - doe / 146'096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  y = yoe + era * 400 + (m <= 2);
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

int days_in_month(std::int64_t y, int m) {
  static constexpr std::array<int, 12> kLen = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kLen[static_cast<std::size_t>(m - 1)];
}

struct DateFields {
  std::int64_t year = 0;
  int month = 0;  // 1-12
  int day = 0, hour = 0, minute = 0, second = 0;
  int weekday = 0;  // 0 = Sunday
};

// "HH:MM:SS"; second 60 is a leap second (RFC 9110 allows it; it reads as the next minute's 00).
bool read_time(std::string_view s, DateFields& f) {
  if (s.size() != 8 || s[2] != ':' || s[5] != ':') return false;
  f.hour = digits(s.substr(0, 2));
  f.minute = digits(s.substr(3, 2));
  f.second = digits(s.substr(6, 2));
  return f.hour >= 0 && f.hour <= 23 && f.minute >= 0 && f.minute <= 59 && f.second >= 0 && f.second <= 60;
}

std::optional<std::int64_t> to_epoch(const DateFields& f) {
  if (f.year < 0 || f.month < 1 || f.month > 12 || f.day < 1 || f.day > days_in_month(f.year, f.month))
    return std::nullopt;
  const std::int64_t days = days_from_civil(f.year, f.month, f.day);
  if (((days % 7) + 7 + 4) % 7 != f.weekday) return std::nullopt;  // 1970-01-01 was a Thursday
  return days * 86'400 + f.hour * 3'600 + f.minute * 60 + f.second;
}

// "Sun, 06 Nov 1994 08:49:37 GMT"
std::optional<std::int64_t> imf_fixdate(std::string_view s) {
  if (s.size() != 29 || s.substr(3, 2) != ", " || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
      s.substr(25) != " GMT")
    return std::nullopt;
  DateFields f;
  f.weekday = index_of(kDays, s.substr(0, 3));
  f.day = digits(s.substr(5, 2));
  f.month = index_of(kMonths, s.substr(8, 3)) + 1;
  f.year = digits(s.substr(12, 4));
  if (f.weekday < 0 || !read_time(s.substr(17, 8), f)) return std::nullopt;
  return to_epoch(f);
}

// "Sun Nov  6 08:49:37 1994" (the day is "06" or " 6")
std::optional<std::int64_t> asctime_date(std::string_view s) {
  if (s.size() != 24 || s[3] != ' ' || s[7] != ' ' || s[10] != ' ' || s[19] != ' ') return std::nullopt;
  DateFields f;
  f.weekday = index_of(kDays, s.substr(0, 3));
  f.month = index_of(kMonths, s.substr(4, 3)) + 1;
  f.day = s[8] == ' ' ? digits(s.substr(9, 1)) : digits(s.substr(8, 2));
  f.year = digits(s.substr(20, 4));
  if (f.weekday < 0 || !read_time(s.substr(11, 8), f)) return std::nullopt;
  return to_epoch(f);
}

// "Sunday, 06-Nov-94 08:49:37 GMT"
std::optional<std::int64_t> rfc850_date(std::string_view s, std::int64_t now_s) {
  const auto comma = s.find(',');
  if (comma == std::string_view::npos) return std::nullopt;
  DateFields f;
  f.weekday = index_of(kLongDays, s.substr(0, comma));
  const std::string_view r = s.substr(comma);
  if (f.weekday < 0 || r.size() != 24 || r.substr(0, 2) != ", " || r[4] != '-' || r[8] != '-' || r[11] != ' ' ||
      r.substr(20) != " GMT")
    return std::nullopt;
  f.day = digits(r.substr(2, 2));
  f.month = index_of(kMonths, r.substr(5, 3)) + 1;
  const int yy = digits(r.substr(9, 2));
  if (yy < 0 || !read_time(r.substr(12, 8), f)) return std::nullopt;
  // RFC 9110: a date that appears to be more than 50 years in the future is in the past century.
  // Of the years ending in yy, the latest not past that point; compared field by field (not by
  // timestamp) so that a 29 February picks its century before it is checked.
  std::int64_t now_y = 0;
  int now_m = 0, now_d = 0;
  civil_from_days(floor_div(now_s, 86'400), now_y, now_m, now_d);
  const std::int64_t sod = now_s - floor_div(now_s, 86'400) * 86'400;
  const auto limit = std::make_tuple(now_y + 50, now_m, now_d, sod);
  f.year = floor_div(now_y, 100) * 100 + yy + 100;
  while (std::make_tuple(f.year, f.month, f.day, std::int64_t{f.hour * 3'600 + f.minute * 60 + f.second}) > limit)
    f.year -= 100;
  return to_epoch(f);
}

// RFC 8941 parsing, just what RateLimit needs: items with parameters, any bare item as a value.
struct Cursor {
  std::string_view s;
  std::size_t i = 0;
  bool done() const { return i >= s.size(); }
  char peek() const { return done() ? '\0' : s[i]; }
  void skip_ows() {
    while (!done() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
};

bool is_lcalpha(char c) { return c >= 'a' && c <= 'z'; }
bool is_alpha(char c) { return is_lcalpha(c) || (c >= 'A' && c <= 'Z'); }
bool is_tchar(char c) {
  return is_alpha(c) || is_digit(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool parse_sf_string(Cursor& c, std::string& out) {
  ++c.i;  // the opening quote
  while (!c.done()) {
    const char ch = c.s[c.i++];
    if (ch == '"') return true;
    if (ch == '\\') {
      if (c.done() || (c.peek() != '"' && c.peek() != '\\')) return false;
      out.push_back(c.s[c.i++]);
    } else if (ch < 0x20 || ch > 0x7e) {
      return false;
    } else {
      out.push_back(ch);
    }
  }
  return false;  // unterminated
}

bool parse_token(Cursor& c, std::string& out) {
  if (!is_alpha(c.peek()) && c.peek() != '*') return false;
  while (!c.done() && (is_tchar(c.peek()) || c.peek() == ':' || c.peek() == '/')) out.push_back(c.s[c.i++]);
  return true;
}

// An sf-integer or sf-decimal, leniently: up to 15 integer and 9 fraction digits.
bool parse_number(Cursor& c, double& out) {
  const bool negative = c.peek() == '-';
  if (negative) ++c.i;
  std::int64_t whole = 0;
  int n = 0;
  while (is_digit(c.peek())) {
    if (++n > 15) return false;
    whole = whole * 10 + (c.s[c.i++] - '0');
  }
  if (n == 0) return false;
  // The fraction as an integer over a power of ten: one rounding, so "0.75" is 0.75 exactly.
  std::int64_t frac = 0, scale = 1;
  if (c.peek() == '.') {
    ++c.i;
    int f = 0;
    while (is_digit(c.peek())) {
      if (++f > 9) return false;
      frac = frac * 10 + (c.s[c.i++] - '0');
      scale *= 10;
    }
    if (f == 0) return false;
  }
  out = (static_cast<double>(whole) + static_cast<double>(frac) / static_cast<double>(scale)) * (negative ? -1 : 1);
  return true;
}

enum class Bare { number, other };

// Any bare item (integer, decimal, string, token, byte sequence, boolean); numbers are kept, and
// strings and tokens in `text`.
bool parse_bare_item(Cursor& c, Bare& kind, double& number, std::string& text) {
  kind = Bare::other;
  const char ch = c.peek();
  if (ch == '-' || is_digit(ch)) {
    kind = Bare::number;
    return parse_number(c, number);
  }
  if (ch == '"') return parse_sf_string(c, text);
  if (ch == '?') {
    ++c.i;
    if (c.peek() != '0' && c.peek() != '1') return false;
    ++c.i;
    return true;
  }
  if (ch == ':') {
    ++c.i;
    while (!c.done() && c.peek() != ':') {
      const char b = c.s[c.i++];
      if (!is_alpha(b) && !is_digit(b) && b != '+' && b != '/' && b != '=') return false;
    }
    if (c.done()) return false;
    ++c.i;
    return true;
  }
  return parse_token(c, text);
}

// Which field a list comes from, so which parameters are read: RateLimit's r and t, or
// RateLimit-Policy's q, w and qu.
enum class ListKind { ratelimit, policy };

// One member: a name and its parameters; a read number (r, t, q, w) that is not a non-negative
// number makes it malformed, and so does a qu that is not a string or a token.
bool parse_item(Cursor& c, RateLimitItem& item, ListKind list) {
  if (c.peek() == '"') {
    if (!parse_sf_string(c, item.name)) return false;
  } else if (!parse_token(c, item.name)) {
    return false;
  }
  while (c.peek() == ';') {
    ++c.i;
    while (c.peek() == ' ') ++c.i;
    std::string key;
    if (!is_lcalpha(c.peek()) && c.peek() != '*') return false;
    while (!c.done() && (is_lcalpha(c.peek()) || is_digit(c.peek()) || c.peek() == '_' || c.peek() == '-' ||
                         c.peek() == '.' || c.peek() == '*'))
      key.push_back(c.s[c.i++]);
    Bare kind = Bare::other;  // a key without a value is boolean true
    double number = 0;
    std::string text;
    if (c.peek() == '=') {
      ++c.i;
      if (!parse_bare_item(c, kind, number, text)) return false;
    }
    // A repeated key: the last counts (RFC 8941).
    std::optional<double>* slot = nullptr;
    if (list == ListKind::ratelimit && (key == "r" || key == "t")) slot = key == "r" ? &item.r : &item.t;
    if (list == ListKind::policy && (key == "q" || key == "w")) slot = key == "q" ? &item.q : &item.w;
    if (slot) {
      if (kind != Bare::number || number < 0) return false;
      *slot = number;
    } else if (list == ListKind::policy && key == "qu") {
      if (text.empty()) return false;
      item.qu = std::move(text);
    }
  }
  return true;
}

// Past the member that starts at `from` (up to its comma, or the end): commas in strings do not
// count. A string starts only where one may (the member's start, after '='); a stray quote elsewhere
// is junk and must not swallow the members after it.
void skip_member(Cursor& c, std::size_t from) {
  bool quoted = false;
  for (c.i = from; !c.done(); ++c.i) {
    const char ch = c.s[c.i];
    if (quoted) {
      if (ch == '\\')
        ++c.i;
      else if (ch == '"')
        quoted = false;
    } else if (ch == '"' && (c.i == from || c.s[c.i - 1] == '=')) {
      quoted = true;
    } else if (ch == ',') {
      return;
    }
  }
}

// The items of an RFC 8941 list; a malformed member is skipped (and counted), the others kept.
std::vector<RateLimitItem> parse_list(std::string_view value, ListKind list, int* skipped) {
  std::vector<RateLimitItem> items;
  Cursor c{value};
  c.skip_ows();
  while (!c.done()) {
    const std::size_t from = c.i;
    RateLimitItem item;
    bool ok = parse_item(c, item, list);
    if (ok) {
      c.skip_ows();
      ok = c.done() || c.peek() == ',';
    }
    if (ok) {
      items.push_back(std::move(item));
    } else {
      skip_member(c, from);
      if (skipped) ++*skipped;
    }
    if (!c.done()) ++c.i;  // the comma
    c.skip_ows();
  }
  return items;
}

std::int64_t seconds_to_us(double s) {
  if (!(s > 0)) return 0;
  if (s >= static_cast<double>(kMaxPauseS)) return kMaxPauseUs;
  return static_cast<std::int64_t>(std::ceil(s * 1e6));
}

std::string sf_integer(double v) {
  return std::to_string(static_cast<long long>(std::clamp(v, 0.0, kSfIntegerMax)));
}

}  // namespace

std::optional<std::int64_t> parse_http_date(std::string_view s, std::int64_t now_s) {
  if (s.size() == 29) return imf_fixdate(s);
  if (s.size() == 24 && s[3] == ' ') return asctime_date(s);
  return rfc850_date(s, now_s);
}

std::optional<std::int64_t> parse_http_date(std::string_view s) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return parse_http_date(s, std::chrono::duration_cast<std::chrono::seconds>(now).count());
}

std::optional<std::int64_t> retry_after_us(std::string_view value, std::optional<std::string_view> date) {
  value = trim_ows(value);
  if (value.empty()) return std::nullopt;
  if (std::all_of(value.begin(), value.end(), is_digit)) {
    std::int64_t s = 0;
    for (char c : value) s = std::min(s * 10 + (c - '0'), kMaxPauseS + 1);  // saturates, never overflows
    return std::min(s, kMaxPauseS) * 1'000'000;
  }
  // An HTTP-date: only the upstream's own clock tells how far off it is.
  if (!date) return std::nullopt;
  const auto now = parse_http_date(trim_ows(*date));
  if (!now) return std::nullopt;
  const auto at = parse_http_date(value, *now);  // a two-digit year is read against the Date too
  if (!at) return std::nullopt;
  return std::clamp<std::int64_t>(*at - *now, 0, kMaxPauseS) * 1'000'000;
}

std::vector<RateLimitItem> parse_ratelimit(std::string_view value, int* skipped) {
  return parse_list(value, ListKind::ratelimit, skipped);
}

std::vector<RateLimitItem> parse_ratelimit_policy(std::string_view value, int* skipped) {
  return parse_list(value, ListKind::policy, skipped);
}

ThrottleSignal classify_response(int status, std::optional<std::string_view> retry_after,
                                 std::optional<std::string_view> date, std::string_view ratelimit) {
  // r < 1 rather than r == 0: a fraction of a unit left admits no request either (and
  // restrict_ratelimit writes it as r=0).
  bool exhausted = false;
  double reset_s = 0;
  for (const RateLimitItem& item : parse_ratelimit(ratelimit)) {
    if (!item.r || *item.r >= 1) continue;
    exhausted = true;
    if (item.t) reset_s = std::max(reset_s, *item.t);
  }
  const bool has_retry_after = retry_after && !trim_ows(*retry_after).empty();
  ThrottleSignal sig;
  if (status == 429)
    sig.cause = "429";
  else if (status == 503 && (has_retry_after || !trim_ows(ratelimit).empty()))
    sig.cause = "503";
  else if (exhausted)
    sig.cause = "ratelimit_r0";
  else
    return sig;  // a plain 503 is an outage, not a throttle
  sig.throttled = true;
  if (retry_after)
    if (const auto us = retry_after_us(*retry_after, date)) sig.pause_us = *us;
  if (exhausted) sig.pause_us = std::max(sig.pause_us, seconds_to_us(reset_s));
  sig.pause_us = std::min(sig.pause_us, kMaxPauseUs);
  return sig;
}

std::string restrict_ratelimit(std::string_view ours, std::string_view upstream) {
  std::string out(trim_ows(ours));
  if (trim_ows(upstream).empty()) return out;
  std::optional<double> our_r, our_t;  // our smallest r, our largest t
  for (const RateLimitItem& item : parse_ratelimit(ours)) {
    if (item.r) our_r = our_r ? std::min(*our_r, *item.r) : *item.r;
    if (item.t) our_t = our_t ? std::max(*our_t, *item.t) : *item.t;
  }
  for (const RateLimitItem& item : parse_ratelimit(upstream)) {
    std::optional<double> r = item.r, t = item.t;
    if (our_r) r = r ? std::min(*r, *our_r) : *our_r;
    if (our_t) t = t ? std::max(*t, *our_t) : *our_t;
    if (!out.empty()) out += ", ";
    append_sf_string(out, item.name);
    if (r) out += ";r=" + sf_integer(std::floor(*r));
    if (t) out += ";t=" + sf_integer(std::ceil(*t));
  }
  return out;
}

}  // namespace tollgate::proxy

// What an upstream advertises it has left: read_advert and its helpers.
namespace tollgate::proxy {

namespace {

using RateFields = config::RateFieldsConfig;

constexpr double kMaxCount = 1e12;  // a remaining or a limit above this is absurd, not a quota

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

// The values of the fields called `name` (any case), joined with ", " as a list field's lines
// are; nullopt when there is none.
std::optional<std::string> joined(const std::vector<HeaderView>& fields, std::string_view name) {
  std::optional<std::string> out;
  for (const HeaderView& f : fields) {
    if (!iequals(f.name, name)) continue;
    if (out)
      out->append(", ");
    else
      out.emplace();
    out->append(trim_ows(f.value));
  }
  return out;
}

// A field of one value: absent (none), its value (ok), or lines that disagree (malformed).
AdvertRead single(const std::vector<HeaderView>& fields, std::string_view name, std::string_view& value) {
  AdvertRead got = AdvertRead::none;
  for (const HeaderView& f : fields) {
    if (name.empty() || !iequals(f.name, name)) continue;
    const std::string_view v = trim_ows(f.value);
    if (got == AdvertRead::ok && v != value) return AdvertRead::malformed;
    value = v;
    got = AdvertRead::ok;
  }
  return got;
}

// A count or a time as these fields write it: a non-negative integer or decimal (up to 15 integer
// and 9 fraction digits, as in RateLimit), nothing around it.
std::optional<double> plain_number(std::string_view v) {
  Cursor c{v};
  double n = 0;
  if (c.peek() == '-' || !parse_number(c, n) || !c.done()) return std::nullopt;
  return n;
}

// Seconds from the answer to the reset a value names, in `unit`. A point in time is read against
// `ref_s` (the answer's Date, else the gateway's clock) and one already past is 0. nullopt when
// malformed, or more than a day away (absurd: never a pause of a day on a supplier's word).
std::optional<double> reset_seconds(std::string_view v, RateFields::ResetUnit unit, std::int64_t ref_s) {
  using Unit = RateFields::ResetUnit;
  double s = 0;
  const auto n = plain_number(v);
  if (unit == Unit::http_date || (unit == Unit::automatic && !n)) {
    const auto at = parse_http_date(v, ref_s);
    if (!at) return std::nullopt;
    s = static_cast<double>(*at - ref_s);
  } else {
    if (!n) return std::nullopt;
    if (unit == Unit::automatic) unit = *n > 1e12 ? Unit::unix_ms : *n > 1e9 ? Unit::unix : Unit::seconds;
    const double ref = static_cast<double>(ref_s);
    s = unit == Unit::seconds ? *n : unit == Unit::unix ? *n - ref : *n / 1000 - ref;
  }
  if (s > static_cast<double>(kMaxPauseS)) return std::nullopt;
  return std::max(s, 0.0);
}

// The reset field, when named and sent: a value that cannot be read is left out and counted (the
// reset is then not said).
void read_reset(const std::vector<HeaderView>& fields, std::string_view name, RateFields::ResetUnit unit,
                std::int64_t ref_s, Advert& a) {
  std::string_view v;
  const AdvertRead got = single(fields, name, v);
  if (got == AdvertRead::none) return;
  const auto s = got == AdvertRead::ok ? reset_seconds(v, unit, ref_s) : std::nullopt;
  if (s)
    a.reset_us = seconds_to_us(*s);
  else
    ++a.ignored;
}

// A limit field: the limit, and in the early drafts' form quota policies after it
// ("100, 100;w=60"): the w of the first one whose quota is the limit is the window.
bool read_limit(std::string_view v, Advert& a) {
  const std::size_t comma = v.find(',');
  const auto limit = plain_number(trim_ows(v.substr(0, comma)));
  if (!limit || *limit > kMaxCount) return false;
  a.limit = *limit;
  for (std::size_t at = comma; at != std::string_view::npos;) {
    const std::size_t next = v.find(',', at + 1);
    const std::string_view member = trim_ows(v.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    at = next;
    const std::size_t w = member.find(";w=");
    if (w == std::string_view::npos || plain_number(member.substr(0, member.find(';'))) != limit) continue;
    const std::string_view ws = member.substr(w + 3);
    const auto window = plain_number(ws.substr(0, ws.find(';')));
    if (window && *window > 0 && *window <= static_cast<double>(kMaxPauseS)) a.window_us = seconds_to_us(*window);
    break;
  }
  return true;
}

struct FieldNames {
  std::string_view limit, remaining, reset;
};

// RateLimit-Limit/-Remaining/-Reset, X-RateLimit-*, or the custom names: the remaining is what
// counts; a limit or a reset that cannot be read is left out and counted.
AdvertRead read_named(const std::vector<HeaderView>& fields, const FieldNames& names, RateFields::ResetUnit unit,
                      std::int64_t ref_s, Advert& a) {
  std::string_view v;
  const AdvertRead got = single(fields, names.remaining, v);
  const auto remaining = got == AdvertRead::ok ? plain_number(v) : std::nullopt;
  if (got == AdvertRead::none) return got;
  if (!remaining || *remaining > kMaxCount) {
    ++a.ignored;
    return AdvertRead::malformed;
  }
  a.remaining = *remaining;
  const AdvertRead has_limit = single(fields, names.limit, v);
  if (has_limit != AdvertRead::none && (has_limit != AdvertRead::ok || !read_limit(v, a))) {
    ++a.ignored;
    a.limit = 0;
  }
  if (a.limit > 0 && a.remaining > a.limit) {  // contradictory: neither is believed
    ++a.ignored;
    return AdvertRead::malformed;
  }
  read_reset(fields, names.reset, unit, ref_s, a);
  return AdvertRead::ok;
}

// The RateLimit-Policy item of a policy, when usable: a quota in requests (no qu, or
// "requests"), q at most kMaxCount, w at most a day. `counts` is false for a quota in another
// unit (bytes, concurrent requests): not ours to follow, and not malformed either.
const RateLimitItem* policy_of(const std::vector<RateLimitItem>& policies, std::string_view name, bool& counts,
                               int& ignored) {
  counts = true;
  for (const RateLimitItem& p : policies) {
    if (p.name != name) continue;
    if (!p.qu.empty() && p.qu != "requests") {
      counts = false;
      return nullptr;
    }
    if (!p.q || *p.q > kMaxCount || (p.w && *p.w > static_cast<double>(kMaxPauseS))) {
      ++ignored;
      return nullptr;
    }
    return &p;
  }
  return nullptr;
}

// How fast an item lets requests go until its reset: r/t. Nothing left is 0 whenever the reset
// is; a reset now or not said (and no window to stand for it) bounds nothing.
double pace(double r, double t) {
  if (r <= 0) return 0;
  if (t <= 0) return std::numeric_limits<double>::infinity();
  return r / t;
}

struct Candidate {
  const RateLimitItem* item = nullptr;
  const RateLimitItem* policy = nullptr;
  double t = 0;  // its t, or its policy's w when it has none
};

// The more restrictive of two: the slower pace, then the fewer left, then the later reset.
bool more_restrictive(const Candidate& a, const Candidate& b) {
  const double pa = pace(*a.item->r, a.t), pb = pace(*b.item->r, b.t);
  if (pa != pb) return pa < pb;
  if (*a.item->r != *b.item->r) return *a.item->r < *b.item->r;
  return a.t > b.t;
}

// The IETF RateLimit field, each item's q and w from the RateLimit-Policy item of its name: the
// item of `cfg.policy`, else the most restrictive. An item is usable with an r, at most
// kMaxCount and not above its q, and a t of at most a day.
AdvertRead read_ietf(const RateFields& cfg, const std::vector<HeaderView>& fields, Advert& a) {
  const auto value = joined(fields, "RateLimit");
  if (!value || value->empty()) return AdvertRead::none;
  const int ignored_before = a.ignored;
  int skipped = 0;
  const std::vector<RateLimitItem> items = parse_ratelimit(*value, &skipped);
  std::vector<RateLimitItem> policies;
  if (const auto p = joined(fields, "RateLimit-Policy")) policies = parse_ratelimit_policy(*p, &skipped);
  a.ignored += skipped;
  Candidate best;
  bool named = cfg.policy.empty();  // the policy to follow is among the items
  for (const RateLimitItem& item : items) {
    if (!cfg.policy.empty() && item.name != cfg.policy) continue;
    named = true;
    bool counts = true;
    Candidate c{&item, policy_of(policies, item.name, counts, a.ignored), 0};
    if (!counts) continue;
    if (!item.r || *item.r > kMaxCount || (c.policy && *item.r > *c.policy->q) ||
        (item.t && *item.t > static_cast<double>(kMaxPauseS))) {
      ++a.ignored;
      continue;
    }
    c.t = item.t ? *item.t : c.policy && c.policy->w ? *c.policy->w : 0;
    if (!best.item || more_restrictive(c, best)) best = c;
  }
  if (!best.item) {
    if (!named) ++a.ignored;  // not malformed itself, but nothing to follow: counted, so that it shows
    // Only quotas in another unit (bytes) is nothing for us, not a fault.
    return a.ignored > ignored_before ? AdvertRead::malformed : AdvertRead::none;
  }
  a.remaining = *best.item->r;
  a.limit = best.policy ? *best.policy->q : 0;
  a.reset_us = best.item->t ? seconds_to_us(*best.item->t) : 0;
  if (best.policy && best.policy->w && *best.policy->w > 0) a.window_us = seconds_to_us(*best.policy->w);
  return AdvertRead::ok;
}

// A count in one field of the supplier's own ("api-usage=10018/100000": used/limit): the member
// named usage_key of a list (',' or ';' between members), or the whole value when the key is "".
// What follows the limit in parentheses is a note ("17/250(appName=x)").
AdvertRead read_usage(const RateFields& cfg, const std::vector<HeaderView>& fields, std::int64_t ref_s, Advert& a) {
  std::string_view v;
  const AdvertRead got = single(fields, cfg.usage_field, v);
  if (got == AdvertRead::none) return got;
  std::optional<std::string_view> count;
  if (got == AdvertRead::ok && cfg.usage_key.empty()) count = v;
  for (std::size_t at = 0; got == AdvertRead::ok && !count && at < v.size();) {
    const std::size_t end = std::min(v.find(',', at), v.find(';', at));
    const std::string_view member = trim_ows(v.substr(at, end == std::string_view::npos ? end : end - at));
    at = end == std::string_view::npos ? v.size() : end + 1;
    const std::size_t eq = member.find('=');
    if (eq != std::string_view::npos && iequals(trim_ows(member.substr(0, eq)), cfg.usage_key))
      count = trim_ows(member.substr(eq + 1));
  }
  const std::size_t slash = count ? count->find('/') : std::string_view::npos;
  const auto used = count && slash != std::string_view::npos ? plain_number(trim_ows(count->substr(0, slash))) : std::nullopt;
  const auto limit = used ? plain_number(trim_ows(count->substr(slash + 1, count->find('(') - slash - 1))) : std::nullopt;
  if (!used || !limit || *used > kMaxCount || *limit > kMaxCount) {
    ++a.ignored;
    return AdvertRead::malformed;
  }
  a.limit = *limit;
  a.remaining = std::max(*limit - *used, 0.0);
  read_reset(fields, cfg.reset_field, cfg.reset_unit, ref_s, a);
  return AdvertRead::ok;
}

}  // namespace

AdvertRead read_advert(const config::RateFieldsConfig& cfg, const std::vector<HeaderView>& fields,
                       std::optional<std::string_view> date, std::int64_t now_unix_s, Advert& out) {
  using Style = RateFields::Style;
  // Points in time are read against the supplier's clock when it gives it: its Date.
  std::int64_t ref_s = now_unix_s;
  if (date)
    if (const auto d = parse_http_date(trim_ows(*date), now_unix_s)) ref_s = *d;
  const auto attempt = [&](Style style, int& ignored) {
    Advert a;
    a.window_us = static_cast<std::int64_t>(cfg.window_s) * 1'000'000;
    AdvertRead got = AdvertRead::none;
    if (style == Style::ietf) got = read_ietf(cfg, fields, a);
    if (style == Style::legacy)
      got = read_named(fields, {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}, cfg.reset_unit, ref_s, a);
    if (style == Style::x)
      got = read_named(fields, {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}, cfg.reset_unit,
                       ref_s, a);
    if (style == Style::custom)
      got = !cfg.usage_field.empty()
                ? read_usage(cfg, fields, ref_s, a)
                : read_named(fields, {cfg.limit_field, cfg.remaining_field, cfg.reset_field}, cfg.reset_unit, ref_s, a);
    ignored += a.ignored;
    if (got == AdvertRead::ok) {
      a.ignored = ignored;
      out = a;
    }
    return got;
  };
  int ignored = 0;
  if (cfg.style != Style::automatic) return cfg.style == Style::none ? AdvertRead::none : attempt(cfg.style, ignored);
  bool malformed = false;
  for (const Style style : {Style::ietf, Style::legacy, Style::x}) {
    const AdvertRead got = attempt(style, ignored);
    if (got == AdvertRead::ok) return got;
    malformed = malformed || got == AdvertRead::malformed;
  }
  return malformed ? AdvertRead::malformed : AdvertRead::none;
}

}  // namespace tollgate::proxy

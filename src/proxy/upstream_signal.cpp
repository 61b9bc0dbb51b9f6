#include "tollgate/proxy/upstream_signal.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
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
  double frac = 0, scale = 0.1;
  if (c.peek() == '.') {
    ++c.i;
    int f = 0;
    while (is_digit(c.peek())) {
      if (++f > 9) return false;
      frac += (c.s[c.i++] - '0') * scale;
      scale /= 10;
    }
    if (f == 0) return false;
  }
  out = (static_cast<double>(whole) + frac) * (negative ? -1 : 1);
  return true;
}

enum class Bare { number, other };

// Any bare item (integer, decimal, string, token, byte sequence, boolean); numbers are kept.
bool parse_bare_item(Cursor& c, Bare& kind, double& number) {
  kind = Bare::other;
  const char ch = c.peek();
  std::string scratch;
  if (ch == '-' || is_digit(ch)) {
    kind = Bare::number;
    return parse_number(c, number);
  }
  if (ch == '"') return parse_sf_string(c, scratch);
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
  return parse_token(c, scratch);
}

// One member: a name and its parameters; r or t that is not a non-negative number makes it malformed.
bool parse_item(Cursor& c, RateLimitItem& item) {
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
    if (c.peek() == '=') {
      ++c.i;
      if (!parse_bare_item(c, kind, number)) return false;
    }
    if (key == "r" || key == "t") {
      if (kind != Bare::number || number < 0) return false;
      (key == "r" ? item.r : item.t) = number;  // a repeated key: the last counts (RFC 8941)
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

std::vector<RateLimitItem> parse_ratelimit(std::string_view value) {
  std::vector<RateLimitItem> items;
  Cursor c{value};
  c.skip_ows();
  while (!c.done()) {
    const std::size_t from = c.i;
    RateLimitItem item;
    bool ok = parse_item(c, item);
    if (ok) {
      c.skip_ows();
      ok = c.done() || c.peek() == ',';
    }
    if (ok)
      items.push_back(std::move(item));
    else
      skip_member(c, from);
    if (!c.done()) ++c.i;  // the comma
    c.skip_ows();
  }
  return items;
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

#include "tollgate/proxy/http1.hpp"

#include <cstring>

namespace tollgate::proxy::http1 {

namespace {

using uchar = unsigned char;

// ---- character classes (RFC 9110 5.6.2, 5.5) ----

constexpr bool tchar(uchar c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

struct Table {
  bool v[256];
  constexpr bool operator[](uchar c) const { return v[c]; }
};

constexpr Table make_token_table(bool with_underscore = true) {
  Table t{};
  for (int c = 0; c < 256; ++c) t.v[c] = tchar(static_cast<uchar>(c)) && (with_underscore || c != '_');
  return t;
}
// field-value and reason-phrase bytes: HTAB, SP, VCHAR, obs-text (not CTLs, not DEL).
constexpr Table make_value_table() {
  Table t{};
  for (int c = 0; c < 256; ++c) t.v[c] = c == '\t' || (c >= 0x20 && c != 0x7f);
  return t;
}
// request-target bytes as far as the parser cares: visible ASCII.
constexpr Table make_target_table() {
  Table t{};
  for (int c = 0; c < 256; ++c) t.v[c] = c > 0x20 && c < 0x7f;
  return t;
}
constexpr Table kToken = make_token_table();
// A field name's bytes up to a '_': the name scan stops there, so that a name with one is noticed
// at no cost to the others (proxy.underscores_in_headers).
constexpr Table kNameByte = make_token_table(false);
constexpr Table kValue = make_value_table();
constexpr Table kTarget = make_target_table();

// ---- eight bytes at a time (SWAR): long values and targets are checked a word per step ----

constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
constexpr std::uint64_t kHighs = 0x8080808080808080ULL;

inline std::uint64_t load8(const char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// Whether some byte of x is < n (exact as a yes/no answer for n <= 128).
constexpr bool has_less(std::uint64_t x, std::uint64_t n) { return ((x - kOnes * n) & ~x & kHighs) != 0; }
// Whether some byte of x equals c.
constexpr bool has_byte(std::uint64_t x, std::uint64_t c) {
  const std::uint64_t y = x ^ (kOnes * c);
  return ((y - kOnes) & ~y & kHighs) != 0;
}

// The first byte at or after p that is not a field-value byte. One exists before `end`: every
// line ends in CR LF.
inline const char* scan_value(const char* p, const char* end) {
  while (end - p >= 8) {
    const std::uint64_t x = load8(p);
    if (!has_less(x, 0x20) && !has_byte(x, 0x7f)) {
      p += 8;
      continue;
    }
    // Something in this word: a CR, a control character, or just an HTAB.
    for (int k = 0; k < 8; ++k, ++p)
      if (!kValue[static_cast<uchar>(*p)]) return p;
  }
  while (kValue[static_cast<uchar>(*p)]) ++p;
  return p;
}

// The first byte at or after p that is not visible ASCII (the SP after a target, at the latest
// the CR ending the line).
inline const char* scan_target(const char* p, const char* end) {
  while (end - p >= 8) {
    const std::uint64_t x = load8(p);
    if (!has_less(x, 0x21) && !has_byte(x, 0x7f) && (x & kHighs) == 0) {
      p += 8;
      continue;
    }
    for (int k = 0; k < 8; ++k, ++p)
      if (!kTarget[static_cast<uchar>(*p)]) return p;
  }
  while (kTarget[static_cast<uchar>(*p)]) ++p;
  return p;
}

// Where the name scan stopped at p, not at ':': a '_' marks the head and the name goes on to the
// end of its token characters. Any other byte is left for the caller to refuse.
inline const char* name_after_stop(const char* p, Head& h) {
  if (*p != '_') return p;
  h.underscore_names = true;
  while (kToken[static_cast<uchar>(*p)]) ++p;
  return p;
}

inline const char* skip_ows(const char* p) {
  while (*p == ' ' || *p == '\t') ++p;
  return p;
}

constexpr uchar lower(uchar c) { return c >= 'A' && c <= 'Z' ? static_cast<uchar>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(static_cast<uchar>(a[i])) != lower(static_cast<uchar>(b[i]))) return false;
  return true;
}

// Compares n token characters at s with a lower-case literal of letters and '-'. OR-ing 0x20
// lowers letters and leaves '-' alone; no other token character becomes a letter or '-' that
// way, so this is exact for token input, and compares a word per step.
template <std::size_t N>
inline bool token_is(const char* s, const char (&lit)[N]) {
  constexpr std::size_t n = N - 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    if ((load8(s + i) | 0x2020202020202020ULL) != load8(lit + i)) return false;
  for (; i < n; ++i)
    if ((static_cast<uchar>(s[i]) | 0x20) != static_cast<uchar>(lit[i])) return false;
  return true;
}

// A parsed field value (or list element) against a lower-case literal of letters, digits and '-'.
// OR-ing 0x20 matches a letter only with its two cases; a digit or '-' also matches a control
// character (0x0D | 0x20 is '-'), which a parsed value never holds: exact here.
template <std::size_t N>
inline bool value_is(std::string_view v, const char (&lit)[N]) {
  return v.size() == N - 1 && token_is(v.data(), lit);
}

// A field name (token characters only) to its Name: a switch on the length, then at most a
// few word compares.
Name recognise(const char* s, std::size_t n) {
  switch (n) {
    case 2:
      if (token_is(s, "te")) return Name::te;
      break;
    case 3:
      if (token_is(s, "via")) return Name::via;
      break;
    case 4:
      if (token_is(s, "host")) return Name::host;
      if (token_is(s, "date")) return Name::date;
      break;
    case 6:
      if (token_is(s, "expect")) return Name::expect;
      if (token_is(s, "server")) return Name::server;
      break;
    case 7:
      if (token_is(s, "trailer")) return Name::trailer;
      if (token_is(s, "upgrade")) return Name::upgrade;
      break;
    case 9:
      if (token_is(s, "forwarded")) return Name::forwarded;
      if (token_is(s, "x-real-ip")) return Name::x_real_ip;
      if (token_is(s, "ratelimit")) return Name::ratelimit;
      break;
    case 10:
      if (token_is(s, "connection")) return Name::connection;
      if (token_is(s, "keep-alive")) return Name::keep_alive;
      break;
    case 11:
      if (token_is(s, "retry-after")) return Name::retry_after;
      break;
    case 12:
      if (token_is(s, "content-type")) return Name::content_type;
      if (token_is(s, "x-request-id")) return Name::x_request_id;
      if (token_is(s, "grpc-timeout")) return Name::grpc_timeout;
      break;
    case 13:
      if (token_is(s, "authorization")) return Name::authorization;
      break;
    case 14:
      if (token_is(s, "content-length")) return Name::content_length;
      break;
    case 15:
      if (token_is(s, "x-forwarded-for")) return Name::x_forwarded_for;
      if (token_is(s, "request-timeout")) return Name::request_timeout;
      break;
    case 16:
      if (token_is(s, "proxy-connection")) return Name::proxy_connection;
      if (token_is(s, "x-forwarded-host")) return Name::x_forwarded_host;
      if (token_is(s, "ratelimit-policy")) return Name::ratelimit_policy;
      if (token_is(s, "x-tollgate-color")) return Name::x_tollgate_color;
      break;
    case 17:
      if (token_is(s, "transfer-encoding")) return Name::transfer_encoding;
      if (token_is(s, "x-forwarded-proto")) return Name::x_forwarded_proto;
      if (token_is(s, "x-tollgate-shadow")) return Name::x_tollgate_shadow;
      break;
    case 18:
      if (token_is(s, "proxy-authenticate")) return Name::proxy_authenticate;
      break;
    case 19:
      if (token_is(s, "proxy-authorization")) return Name::proxy_authorization;
      break;
    default:
      break;
  }
  return Name::other;
}

Method method_of(std::string_view m) {
  // Methods are case-sensitive (RFC 9110 9.1).
  switch (m.size()) {
    case 3:
      if (m == "GET") return Method::get;
      if (m == "PUT") return Method::put;
      break;
    case 4:
      if (m == "HEAD") return Method::head;
      if (m == "POST") return Method::post;
      break;
    case 5:
      if (m == "PATCH") return Method::patch;
      if (m == "TRACE") return Method::trace;
      break;
    case 6:
      if (m == "DELETE") return Method::delete_;
      break;
    case 7:
      if (m == "OPTIONS") return Method::options;
      if (m == "CONNECT") return Method::connect;
      break;
    default:
      break;
  }
  return Method::other;
}

// Calls f(element) for each non-empty element of a comma-separated list, OWS trimmed
// (RFC 9110 5.6.1: empty elements are allowed and ignored).
template <class F>
void for_each_element(std::string_view list, F&& f) {
  std::size_t i = 0;
  while (i <= list.size()) {
    std::size_t j = list.find(',', i);
    if (j == std::string_view::npos) j = list.size();
    std::size_t a = i, b = j;
    while (a < b && (list[a] == ' ' || list[a] == '\t')) ++a;
    while (b > a && (list[b - 1] == ' ' || list[b - 1] == '\t')) --b;
    if (a < b) f(list.substr(a, b - a));
    i = j + 1;
  }
}

// Content-Length = 1*DIGIT. At most 19 digits (no overflow) and at most 2^63-1 (fits an off_t).
bool parse_content_length(std::string_view v, std::uint64_t& out) {
  if (v.empty() || v.size() > 19) return false;
  std::uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (n > static_cast<std::uint64_t>(INT64_MAX)) return false;
  out = n;
  return true;
}

void reset(Head& h) {
  h.count = 0;
  h.fields.clear();
  h.version_minor = 1;
  h.head_bytes = 0;
  h.chunked = false;
  h.other_transfer_encoding = false;
  h.content_length.reset();
  h.content_length_ignored = false;
  h.keep_alive = true;
  h.connection_close = false;
  h.connection_upgrade = false;
  h.connection_names_other = false;
  h.expect_continue = false;
  h.expect_other = false;
  h.host_count = 0;
  h.present = 0;
  h.underscore_names = false;
}

// Where the head ends: at the first empty line after the start line (an empty start line is
// found here and refused by the parse). Every LF must follow a CR. Only the first `max` bytes are
// searched.
struct Bounds {
  Error error;
  std::size_t start;  // first byte of the start line (after skipped empty lines)
  std::size_t end;    // just past the final CRLF CRLF
};
constexpr int kMaxLeadingEmptyLines = 8;

Bounds find_head(std::string_view buf, std::size_t max, std::size_t& scanned, bool skip_empty_lines) {
  const char* const b = buf.data();
  const std::size_t n = buf.size();
  const std::size_t limit = n < max ? n : max;
  std::size_t start = 0;
  if (skip_empty_lines)
    for (int k = 0; k < kMaxLeadingEmptyLines && start + 1 < limit && b[start] == '\r' && b[start + 1] == '\n'; ++k)
      start += 2;
  // LFs before `scanned` were checked by an earlier call (the buffer only grew since).
  std::size_t i = scanned > start ? scanned : start;
  while (i < limit) {
    const void* hit = std::memchr(b + i, '\n', limit - i);
    if (!hit) break;
    const std::size_t j = static_cast<std::size_t>(static_cast<const char*>(hit) - b);
    if (j == start || b[j - 1] != '\r') return {Error::bad_line_ending, start, 0};
    if (j >= start + 3 && b[j - 2] == '\n') return {Error::none, start, j + 1};
    i = j + 1;
  }
  scanned = limit;
  return {n > max ? Error::header_too_large : Error::need_more, start, 0};
}

// What the field lines say of the message's framing, gathered while they are read.
struct Framing {
  std::string_view te_value;  // the last Transfer-Encoding's
  std::size_t te_count = 0;
  bool keep_alive_token = false;  // Connection: keep-alive
};

// A recognised field's part in the framing (Host, Content-Length, Transfer-Encoding, Connection,
// Expect), noted in `h` and `fr`.
inline Error note_field(Name id, std::string_view value, Head& h, Framing& fr) {
  switch (id) {
    case Name::host:
      ++h.host_count;
      break;
    case Name::content_length: {
      // Two, even equal, or a list: which one would the next hop believe? Refused.
      std::uint64_t n = 0;
      if (h.content_length || !parse_content_length(value, n)) return Error::bad_content_length;
      h.content_length = n;
      break;
    }
    case Name::transfer_encoding:
      ++fr.te_count;
      fr.te_value = value;
      break;
    case Name::connection:
      for_each_element(value, [&](std::string_view t) {
        if (value_is(t, "close")) {
          h.connection_close = true;
        } else if (value_is(t, "keep-alive")) {
          fr.keep_alive_token = true;
        } else {
          h.connection_names_other = true;
          if (value_is(t, "upgrade")) h.connection_upgrade = true;
        }
      });
      break;
    case Name::expect:
      (value_is(value, "100-continue") ? h.expect_continue : h.expect_other) = true;
      break;
    default:
      break;
  }
  return Error::none;
}

// The framing the field lines settle on (RFC 9112 6): Transfer-Encoding against Content-Length and
// the version, and whether the connection stays open.
inline Error settle_framing(Head& h, bool is_request, const Framing& fr) {
  if (fr.te_count > 0) {
    // Both framings in a request: one hop may read the body by one and the next by the other
    // (request smuggling). RFC 9112 6.3 allows rejecting it; a request must be.
    if (is_request && h.content_length) return Error::conflicting_framing;
    // RFC 9112 6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
    if (h.version_minor == 0) return Error::bad_transfer_encoding;
    bool empty = true;
    for_each_element(fr.te_value, [&](std::string_view) { empty = false; });
    if (fr.te_count == 1 && empty) return Error::bad_transfer_encoding;
    if (fr.te_count == 1 && value_is(fr.te_value, "chunked"))
      h.chunked = true;
    else
      h.other_transfer_encoding = true;
    if (h.content_length) {  // a response: Transfer-Encoding overrides Content-Length
      h.content_length.reset();
      h.content_length_ignored = true;
    }
  }
  h.keep_alive = !h.connection_close && (h.version_minor == 1 || fr.keep_alive_token);
  return Error::none;
}

// The field lines from p up to and including the final empty line at end - 2, and the framing
// facts. p is the start of the line after the start line.
Error parse_fields(const char* p, const char* end, Head& h, bool is_request) {
  // A response is bounded by its bytes only (one field takes at least 4 of them).
  const std::size_t max_fields = is_request ? kMaxFields : static_cast<std::size_t>(end - p);
  Framing fr;
  for (;;) {
    if (*p == '\r') {
      if (p[1] != '\n') return Error::bad_line_ending;
      break;  // the empty line: find_head put it at end - 2
    }
    // field-name ":" — no whitespace before the colon, and none at the line start (obs-fold).
    const char* name = p;
    while (kNameByte[static_cast<uchar>(*p)]) ++p;
    if (*p != ':') p = name_after_stop(p, h);  // only the rare name with '_' goes on
    if (p == name || *p != ':') return Error::bad_field;
    const std::size_t name_len = static_cast<std::size_t>(p - name);
    const char* v = skip_ows(p + 1);
    p = scan_value(v, end);
    if (*p != '\r') return Error::bad_field;  // a control character (a bare LF never gets here)
    if (p[1] != '\n') return Error::bad_line_ending;
    const char* ve = p;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) --ve;
    p += 2;

    if (h.count == max_fields) return Error::too_many_fields;
    const Name id = recognise(name, name_len);
    const std::string_view value(v, static_cast<std::size_t>(ve - v));
    Field& f = h.fields.slot(h.count++);
    f.name = std::string_view(name, name_len);
    f.value = value;
    f.id = id;

    if (const Error e = note_field(id, value, h, fr); e != Error::none) return e;
    h.present |= 1u << static_cast<unsigned>(id);
  }
  return settle_framing(h, is_request, fr);
}

// "HTTP/1.0" or "HTTP/1.1" at p (at least 8 bytes there): the minor version, or -1.
int version_at(const char* p) {
  if (std::memcmp(p, "HTTP/1.", 7) != 0) return -1;
  if (p[7] == '0') return 0;
  if (p[7] == '1') return 1;
  return -1;
}

}  // namespace

const char* describe(Error e) noexcept {
  switch (e) {
    case Error::none: return "";
    case Error::need_more: return "incomplete message";
    case Error::header_too_large: return "header too large";
    case Error::too_many_fields: return "too many header fields";
    case Error::bad_method: return "bad method";
    case Error::bad_target: return "bad request target";
    case Error::bad_version: return "bad HTTP version";
    case Error::bad_status: return "bad status code";
    case Error::bad_reason: return "bad reason phrase";
    case Error::bad_field: return "bad header field";
    case Error::bad_line_ending: return "bad line ending";
    case Error::bad_content_length: return "bad Content-Length";
    case Error::conflicting_framing: return "both Content-Length and Transfer-Encoding";
    case Error::bad_transfer_encoding: return "bad Transfer-Encoding";
    case Error::bad_chunk: return "bad chunked encoding";
    case Error::body_too_large: return "body too large";
  }
  return "";
}

std::string_view canonical(Name n) noexcept {
  switch (n) {
    case Name::other: return "";
    case Name::host: return "Host";
    case Name::content_length: return "Content-Length";
    case Name::transfer_encoding: return "Transfer-Encoding";
    case Name::connection: return "Connection";
    case Name::expect: return "Expect";
    case Name::keep_alive: return "Keep-Alive";
    case Name::proxy_connection: return "Proxy-Connection";
    case Name::te: return "TE";
    case Name::trailer: return "Trailer";
    case Name::upgrade: return "Upgrade";
    case Name::proxy_authorization: return "Proxy-Authorization";
    case Name::proxy_authenticate: return "Proxy-Authenticate";
    case Name::x_forwarded_for: return "X-Forwarded-For";
    case Name::x_forwarded_proto: return "X-Forwarded-Proto";
    case Name::x_forwarded_host: return "X-Forwarded-Host";
    case Name::x_real_ip: return "X-Real-IP";
    case Name::forwarded: return "Forwarded";
    case Name::via: return "Via";
    case Name::x_request_id: return "X-Request-Id";
    case Name::x_tollgate_shadow: return "X-Tollgate-Shadow";
    case Name::x_tollgate_color: return "X-Tollgate-Color";
    case Name::authorization: return "Authorization";
    case Name::date: return "Date";
    case Name::server: return "Server";
    case Name::retry_after: return "Retry-After";
    case Name::content_type: return "Content-Type";
    case Name::grpc_timeout: return "grpc-timeout";
    case Name::request_timeout: return "Request-Timeout";
    case Name::ratelimit: return "RateLimit";
    case Name::ratelimit_policy: return "RateLimit-Policy";
  }
  return "";
}

Name name_of(std::string_view field_name) noexcept {
  // recognise() is exact only for token characters.
  for (char c : field_name)
    if (!kToken[static_cast<uchar>(c)]) return Name::other;
  return recognise(field_name.data(), field_name.size());
}

bool is_hop_by_hop(Name n) noexcept {
  switch (n) {
    case Name::connection: case Name::keep_alive: case Name::proxy_connection: case Name::te:
    case Name::trailer: case Name::upgrade: case Name::proxy_authorization: case Name::proxy_authenticate:
    case Name::transfer_encoding:
      return true;
    default:
      return false;
  }
}

const Field* Head::find(Name n) const noexcept {
  if (!has(n)) return nullptr;
  for (std::size_t i = 0; i < count; ++i)
    if (fields[i].id == n) return &fields[i];
  return nullptr;
}

const Field* Head::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < count; ++i)
    if (iequals(fields[i].name, name)) return &fields[i];
  return nullptr;
}

bool connection_names(const Head& h, std::string_view field_name) noexcept {
  if (!h.connection_names_other && !iequals(field_name, "close") && !iequals(field_name, "keep-alive"))
    return false;
  bool named = false;
  for (const Field& f : h)
    if (f.id == Name::connection)
      for_each_element(f.value, [&](std::string_view t) { named = named || iequals(t, field_name); });
  return named;
}

Error parse_request_head(std::string_view buf, std::size_t max_head_bytes, RequestHead& out,
                         std::size_t& scanned) noexcept {
  const Bounds bounds = find_head(buf, max_head_bytes, scanned, true);
  if (bounds.error != Error::none) return bounds.error;
  reset(out);
  const char* p = buf.data() + bounds.start;
  const char* const end = buf.data() + bounds.end;

  // method SP request-target SP HTTP-version CRLF
  const char* const method = p;
  while (kToken[static_cast<uchar>(*p)]) ++p;
  if (p == method || *p != ' ') return Error::bad_method;
  out.method_text = std::string_view(method, static_cast<std::size_t>(p - method));
  out.method = method_of(out.method_text);
  const char* const target = ++p;
  p = scan_target(p, end);
  if (p == target || *p != ' ') return Error::bad_target;
  out.target = std::string_view(target, static_cast<std::size_t>(p - target));
  ++p;
  if (end - p < 10 || (out.version_minor = version_at(p)) < 0) return Error::bad_version;
  p += 8;
  if (*p != '\r') return Error::bad_version;
  if (p[1] != '\n') return Error::bad_line_ending;
  p += 2;

  const Error e = parse_fields(p, end, out, true);
  if (e != Error::none) return e;
  out.head_bytes = bounds.end;
  return Error::none;
}

Error parse_response_head(std::string_view buf, std::size_t max_head_bytes, ResponseHead& out,
                          std::size_t& scanned) noexcept {
  const Bounds bounds = find_head(buf, max_head_bytes, scanned, false);
  if (bounds.error != Error::none) return bounds.error;
  reset(out);
  const char* p = buf.data() + bounds.start;
  const char* const end = buf.data() + bounds.end;

  // HTTP-version SP 3DIGIT [SP reason-phrase] CRLF
  if (end - p < 13 || (out.version_minor = version_at(p)) < 0 || p[8] != ' ') return Error::bad_version;
  p += 9;
  if (p[0] < '1' || p[0] > '9' || p[1] < '0' || p[1] > '9' || p[2] < '0' || p[2] > '9') return Error::bad_status;
  out.status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
  p += 3;
  const char* reason = p;
  if (*p == ' ') {
    reason = ++p;
    p = scan_value(p, end);
  } else if (*p != '\r') {
    return Error::bad_status;  // a fourth digit, or junk
  }
  if (*p != '\r') return Error::bad_reason;
  if (p[1] != '\n') return Error::bad_line_ending;
  out.reason = std::string_view(reason, static_cast<std::size_t>(p - reason));
  p += 2;

  const Error e = parse_fields(p, end, out, false);
  if (e != Error::none) return e;
  out.head_bytes = bounds.end;
  return Error::none;
}

BodyFraming request_body(const RequestHead& h) noexcept {
  if (h.chunked) return {BodyKind::chunked, 0};
  if (h.other_transfer_encoding) return {BodyKind::unsupported, 0};
  if (h.content_length) return {BodyKind::length, *h.content_length};
  return {BodyKind::none, 0};
}

BodyFraming response_body(const ResponseHead& h, bool request_was_head) noexcept {
  if (request_was_head || h.status < 200 || h.status == 204 || h.status == 304) return {BodyKind::none, 0};
  if (h.chunked) return {BodyKind::chunked, 0};
  if (h.other_transfer_encoding) return {BodyKind::unsupported, 0};
  if (h.content_length) return {BodyKind::length, *h.content_length};
  return {BodyKind::until_close, 0};
}

// ---- chunked bodies ----

namespace {
constexpr int hex_digit(uchar c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

void ChunkedDecoder::reset() noexcept {
  body_ = 0;
  remaining_ = 0;
  line_ = 0;
  state_ = State::size;
  digits_ = false;
  error_ = Error::none;
}

bool ChunkedDecoder::size_line_byte(unsigned char c) noexcept {
  if (state_ == State::size) {
    if (const int d = hex_digit(c); d >= 0) {
      if (remaining_ > (UINT64_MAX >> 4)) return false;
      remaining_ = remaining_ << 4 | static_cast<std::uint64_t>(d);
      digits_ = true;
    } else if (!digits_) {
      return false;
    } else if (c == '\r') {
      state_ = State::size_lf;
    } else if (c == ';') {
      state_ = State::ext;
    } else if (c == ' ' || c == '\t') {
      state_ = State::size_bws;
    } else {
      return false;
    }
  } else if (state_ == State::size_bws) {
    // Whitespace after the size only before an extension ("5 \r\n" is not a chunk line).
    if (c == ';') state_ = State::ext;
    else if (c != ' ' && c != '\t') return false;
  } else {
    // Extensions are skipped, but no control characters: a bare LF must not end the line here
    // when another parser would read on.
    if (c == '\r') state_ = State::size_lf;
    else if (!kValue[c]) return false;
  }
  return true;
}

bool ChunkedDecoder::trailer_byte(unsigned char c) noexcept {
  if (state_ == State::trailer_line) {
    if (!kToken[c]) return false;  // includes obs-fold
    state_ = State::trailer_name;
  } else if (state_ == State::trailer_name) {
    if (c == ':') state_ = State::trailer_value;
    else if (!kToken[c]) return false;
  } else if (state_ == State::trailer_value) {
    if (c == '\r') state_ = State::trailer_lf;
    else if (!kValue[c]) return false;
  } else {
    if (c != '\n') return false;
    state_ = State::trailer_line;
  }
  return true;
}

std::size_t ChunkedDecoder::next(std::string_view in, std::string_view& data) noexcept {
  data = {};
  const std::size_t n = in.size();
  std::size_t i = 0;
  // Framing goes a byte at a time (it is a few bytes per chunk); data goes in one piece.
  while (i < n) {
    const auto c = static_cast<uchar>(in[i]);
    switch (state_) {
      case State::size:
      case State::size_bws:
      case State::ext:
        // chunk-size [ BWS ";" extensions ] CRLF, the line bounded.
        if (++line_ > kMaxChunkLine || !size_line_byte(c)) return fail(Error::bad_chunk, i);
        ++i;
        break;
      case State::size_lf:
        if (c != '\n') return fail(Error::bad_chunk, i);
        ++i;
        line_ = 0;
        digits_ = false;
        if (remaining_ == 0) {
          state_ = State::trailer_line;  // the last chunk; line_ now counts the trailer section
        } else {
          if (remaining_ > max_body_ - body_) return fail(Error::body_too_large, i);
          state_ = State::data;
        }
        break;
      case State::data: {
        const std::uint64_t avail = n - i;
        const std::size_t take = static_cast<std::size_t>(remaining_ < avail ? remaining_ : avail);
        data = in.substr(i, take);
        i += take;
        remaining_ -= take;
        body_ += take;
        if (remaining_ == 0) state_ = State::data_cr;
        return i;  // one run of data per call
      }
      case State::data_cr:
        if (c != '\r') return fail(Error::bad_chunk, i);
        state_ = State::data_lf;
        ++i;
        break;
      case State::data_lf:
        if (c != '\n') return fail(Error::bad_chunk, i);
        state_ = State::size;
        ++i;
        break;
      case State::trailer_line:
      case State::trailer_name:
      case State::trailer_value:
      case State::trailer_lf:
        if (state_ == State::trailer_line && c == '\r') {
          state_ = State::final_lf;
          ++i;
          break;
        }
        if (++line_ > max_trailer_) return fail(Error::header_too_large, i);
        if (!trailer_byte(c)) return fail(Error::bad_chunk, i);
        ++i;
        break;
      case State::final_lf:
        if (c != '\n') return fail(Error::bad_chunk, i);
        state_ = State::done;
        return i + 1;  // what follows is the next message
      case State::done:
      case State::failed:
        return i;
    }
  }
  return i;
}

}  // namespace tollgate::proxy::http1

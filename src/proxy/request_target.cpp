#include "tollgate/proxy/request_target.hpp"

#include <vector>

namespace tollgate::proxy {

const char* target_error_detail(TargetError e) {
  switch (e) {
    case TargetError::none: return "";
    case TargetError::not_origin_form: return "the request target must be a path starting with '/'";
    case TargetError::fragment: return "the request target must not contain '#' (a fragment is never sent)";
    case TargetError::bad_escape: return "the request target has a '%' not followed by two hex digits";
    case TargetError::encoded_separator:
      return "the request path must not contain an encoded '/' or '\\' (%2F, %5C) or a raw '\\'";
    case TargetError::control: return "the request target must not contain control characters, spaces or non-ASCII bytes";
    case TargetError::encoded_control:
      return "the request path must not contain an encoded control character (%00 to %1F, %7F)";
    case TargetError::edge_space:
      return "the request path must not begin or end a segment with an encoded space (%20)";
  }
  return "";
}

namespace {

bool is_unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Whether the path may differ from its normal form or from its match form: anything cheaper to
// rule out than to do. Most paths pass untouched, without an allocation.
bool needs_work(std::string_view p) {
  if (p.size() > 1 && p.back() == '/') return true;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '%' || c == '\\' || c == ';') return true;
    if (c == '/' && i + 1 < p.size() && (p[i + 1] == '/' || p[i + 1] == '.')) return true;
    if (c == '.' && (i + 1 == p.size() || p[i + 1] == '/')) return true;
  }
  return false;
}

// Percent-encoding normalisation (RFC 3986 6.2.2.1-2): unreserved characters decoded, the other
// escapes kept with upper-case hex. Encoded separators are refused: an upstream that decodes them
// would see another path than the one matched; so are encoded control characters (a NUL cuts the
// path short in some servers, and a tab or line end is trimmed by others).
TargetError decode_unreserved(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '\\') return TargetError::encoded_separator;
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    if (i + 2 >= in.size()) return TargetError::bad_escape;
    const int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
    if (hi < 0 || lo < 0) return TargetError::bad_escape;
    const auto byte = static_cast<unsigned char>(hi * 16 + lo);
    if (byte == '/' || byte == '\\') return TargetError::encoded_separator;
    if (byte < 0x20 || byte == 0x7F) return TargetError::encoded_control;
    if (is_unreserved(byte)) {
      out.push_back(static_cast<char>(byte));
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out.push_back('%');
      out.push_back(kHex[hi]);
      out.push_back(kHex[lo]);
    }
    i += 2;
  }
  return TargetError::none;
}

// Merges runs of '/' and removes dot segments (RFC 3986 5.2.4); `in` starts with '/'. A path that
// ends in '/', '.' or '..' keeps a trailing '/', as the RFC's algorithm does.
void normalise_segments(std::string_view in, std::string& out) {
  std::vector<std::string_view> segments;
  bool trailing = false;
  std::size_t at = 1;
  for (;;) {
    const std::size_t slash = in.find('/', at);
    const std::string_view seg = in.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
    const bool last = slash == std::string_view::npos;
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
      trailing = true;
    } else if (seg == "." || seg.empty()) {
      trailing = true;
    } else {
      segments.push_back(seg);
      trailing = false;
    }
    if (last) break;
    at = slash + 1;
  }
  out.clear();
  out.reserve(in.size());
  for (const auto& s : segments) {
    out.push_back('/');
    out.append(s.data(), s.size());
  }
  if (segments.empty() || trailing) out.push_back('/');
}

// The trailing '.'s of each segment cut ("search." is "search" to Windows, IIS and Spring's suffix
// pattern match), a segment left empty dropped, and no trailing '/': the match form's last step,
// in place. False when a segment then begins or ends with an encoded space, which servers that
// trim names (Windows) or strings would cut: such a path is refused rather than matched.
bool trim_segments(std::string& m) {
  std::size_t w = 0;
  for (std::size_t r = 0; r < m.size();) {
    std::size_t end = m.find('/', r + 1);
    if (end == std::string::npos) end = m.size();
    std::size_t last = end;
    while (last > r + 1 && m[last - 1] == '.') --last;
    const std::string_view seg(m.data() + r + 1, last - r - 1);
    if (seg.starts_with("%20") || seg.ends_with("%20")) return false;
    if (!seg.empty())
      for (std::size_t k = r; k < last; ++k) m[w++] = m[k];  // w <= k: moves bytes left only
    r = end;
  }
  m.resize(w == 0 ? 1 : w);
  if (w == 0) m[0] = '/';
  return true;
}

}  // namespace

void parse_target(std::string_view raw, RequestTarget& out) {
  out.error = TargetError::none;
  out.path = out.query = out.match = {};
  out.rewritten = false;
  out.path_storage.clear();
  out.match_storage.clear();
  std::size_t query_at = raw.size();
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c <= 0x20 || c >= 0x7F) {
      out.error = TargetError::control;
      return;
    }
    if (c == '#') {
      out.error = TargetError::fragment;
      return;
    }
    if (c == '?' && query_at == raw.size()) query_at = i;
  }
  if (raw.empty() || raw.front() != '/') {
    out.error = TargetError::not_origin_form;
    return;
  }
  const std::string_view path = raw.substr(0, query_at);
  out.query = raw.substr(query_at);
  if (!needs_work(path)) {
    out.path = out.match = path;
    return;
  }

  std::string decoded;
  if ((out.error = decode_unreserved(path, decoded)) != TargetError::none) return;
  normalise_segments(decoded, out.path_storage);
  out.path = out.path_storage;
  out.rewritten = out.path != path;

  // The match form: segment parameters cut ("/a;x/b" is "/a/b" to Tomcat and Spring, and "..;" is
  // ".."), normalised again.
  std::string plain;
  plain.reserve(out.path.size());
  bool in_params = false;
  for (const char c : out.path) {
    if (c == '/') in_params = false;
    else if (c == ';') in_params = true;
    if (!in_params) plain.push_back(c);
  }
  normalise_segments(plain, out.match_storage);
  if (!trim_segments(out.match_storage)) {
    out.error = TargetError::edge_space;
    out.path = {};
    out.rewritten = false;
    return;
  }
  out.match = out.match_storage == out.path ? out.path : std::string_view(out.match_storage);
}

std::string upstream_target(std::string_view base, std::string_view strip, std::string_view target) {
  std::string_view rest = target;
  if (!strip.empty() && rest.starts_with(strip)) rest.remove_prefix(strip.size());
  std::string out;
  out.reserve(base.size() + rest.size() + 1);
  out.append(base);
  if (rest.empty() || rest.front() != '/') out.push_back('/');
  out.append(rest);
  return out;
}

}  // namespace tollgate::proxy

#include "tollgate/proxy/json_text.hpp"

#include <charconv>
#include <cmath>

namespace tollgate::proxy {

namespace {
// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const auto cont = [&](std::size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(i + 1) || !cont(i + 2)) return 0;
    if (c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(i + 1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

// An ill-formed sequence at s[i]: how many bytes one U+FFFD stands for (Unicode's "maximal
// subpart": a lead byte and the continuation bytes that could still have completed it).
std::size_t ill_formed_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const std::size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (need == 0) return 1;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  std::size_t k = i + 1;
  if (k >= s.size() || b(k) < lo || b(k) > hi) return 1;
  ++k;
  while (k < i + need && k < s.size() && (b(k) & 0xC0) == 0x80) ++k;
  return k - i;
}
}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      // A run of plain characters in one append.
      std::size_t j = i + 1;
      while (j < s.size()) {
        const auto d = static_cast<unsigned char>(s[j]);
        if (d < 0x20 || d >= 0x80 || d == '"' || d == '\\') break;
        ++j;
      }
      out.append(s.data() + i, j - i);
      i = j;
      continue;
    }
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      switch (c) {
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        case '\b': out.append("\\b"); break;
        case '\f': out.append("\\f"); break;
        default:
          out.append("\\u00");
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
      }
      ++i;
    } else if (const std::size_t n = utf8_length(s, i)) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for each maximal ill-formed subpart
      i += ill_formed_length(s, i);
    }
  }
  out.push_back('"');
}

void add_string_member(std::string& object, std::string_view key, std::string_view value) {
  if (object.empty() || object.back() != '}') return;
  object.pop_back();
  if (!object.empty() && object.back() != '{') object.push_back(',');
  object.push_back('"');
  object.append(key);
  object.append("\":", 2);
  append_json_string(object, value);
  object.push_back('}');
}

JsonObject& JsonObject::add(std::string_view key, std::int64_t value) {
  std::string& o = key_(key);
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  o.append(buf, r.ptr);
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, double value) {
  std::string& o = key_(key);
  if (!std::isfinite(value)) {
    o.append("null");  // JSON has no infinity or NaN
    return *this;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  o.append(buf, r.ptr);
  return *this;
}

}  // namespace tollgate::proxy

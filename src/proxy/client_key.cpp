#include "tollgate/proxy/client_key.hpp"

#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <cstring>

namespace tollgate::proxy {

namespace ip = boost::asio::ip;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Also accepts the forms proxies write with a port: "1.2.3.4:5678", "[2001:db8::1]:5678".
std::optional<ip::address> parse(std::string_view text) {
  text = trim(text);
  if (text.size() > 64) return std::nullopt;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    text = text.substr(1, close - 1);
  } else if (text.find('.') != std::string_view::npos && text.find(':') != std::string_view::npos &&
             text.find(':') == text.rfind(':')) {
    text = text.substr(0, text.find(':'));  // IPv4 with a port
  }
  boost::system::error_code ec;
  ip::address a = ip::make_address(std::string(text), ec);
  if (ec) return std::nullopt;
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = ip::make_address_v4(ip::v4_mapped, a.to_v6());
  return a;
}

std::array<std::uint8_t, 16> bytes_of(const ip::address& a) {
  if (a.is_v6()) return a.to_v6().to_bytes();
  return ip::make_address_v6(ip::v4_mapped, a.to_v4()).to_bytes();
}

}  // namespace

std::optional<std::string> TrustedProxies::add(std::string_view cidr) {
  auto quoted = [cidr](std::string_view what) {  // built with append: g++ 12 misreports operator+ here
    std::string m;
    m.append("'").append(cidr).append("' ").append(what);
    return m;
  };
  const auto slash = cidr.find('/');
  auto a = parse(cidr.substr(0, slash));
  if (!a) return quoted("is not an IP address or network");
  Net n;
  n.bytes = bytes_of(*a);
  const int max = a->is_v4() ? 32 : 128;
  int prefix = max;
  if (slash != std::string_view::npos) {
    const std::string_view p = cidr.substr(slash + 1);
    auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), prefix);
    if (ec != std::errc() || ptr != p.data() + p.size() || prefix < 0 || prefix > max)
      return quoted(max == 32 ? "has an invalid prefix length (0-32)" : "has an invalid prefix length (0-128)");
  }
  n.prefix = a->is_v4() ? prefix + 96 : prefix;
  nets_.push_back(n);
  return std::nullopt;
}

TrustedProxies trusted_proxies_from(const std::vector<std::string>& networks) {
  TrustedProxies t;
  for (std::size_t i = 0; i < networks.size(); ++i)
    if (auto why = t.add(networks[i])) throw config::ConfigError("proxy.trusted_proxies[" + std::to_string(i) + "]: " + *why);
  return t;
}

bool TrustedProxies::contains(std::string_view address) const {
  if (nets_.empty()) return false;
  auto a = parse(address);
  if (!a) return false;
  const auto b = bytes_of(*a);
  for (const Net& n : nets_) {
    int bits = n.prefix, i = 0;
    bool match = true;
    for (; bits >= 8 && match; bits -= 8, ++i) match = b[i] == n.bytes[i];
    if (match && bits > 0) {
      const auto mask = static_cast<std::uint8_t>(0xff << (8 - bits));
      match = (b[i] & mask) == (n.bytes[i] & mask);
    }
    if (match) return true;
  }
  return false;
}

std::optional<std::string> canonical_address(std::string_view text) {
  auto a = parse(text);
  if (!a) return std::nullopt;
  return a->to_string();
}

std::string client_address(std::string_view peer, std::string_view xff, const TrustedProxies& trusted) {
  std::string hop = canonical_address(peer).value_or(std::string(peer));
  if (!trusted.contains(hop)) return hop;  // a spoofed header from an untrusted peer changes nothing
  // Walk X-Forwarded-For from the right: each entry was written by the hop to its right.
  std::size_t end = xff.size();
  while (end > 0) {
    const std::size_t comma = xff.rfind(',', end - 1);
    const std::size_t begin = comma == std::string_view::npos ? 0 : comma + 1;
    const std::string_view entry = trim(xff.substr(begin, end - begin));
    end = comma == std::string_view::npos ? 0 : comma;
    if (entry.empty()) continue;
    auto a = canonical_address(entry);
    if (!a) return hop;  // not an address: the hop that reported it is as far as we can trust
    hop = *a;
    if (!trusted.contains(hop)) return hop;
  }
  return hop;  // every hop trusted: the left-most one
}

namespace {

// Per byte: 1 for an RFC 9110 tchar, 2 for a byte a quoted-string escapes ('"', '\\'), 0 otherwise.
constexpr std::array<std::uint8_t, 256> kTokenClass = [] {
  std::array<std::uint8_t, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = 1;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = 1;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = 1;
  for (const char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = 1;
  t['"'] = t['\\'] = 2;
  return t;
}();

}  // namespace

void append_forwarded_for(std::string& out, std::string_view peer, bool https) {
  out.append("for=", 4);
  if (peer.empty()) {
    out.append("unknown", 7);
  } else if (peer.find(':') != std::string_view::npos) {
    out.append("\"[", 2).append(peer).append("]\"", 2);
  } else {
    out.append(peer);
  }
  if (https) out.append(";proto=https", 12);
  else out.append(";proto=http", 11);
}

void append_forwarded_host(std::string& out, std::string_view host) {
  if (host.empty()) return;
  std::uint8_t all = 1, any = 0;  // every byte a tchar; some byte to escape
  for (const char c : host) {
    const std::uint8_t k = kTokenClass[static_cast<unsigned char>(c)];
    all &= k;
    any |= k;
  }
  const bool quote = all == 0;
  if (!(any & 2)) {
    // One write: ";host=" and the host, quoted when it is no token (a port, an IPv6 literal).
    const std::size_t at = out.size();
    out.resize(at + 6 + host.size() + (quote ? 2 : 0));
    char* p = out.data() + at;
    std::memcpy(p, ";host=", 6);
    p += 6;
    if (quote) *p++ = '"';
    std::memcpy(p, host.data(), host.size());
    if (quote) p[host.size()] = '"';
    return;
  }
  out.append(";host=\"", 7);
  for (const char c : host) {
    if (kTokenClass[static_cast<unsigned char>(c)] == 2) out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
}

void append_forwarded_element(std::string& out, std::string_view peer, bool https, std::string_view host) {
  append_forwarded_for(out, peer, https);
  append_forwarded_host(out, host);
}

std::string hop_fields(std::string_view real_ip, std::string_view kept, std::string_view peer, bool https,
                       std::string_view host) {
  std::string out;
  out.reserve(real_ip.size() + kept.size() + peer.size() + host.size() + 72);
  out.append("X-Real-IP: ", 11).append(real_ip).append("\r\nForwarded: ", 13);
  if (!kept.empty()) out.append(kept).append(", ", 2);
  append_forwarded_for(out, peer, https);
  append_forwarded_host(out, host);
  out.append("\r\n", 2);
  return out;
}

KeyResult client_key(const config::KeySpec& spec, std::string_view address, std::string_view path,
                     std::optional<std::string_view> header, MissingKey missing, std::string& out) {
  using Kind = config::KeySpec::Kind;
  out.clear();
  switch (spec.kind) {
    case Kind::none:
      return KeyResult::ok;
    case Kind::client_ip:
      out = address;
      return KeyResult::ok;
    case Kind::client_ip_path:
      out.reserve(address.size() + 1 + std::min(path.size(), kMaxKeyPath));
      out.append(address).append(" ").append(path.substr(0, kMaxKeyPath));
      return KeyResult::ok;
    case Kind::header: {
      const std::string_view v = header ? trim(*header) : std::string_view();
      if (v.empty()) {
        if (missing == MissingKey::reject) return KeyResult::missing;
        out = kAnonymous;
        return KeyResult::ok;
      }
      if (v.size() > kMaxHeaderKey) return KeyResult::too_long;
      out.reserve(2 + v.size());
      out.append("h=").append(v);
      return KeyResult::ok;
    }
  }
  return KeyResult::ok;
}

}  // namespace tollgate::proxy

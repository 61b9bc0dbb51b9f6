// Who a request is, for per-client limits: the client's address, behind trusted proxies,
// and the client key a keyBy spec derives from a request. Pure functions, no sockets.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/rule.hpp"

namespace tollgate::proxy {

// A set of networks ("10.0.0.0/8", "192.168.1.7", "::1/128", "fd00::/8").
class TrustedProxies {
 public:
  // Returns the reason when `cidr` is not a network (and adds nothing).
  std::optional<std::string> add(std::string_view cidr);
  bool empty() const { return nets_.empty(); }
  bool contains(std::string_view address) const;

 private:
  struct Net {
    std::array<std::uint8_t, 16> bytes{};  // IPv4 as IPv4-mapped IPv6
    int prefix = 128;
  };
  std::vector<Net> nets_;
};

// proxy.trusted_proxies as a set; throws config::ConfigError naming the entry at fault.
TrustedProxies trusted_proxies_from(const std::vector<std::string>& networks);

// The canonical text of an address (IPv4-mapped IPv6 as IPv4), or nullopt when it is none.
std::optional<std::string> canonical_address(std::string_view text);

// The client's address. The socket peer, unless the peer is a trusted proxy: then the right-most
// X-Forwarded-For entry that is not a trusted proxy (all trusted: the left-most one). An entry that
// is not an address ends the walk at the hop that reported it. `xff` is every X-Forwarded-For
// field of the request joined with ','.
std::string client_address(std::string_view peer, std::string_view xff, const TrustedProxies& trusted);

// This hop's RFC 7239 forwarded-element, appended to `out`: for=<peer> (an IPv6 address quoted
// and bracketed, `for="[2001:db8::1]"`; no address: `for=unknown`), proto=http or https, and
// host=<host> when the request has one (a quoted-string, `\` before `"` and `\`, when it is not a
// token, as a host with a port is not). `peer` is the socket peer's address as text.
void append_forwarded_element(std::string& out, std::string_view peer, bool https, std::string_view host);
// Its two parts: "for=...;proto=...", and ";host=..." (nothing when `host` is empty).
void append_forwarded_for(std::string& out, std::string_view peer, bool https);
void append_forwarded_host(std::string& out, std::string_view host);

// The fields this hop sets for the upstream, each with its CRLF: "X-Real-IP: <real_ip>" and
// "Forwarded: [<kept>, ]for=<peer>;proto=<scheme>[;host=<host>]". `kept`: the Forwarded elements
// of a trusted proxy ("" none). From a peer that is no trusted proxy they change only with the
// Host, so a connection makes them again only when its requests' Host changes.
std::string hop_fields(std::string_view real_ip, std::string_view kept, std::string_view peer, bool https,
                       std::string_view host);

using MissingKey = config::MissingKey;  // limits.missing_key

inline constexpr std::size_t kMaxHeaderKey = 128;   // longer header keys are refused (400)
inline constexpr std::size_t kMaxKeyPath = 256;     // client_ip_path keeps this much of the path
inline constexpr std::string_view kAnonymous = "anonymous";

enum class KeyResult { ok, missing, too_long };

// The client key `spec` derives: "" for none, the address for client_ip, "<address> <path>" for
// client_ip_path, "h=<value>" for a header (kAnonymous when it is absent and the policy allows).
// `header` is the header's value, nullopt when the request has none.
KeyResult client_key(const config::KeySpec& spec, std::string_view address, std::string_view path,
                     std::optional<std::string_view> header, MissingKey missing, std::string& out);

}  // namespace tollgate::proxy

#include <gtest/gtest.h>

#include "tollgate/proxy/client_key.hpp"

namespace tollgate::proxy {
namespace {

TrustedProxies trusted(std::initializer_list<const char*> nets) {
  TrustedProxies t;
  for (const char* n : nets) EXPECT_FALSE(t.add(n).has_value()) << n;
  return t;
}

TEST(TrustedProxies, MatchesNetworksOfBothFamilies) {
  auto t = trusted({"10.0.0.0/8", "192.168.1.7", "fd00::/8", "::1"});
  EXPECT_TRUE(t.contains("10.200.3.4"));
  EXPECT_FALSE(t.contains("11.0.0.1"));
  EXPECT_TRUE(t.contains("192.168.1.7"));
  EXPECT_FALSE(t.contains("192.168.1.8"));
  EXPECT_TRUE(t.contains("fd12::1"));
  EXPECT_TRUE(t.contains("::1"));
  EXPECT_TRUE(t.contains("::ffff:10.1.2.3"));  // IPv4-mapped, as a dual-stack socket reports it
  EXPECT_FALSE(t.contains("not an address"));
}

TEST(TrustedProxies, RejectsWhatIsNotANetwork) {
  TrustedProxies t;
  EXPECT_TRUE(t.add("10.0.0.0/33").has_value());
  EXPECT_TRUE(t.add("banana").has_value());
  EXPECT_TRUE(t.add("10.0.0.0/").has_value());
  EXPECT_TRUE(t.empty());
}

TEST(ClientAddress, AnUntrustedPeerIsTheClientWhateverItSays) {
  auto t = trusted({"10.0.0.0/8"});
  EXPECT_EQ(client_address("203.0.113.9", "1.2.3.4", t), "203.0.113.9");   // spoofed header: ignored
  EXPECT_EQ(client_address("203.0.113.9", "", TrustedProxies{}), "203.0.113.9");
}

TEST(ClientAddress, RightMostUntrustedEntryBehindTrustedProxies) {
  auto t = trusted({"10.0.0.0/8"});
  // client -> 10.0.0.5 (LB) -> 10.0.0.9 (edge) -> gateway; the client spoofed "6.6.6.6".
  EXPECT_EQ(client_address("10.0.0.9", "6.6.6.6, 198.51.100.7, 10.0.0.5", t), "198.51.100.7");
  EXPECT_EQ(client_address("10.0.0.9", "198.51.100.7:5555", t), "198.51.100.7");  // with a port
  EXPECT_EQ(client_address("10.0.0.9", "[2001:db8::7]:443", t), "2001:db8::7");
  EXPECT_EQ(client_address("10.0.0.9", "10.1.1.1, 10.0.0.5", t), "10.1.1.1");  // all trusted: left-most
  EXPECT_EQ(client_address("10.0.0.9", "", t), "10.0.0.9");                     // no header: the peer
  // Garbage ends the walk at the hop that reported it.
  EXPECT_EQ(client_address("10.0.0.9", "198.51.100.7, <script>", t), "10.0.0.9");
  EXPECT_EQ(client_address("::ffff:10.0.0.9", "198.51.100.7", t), "198.51.100.7");
}

TEST(ClientKey, EachSpec) {
  using K = config::KeySpec::Kind;
  std::string key;
  EXPECT_EQ(client_key({K::none, ""}, "1.2.3.4", "/login", std::nullopt, MissingKey::anonymous, key), KeyResult::ok);
  EXPECT_EQ(key, "");
  client_key({K::client_ip, ""}, "1.2.3.4", "/login", std::nullopt, MissingKey::anonymous, key);
  EXPECT_EQ(key, "1.2.3.4");
  client_key({K::client_ip_path, ""}, "1.2.3.4", "/api/login", std::nullopt, MissingKey::anonymous, key);
  EXPECT_EQ(key, "1.2.3.4 /api/login");
  client_key({K::header, "X-Api-Key"}, "1.2.3.4", "/x", std::string_view(" k1 "), MissingKey::anonymous, key);
  EXPECT_EQ(key, "h=k1");
  EXPECT_EQ(client_key({K::header, "X-Api-Key"}, "1.2.3.4", "/x", std::nullopt, MissingKey::anonymous, key), KeyResult::ok);
  EXPECT_EQ(key, "anonymous");
  EXPECT_EQ(client_key({K::header, "X-Api-Key"}, "1.2.3.4", "/x", std::nullopt, MissingKey::reject, key),
            KeyResult::missing);
  const std::string huge(kMaxHeaderKey + 1, 'k');
  EXPECT_EQ(client_key({K::header, "X-Api-Key"}, "1.2.3.4", "/x", std::string_view(huge), MissingKey::anonymous, key),
            KeyResult::too_long);
  // A header value can never pose as the anonymous group.
  client_key({K::header, "X-Api-Key"}, "1.2.3.4", "/x", std::string_view("anonymous"), MissingKey::anonymous, key);
  EXPECT_EQ(key, "h=anonymous");
}

std::string forwarded(std::string_view peer, bool https, std::string_view host) {
  std::string out = "kept, ";
  append_forwarded_element(out, peer, https, host);
  return out;
}

TEST(Forwarded, AnElementForThisHop) {
  EXPECT_EQ(forwarded("192.0.2.60", false, "example.com"), "kept, for=192.0.2.60;proto=http;host=example.com");
  EXPECT_EQ(forwarded("192.0.2.60", true, ""), "kept, for=192.0.2.60;proto=https");  // no Host: no host=
  // RFC 7239 6: an IPv6 address is bracketed, and so quoted (':' is no token character).
  EXPECT_EQ(forwarded("2001:db8:cafe::17", false, "a.example"), "kept, for=\"[2001:db8:cafe::17]\";proto=http;host=a.example");
  EXPECT_EQ(forwarded("", false, "a.example"), "kept, for=unknown;proto=http;host=a.example");
}

TEST(Forwarded, AHostThatIsNoTokenIsQuoted) {
  EXPECT_EQ(forwarded("192.0.2.1", false, "api.example:8443"), "kept, for=192.0.2.1;proto=http;host=\"api.example:8443\"");
  EXPECT_EQ(forwarded("192.0.2.1", false, "[2001:db8::1]:80"), "kept, for=192.0.2.1;proto=http;host=\"[2001:db8::1]:80\"");
  // Whatever the Host holds cannot end the quoted-string or add a parameter.
  EXPECT_EQ(forwarded("192.0.2.1", false, "a\"b\\c;for=6.6.6.6"),
            "kept, for=192.0.2.1;proto=http;host=\"a\\\"b\\\\c;for=6.6.6.6\"");
}

TEST(Forwarded, TheFieldsOfThisHop) {
  // A peer that is no trusted proxy: its own address, and only this hop's element.
  EXPECT_EQ(hop_fields("192.0.2.60", "", "192.0.2.60", false, "a.example"),
            "X-Real-IP: 192.0.2.60\r\nForwarded: for=192.0.2.60;proto=http;host=a.example\r\n");
  // Behind a trusted proxy: the client it names, and its elements kept before this hop's.
  EXPECT_EQ(hop_fields("203.0.113.7", "for=203.0.113.7;proto=https", "2001:db8::1", true, ""),
            "X-Real-IP: 203.0.113.7\r\nForwarded: for=203.0.113.7;proto=https, for=\"[2001:db8::1]\";proto=https\r\n");
}

}  // namespace
}  // namespace tollgate::proxy

// The upstream fields of the gateway file: url or urls (names, IPv4 and IPv6 literals, a base
// path), dns_refresh_ms, eject, the top-level dns and the per-route overrides, each error naming
// its field.
#include <gtest/gtest.h>

#include "support/config_text.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

using testing::error_of;

std::string with(const std::string& upstream, const std::string& route_extra = "", const std::string& top = "") {
  return R"({)" + top + R"("upstreams":{"s":)" + upstream + R"(},"routes":[{"prefix":"/","upstream":"s")" + route_extra +
         "}]}";
}

TEST(UpstreamConfig, OneUrlIsOneTargetWithDefaults) {
  const GatewayConfig c = parse_gateway_config(with(R"({"url":"http://api.supplier.example"})"));
  const UpstreamConfig& u = c.upstreams.at(0);
  ASSERT_EQ(u.targets.size(), 1u);
  EXPECT_EQ(u.targets[0].host, "api.supplier.example");
  EXPECT_EQ(u.targets[0].port, 80);
  EXPECT_FALSE(u.targets[0].ip_literal);
  EXPECT_EQ(u.targets[0].host_header, "api.supplier.example");
  EXPECT_EQ(u.base_path, "");
  EXPECT_EQ(u.dns_refresh_ms, 5000u);
  EXPECT_EQ(u.eject.consecutive_failures, 5u);
  EXPECT_EQ(u.eject.base_ms, 30000u);
  EXPECT_EQ(u.eject.max_percent, 50u);
  EXPECT_TRUE(c.dns.servers.empty());
  EXPECT_FALSE(c.routes[0].strip_prefix);
  EXPECT_EQ(c.routes[0].connect_timeout_ms, 0u);
}

TEST(UpstreamConfig, UrlsAreTargetsInOrderWithTheirHostHeaders) {
  const GatewayConfig c = parse_gateway_config(
      with(R"({"urls":["http://10.0.0.1:8080","http://[::1]:9000","http://b.example"]})"));
  const UpstreamConfig& u = c.upstreams.at(0);
  ASSERT_EQ(u.targets.size(), 3u);
  EXPECT_TRUE(u.targets[0].ip_literal);
  EXPECT_EQ(u.targets[0].host_header, "10.0.0.1:8080");
  EXPECT_EQ(u.targets[1].host, "::1");
  EXPECT_TRUE(u.targets[1].ip_literal);
  EXPECT_EQ(u.targets[1].port, 9000);
  EXPECT_EQ(u.targets[1].host_header, "[::1]:9000");
  EXPECT_FALSE(u.targets[2].ip_literal);
  EXPECT_EQ(u.url, "http://10.0.0.1:8080");  // the first, for messages
}

TEST(UpstreamConfig, Ipv6LiteralWithoutPortTakesTheSchemesPort) {
  const GatewayConfig c = parse_gateway_config(with(R"({"url":"https://[2001:db8::7]"})"));
  EXPECT_EQ(c.upstreams[0].targets[0].port, 443);
  EXPECT_EQ(c.upstreams[0].targets[0].host_header, "[2001:db8::7]");
}

TEST(UpstreamConfig, BasePathIsKeptWithoutItsTrailingSlash) {
  EXPECT_EQ(parse_gateway_config(with(R"({"url":"https://api.example/v2/"})")).upstreams[0].base_path, "/v2");
  EXPECT_EQ(parse_gateway_config(with(R"({"url":"https://api.example/a/b"})")).upstreams[0].base_path, "/a/b");
  EXPECT_EQ(parse_gateway_config(with(R"({"url":"https://api.example/"})")).upstreams[0].base_path, "");
}

TEST(UpstreamConfig, BadUrlsAreRefusedNamingTheField) {
  EXPECT_EQ(error_of(with(R"({"url":"http://a","urls":["http://b"]})")), "upstreams.s.url: and .urls are both given: use one");
  EXPECT_EQ(error_of(with(R"({})")), "upstreams.s.url: (or .urls) is required");
  EXPECT_EQ(error_of(with(R"({"urls":[]})")), "upstreams.s.urls: must be a non-empty array of URLs");
  EXPECT_EQ(error_of(with(R"({"urls":["http://a:1","https://b:1"]})")),
            "upstreams.s.urls[1]: has another scheme than upstreams.s.urls[0]: one scheme per upstream");
  EXPECT_EQ(error_of(with(R"({"urls":["http://a:1/v1","http://b:1/v2"]})")),
            "upstreams.s.urls[1]: has another path than upstreams.s.urls[0]: one base path per upstream");
  EXPECT_EQ(error_of(with(R"({"urls":["http://a:1","http://a:1/"]})")), "upstreams.s.urls[1]: repeats http://a:1");
  EXPECT_EQ(error_of(with(R"({"url":"http://::1:80"})")),
            "upstreams.s.url: has an IPv6 literal without brackets ([::1]:port)");
  EXPECT_EQ(error_of(with(R"({"url":"http://[::1:80"})")), "upstreams.s.url: has an IPv6 literal without its closing ']'");
  EXPECT_EQ(error_of(with(R"({"url":"http://[zz]:80"})")), "upstreams.s.url: has an invalid IPv6 literal 'zz'");
  EXPECT_EQ(error_of(with(R"({"url":"http://u:p@a:80"})")), "upstreams.s.url: must not carry credentials (user@host)");
  EXPECT_EQ(error_of(with(R"({"url":"http://a/v?x=1"})")),
            "upstreams.s.url: has a path with a query, a fragment, an escape or a character outside visible ASCII");
  EXPECT_EQ(error_of(with(R"({"url":"ftp://a"})")), "upstreams.s.url: must start with http:// or https://");
  EXPECT_EQ(error_of(with(R"({"url":"http://a:0"})")), "upstreams.s.url: has an invalid port '0'");
}

TEST(UpstreamConfig, HttpsUrlsOfDifferentHostsNeedOneServerName) {
  EXPECT_EQ(error_of(with(R"({"urls":["https://a.example","https://b.example"]})")),
            "upstreams.s.tls.server_name: is required when the https URLs name different hosts (the certificate is "
            "checked for one name)");
  const GatewayConfig c = parse_gateway_config(
      with(R"({"urls":["https://a.example","https://b.example"],"tls":{"server_name":"api.example"}})"));
  EXPECT_EQ(c.upstreams[0].targets.size(), 2u);
}

TEST(UpstreamConfig, EjectDnsAndRouteFieldsAreRead) {
  const GatewayConfig c = parse_gateway_config(
      with(R"({"url":"http://a.example","dns_refresh_ms":1500,
               "eject":{"consecutive_failures":3,"base_ms":2000,"max_percent":34}})",
           R"(,"strip_prefix":true,"connect_timeout_ms":150,"response_timeout_ms":900)",
           R"("dns":{"servers":["127.0.0.1:5353","[::1]:53"]},)"));
  const UpstreamConfig& u = c.upstreams[0];
  EXPECT_EQ(u.dns_refresh_ms, 1500u);
  EXPECT_EQ(u.eject.consecutive_failures, 3u);
  EXPECT_EQ(u.eject.base_ms, 2000u);
  EXPECT_EQ(u.eject.max_percent, 34u);
  ASSERT_EQ(c.dns.servers.size(), 2u);
  EXPECT_EQ(c.dns.servers[0].host, "127.0.0.1");
  EXPECT_EQ(c.dns.servers[0].port, 5353);
  EXPECT_EQ(c.dns.servers[1].host, "::1");
  EXPECT_TRUE(c.routes[0].strip_prefix);
  EXPECT_EQ(c.routes[0].connect_timeout_ms, 150u);
  EXPECT_EQ(c.routes[0].response_timeout_ms, 900u);
}

TEST(UpstreamConfig, BadEjectDnsAndRouteFieldsAreRefused) {
  EXPECT_EQ(error_of(with(R"({"url":"http://a","dns_refresh_ms":999})")),
            "upstreams.s.dns_refresh_ms: must be within [1000, 86400000]");
  EXPECT_EQ(error_of(with(R"({"url":"http://a","eject":{"max_percent":101}})")),
            "upstreams.s.eject.max_percent: must be within [0, 100]");
  EXPECT_EQ(error_of(with(R"({"url":"http://a","eject":{"base":1}})")).rfind("upstreams.s.eject.base: ", 0), 0u);
  EXPECT_EQ(error_of(with(R"({"url":"http://a"})", "", R"("dns":{"servers":["resolver.example:53"]},)")),
            "dns.servers[0]: must be an IP address and port (a resolver is not found by name)");
  EXPECT_EQ(error_of(with(R"({"url":"http://a"})", R"(,"connect_timeout_ms":0)")),
            "routes[0].connect_timeout_ms: must be within [1, 600000]");
}

// upstreams.<name>.max_attempts, proxy.via_pseudonym and proxy.underscores_in_headers: their
// defaults, and each error naming its field.
TEST(UpstreamConfig, AttemptsViaAndUnderscoreFields) {
  const GatewayConfig d = parse_gateway_config(with(R"({"url":"http://a.example"})"));
  EXPECT_EQ(d.upstreams.at(0).max_attempts, 3u);
  EXPECT_EQ(d.proxy.underscores_in_headers, UnderscoreHeaders::drop);
  EXPECT_FALSE(d.proxy.via_pseudonym.empty());  // the host name (or "tollgate")
  const GatewayConfig c = parse_gateway_config(with(R"({"url":"http://a.example","max_attempts":16})", "",
                                                    R"("proxy":{"via_pseudonym":"edge-7.b","underscores_in_headers":"reject"},)"));
  EXPECT_EQ(c.upstreams.at(0).max_attempts, 16u);
  EXPECT_EQ(c.proxy.via_pseudonym, "edge-7.b");
  EXPECT_EQ(c.proxy.underscores_in_headers, UnderscoreHeaders::reject);
  EXPECT_EQ(error_of(with(R"({"url":"http://a.example","max_attempts":0})")),
            "upstreams.s.max_attempts: must be within [1, 16]");
  EXPECT_EQ(error_of(with(R"({"url":"http://a.example","max_attempts":17})")),
            "upstreams.s.max_attempts: must be within [1, 16]");
  EXPECT_EQ(error_of(with(R"({"url":"http://a.example"})", "", R"("proxy":{"underscores_in_headers":"keep"},)")),
            R"(proxy.underscores_in_headers: must be "drop", "reject" or "allow" (got "keep"))");
  EXPECT_EQ(error_of(with(R"({"url":"http://a.example"})", "", R"("proxy":{"via_pseudonym":""},)")),
            "proxy.via_pseudonym: must be 1 to 255 characters");
  EXPECT_EQ(error_of(with(R"({"url":"http://a.example"})", "", R"("proxy":{"via_pseudonym":"edge 7"},)")),
            "proxy.via_pseudonym: must be a token (letters, digits and !#$%&'*+-.^_`|~): 'edge 7'");
}

}  // namespace
}  // namespace tollgate::config

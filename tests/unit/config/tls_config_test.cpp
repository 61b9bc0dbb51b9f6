// The TLS fields of the gateway file: https:// upstreams verified by default, upstreams.<name>.tls
// and the listener's tls, each error naming its field.
#include <gtest/gtest.h>

#include "support/config_text.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

using testing::error_of;

std::string with_upstream(const std::string& upstream, const std::string& top = "") {
  return R"({)" + top + R"("upstreams":{"s":)" + upstream + R"(},"routes":[{"prefix":"/","upstream":"s"}]})";
}

TEST(TlsConfig, HttpsUrlIsVerifiedByDefaultOnPort443) {
  const GatewayConfig c = parse_gateway_config(with_upstream(R"({"url":"https://api.supplier.example"})"));
  const UpstreamConfig& u = c.upstreams.at(0);
  EXPECT_TRUE(u.https);
  EXPECT_EQ(u.host, "api.supplier.example");
  EXPECT_EQ(u.port, 443);
  EXPECT_FALSE(u.tls.insecure_skip_verify);
  EXPECT_EQ(u.tls.ca_file, "");      // the system store
  EXPECT_EQ(u.tls.server_name, "");  // the URL's host
  EXPECT_EQ(u.tls.min_version, TlsVersion::tls1_2);
  EXPECT_FALSE(c.tls.enabled());
  const GatewayConfig plain = parse_gateway_config(with_upstream(R"({"url":"http://api.supplier.example"})"));
  EXPECT_FALSE(plain.upstreams.at(0).https);
  EXPECT_EQ(plain.upstreams.at(0).port, 80);
}

TEST(TlsConfig, EveryFieldIsRead) {
  const GatewayConfig c = parse_gateway_config(with_upstream(
      R"({"url":"https://10.0.0.7:8443/","tls":{"ca_file":"/etc/ca.pem","server_name":"api.example",
          "cert_file":"/etc/c.pem","key_file":"/etc/c.key","min_version":"1.3"}})",
      R"("tls":{"cert_file":"/etc/l.pem","key_file":"/etc/l.key"},)"));
  const UpstreamConfig& u = c.upstreams.at(0);
  EXPECT_EQ(u.port, 8443);
  EXPECT_EQ(u.host, "10.0.0.7");
  EXPECT_EQ(u.tls.ca_file, "/etc/ca.pem");
  EXPECT_EQ(u.tls.server_name, "api.example");
  EXPECT_EQ(u.tls.cert_file, "/etc/c.pem");
  EXPECT_EQ(u.tls.key_file, "/etc/c.key");
  EXPECT_EQ(u.tls.min_version, TlsVersion::tls1_3);
  EXPECT_TRUE(c.tls.enabled());
  EXPECT_EQ(c.tls.cert_file, "/etc/l.pem");
  EXPECT_EQ(c.tls.key_file, "/etc/l.key");
}

TEST(TlsConfig, InsecureOnlyWhenWrittenSo) {
  const GatewayConfig c =
      parse_gateway_config(with_upstream(R"({"url":"https://x","tls":{"insecure_skip_verify":true}})"));
  EXPECT_TRUE(c.upstreams.at(0).tls.insecure_skip_verify);
  EXPECT_EQ(error_of(with_upstream(R"({"url":"https://x","tls":{"insecure_skip_verify":"yes"}})")),
            "upstreams.s.tls.insecure_skip_verify: must be true or false");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"https://x","tls":{"insecure_skip_verify":true,"ca_file":"/a"}})")),
            "upstreams.s.tls.insecure_skip_verify: true with a ca_file: say which one you mean");
}

TEST(TlsConfig, ErrorsNameTheField) {
  EXPECT_EQ(error_of(with_upstream(R"({"url":"ftp://x"})")), "upstreams.s.url: must start with http:// or https://");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"http://x","tls":{"ca_file":"/a"}})")),
            "upstreams.s.tls: needs an https:// url (upstreams.s.url is http://x)");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"https://x","tls":{"cert_file":"/a"}})")),
            "upstreams.s.tls.key_file: is required with upstreams.s.tls.cert_file");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"https://x","tls":{"key_file":"/a"}})")),
            "upstreams.s.tls.cert_file: is required with upstreams.s.tls.key_file");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"https://x","tls":{"min_version":"1.1"}})")),
            "upstreams.s.tls.min_version: must be \"1.2\" or \"1.3\" (got \"1.1\")");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"https://x","tls":{"verify":false}})")), "upstreams.s.tls.verify: unknown field");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"https://x:0"})")), "upstreams.s.url: has an invalid port '0'");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"http://x"})", R"("tls":{"cert_file":"/a"},)")), "tls.key_file: is required");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"http://x"})", R"("tls":{"key_file":"/a"},)")), "tls.cert_file: is required");
  EXPECT_EQ(error_of(with_upstream(R"({"url":"http://x"})", R"("tls":{"cert":"/a"},)")), "tls.cert: unknown field");
}

}  // namespace
}  // namespace tollgate::config

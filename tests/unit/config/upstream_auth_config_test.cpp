// upstreams.<name>.auth: the static header (from the environment or a file readable by its owner
// only) and OAuth2 client credentials with the internal upstream that carries their token
// requests; each error names its field, and no secret appears in an error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "support/config_text.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

using testing::error_of;

std::string with_auth(const std::string& auth, const std::string& url = "https://api.supplier.example") {
  return R"({"upstreams":{"s":{"url":")" + url + R"(","auth":)" + auth +
         R"(}},"routes":[{"prefix":"/","upstream":"s"}]})";
}

class UpstreamAuthFields : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("TG_TEST_KEY", "k-123 secret", 1);
    ::setenv("TG_TEST_CID", "cid", 1);
    ::setenv("TG_TEST_CSECRET", "s3cr3t", 1);
    ::unsetenv("TG_TEST_UNSET");
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
  }
  std::string file_with(const std::string& text, mode_t mode) {
    char name[] = "/tmp/tollgate-auth-key-XXXXXX";
    const int fd = ::mkstemp(name);
    EXPECT_GE(fd, 0);
    ::close(fd);
    files_.push_back(name);
    std::ofstream(name, std::ios::binary) << text;
    ::chmod(name, mode);
    return name;
  }
  std::vector<std::string> files_;
};

TEST_F(UpstreamAuthFields, AHeaderFromTheEnvironment) {
  const GatewayConfig c =
      parse_gateway_config(with_auth(R"({"type":"header","name":"X-Api-Key","value_env":"TG_TEST_KEY"})"));
  ASSERT_EQ(c.upstreams.size(), 1u);  // no internal upstream for a static header
  const UpstreamAuthConfig& a = c.upstreams[0].auth;
  EXPECT_EQ(a.type, AuthType::header);
  EXPECT_EQ(a.name, "X-Api-Key");
  EXPECT_EQ(a.value, "k-123 secret");
}

TEST_F(UpstreamAuthFields, AHeaderFromAFileOfMode0600WithoutItsLineEnd) {
  const std::string f = file_with("file-key\n", 0600);
  const GatewayConfig c =
      parse_gateway_config(with_auth(R"({"type":"header","name":"X-Api-Key","value_file":")" + f + R"("})"));
  EXPECT_EQ(c.upstreams[0].auth.value, "file-key");
  const std::string f4 = file_with("owner-only", 0400);
  EXPECT_EQ(parse_gateway_config(with_auth(R"({"type":"header","name":"K","value_file":")" + f4 + R"("})"))
                .upstreams[0].auth.value,
            "owner-only");
}

TEST_F(UpstreamAuthFields, AFileOthersCanReadIsRefusedNamingTheFileAndNotItsContent) {
  for (const mode_t mode : {0644, 0640, 0604, 0660}) {
    const std::string f = file_with("leaky-key", mode);
    const std::string e = error_of(with_auth(R"({"type":"header","name":"X-Api-Key","value_file":")" + f + R"("})"));
    EXPECT_NE(e.find("upstreams.s.auth.value_file"), std::string::npos) << e;
    EXPECT_NE(e.find(f), std::string::npos) << e;
    EXPECT_NE(e.find("0600 or stricter"), std::string::npos) << e;
    EXPECT_EQ(e.find("leaky-key"), std::string::npos) << e;
  }
  EXPECT_NE(error_of(with_auth(R"({"type":"header","name":"K","value_file":"/nonexistent/key"})")).find("/nonexistent/key"),
            std::string::npos);
}

TEST_F(UpstreamAuthFields, HeaderErrorsNameTheirField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"name":"X","value_env":"TG_TEST_KEY"})", "upstreams.s.auth.type: is required"},
      {R"({"type":"basic","name":"X","value_env":"TG_TEST_KEY"})", "upstreams.s.auth.type: must be"},
      {R"({"type":"header","value_env":"TG_TEST_KEY"})", "upstreams.s.auth.name: is required"},
      {R"({"type":"header","name":"X Y","value_env":"TG_TEST_KEY"})", "upstreams.s.auth.name: is not a field name"},
      {R"({"type":"header","name":"Host","value_env":"TG_TEST_KEY"})", "upstreams.s.auth.name: 'Host' is a field the gateway"},
      {R"({"type":"header","name":"x-forwarded-for","value_env":"TG_TEST_KEY"})", "upstreams.s.auth.name"},
      {R"({"type":"header","name":"X"})", "upstreams.s.auth.value_env: (or .value_file) is required"},
      {R"({"type":"header","name":"X","value_env":"TG_TEST_KEY","value_file":"/x"})", "are both given"},
      {R"({"type":"header","name":"X","value_env":"TG_TEST_UNSET"})", "TG_TEST_UNSET, which is not set"},
      {R"({"type":"header","name":"X","value_env":"TG_TEST_KEY","token_url":"https://a/t"})",
       "upstreams.s.auth.token_url: does not apply to type \"header\""},
      {R"({"type":"header","name":"X","value_env":"TG_TEST_KEY","extra":1})", "upstreams.s.auth.extra: unknown field"},
  };
  for (const auto& [auth, want] : cases) {
    const std::string e = error_of(with_auth(auth));
    EXPECT_NE(e.find(want), std::string::npos) << auth << " -> " << e;
  }
}

TEST_F(UpstreamAuthFields, AValueWithALineBreakIsRefused) {
  ::setenv("TG_TEST_KEY", "a\r\nX-Injected: 1", 1);
  const std::string e = error_of(with_auth(R"({"type":"header","name":"X","value_env":"TG_TEST_KEY"})"));
  EXPECT_NE(e.find("control character"), std::string::npos) << e;
  EXPECT_EQ(e.find("X-Injected"), std::string::npos) << e;
}

TEST_F(UpstreamAuthFields, OAuth2MakesItsTokenUpstreamWithTheUpstreamsTrust) {
  const GatewayConfig c = parse_gateway_config(R"({"upstreams":{"s":{"url":"https://api.supplier.example",
      "tls":{"ca_file":"/etc/ca.pem","server_name":"api.supplier.example","cert_file":"/c.pem","key_file":"/k.pem"},
      "auth":{"type":"oauth2_client_credentials","token_url":"https://auth.supplier.example:8443/oauth2/token",
              "client_id_env":"TG_TEST_CID","client_secret_env":"TG_TEST_CSECRET","scope":"read write"}}},
      "routes":[{"prefix":"/","upstream":"s"}]})");
  ASSERT_EQ(c.upstreams.size(), 2u);
  const UpstreamAuthConfig& a = c.upstreams[0].auth;
  EXPECT_EQ(a.type, AuthType::oauth2_client_credentials);
  EXPECT_EQ(a.client_id, "cid");
  EXPECT_EQ(a.client_secret, "s3cr3t");
  EXPECT_EQ(a.scope, "read write");
  EXPECT_TRUE(a.basic);
  EXPECT_EQ(a.refresh_before_s, 60u);
  EXPECT_DOUBLE_EQ(a.token_rate, 1.0);
  const UpstreamConfig& t = c.upstreams[1];
  EXPECT_EQ(t.name, "s.token");
  EXPECT_EQ(a.token_upstream, "s.token");
  EXPECT_EQ(t.token_endpoint_of, "s");
  EXPECT_TRUE(t.https);
  EXPECT_EQ(t.host, "auth.supplier.example");
  EXPECT_EQ(t.port, 8443);
  EXPECT_EQ(t.base_path, "/oauth2/token");
  // Another host: the system's trust and its own name, nothing of the supplier's tls object.
  EXPECT_EQ(t.tls, UpstreamTlsConfig{});
  EXPECT_EQ(t.auth.type, AuthType::none);
}

TEST_F(UpstreamAuthFields, TheSuppliersTlsGoesOnlyToItsOwnHostAndPortAndInsecureNeverToAnother) {
  const auto token_tls = [](const std::string& token_url) {
    return parse_gateway_config(R"({"upstreams":{"s":{"url":"https://api.supplier.example",
        "tls":{"insecure_skip_verify":true},
        "auth":{"type":"oauth2_client_credentials","token_url":")" + token_url + R"(",
                "client_id_env":"TG_TEST_CID","client_secret_env":"TG_TEST_CSECRET"}}},
        "routes":[{"prefix":"/","upstream":"s"}]})").upstreams[1].tls;
  };
  EXPECT_TRUE(token_tls("https://api.supplier.example/oauth2/token").insecure_skip_verify);
  EXPECT_FALSE(token_tls("https://login.idp.example/oauth2/token").insecure_skip_verify);
  EXPECT_FALSE(token_tls("https://api.supplier.example:8443/oauth2/token").insecure_skip_verify);
}

TEST_F(UpstreamAuthFields, TheTokenPathIsKeptAsWritten) {
  const auto path = [](const std::string& token_url) {
    return parse_gateway_config(R"({"upstreams":{"s":{"url":"https://api.supplier.example",
        "auth":{"type":"oauth2_client_credentials","token_url":")" + token_url + R"(",
                "client_id_env":"TG_TEST_CID","client_secret_env":"TG_TEST_CSECRET"}}},
        "routes":[{"prefix":"/","upstream":"s"}]})").upstreams[1].base_path;
  };
  EXPECT_EQ(path("https://idp.example/oauth2/token"), "/oauth2/token");
  EXPECT_EQ(path("https://idp.example/realms/x/token/"), "/realms/x/token/");
}

TEST_F(UpstreamAuthFields, OAuth2Errors) {
  const std::string ids = R"("client_id_env":"TG_TEST_CID","client_secret_env":"TG_TEST_CSECRET")";
  const std::string o2 = R"({"type":"oauth2_client_credentials",)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {o2 + ids + "}", "upstreams.s.auth.token_url: is required"},
      {o2 + R"("token_url":"http://auth.example/t",)" + ids + "}", "upstreams.s.auth.token_url: must be https://"},
      {o2 + R"("token_url":"https://auth.example",)" + ids + "}", "upstreams.s.auth.token_url: has no path"},
      {o2 + R"("token_url":"https://a/t","client_secret_env":"TG_TEST_CSECRET"})", "upstreams.s.auth.client_id_env: is required"},
      {o2 + R"("token_url":"https://a/t","client_id_env":"TG_TEST_CID","client_secret_env":"TG_TEST_UNSET"})",
       "upstreams.s.auth.client_secret_env: names TG_TEST_UNSET"},
      {o2 + R"("token_url":"https://a/t","auth_style":"header",)" + ids + "}", "upstreams.s.auth.auth_style: must be"},
      {o2 + R"("token_url":"https://a/t","token_rate":0,)" + ids + "}", "upstreams.s.auth.token_rate: must be a number"},
      {o2 + R"("token_url":"https://a/t","name":"X",)" + ids + "}", "upstreams.s.auth.name: does not apply"},
  };
  for (const auto& [auth, want] : cases) {
    const std::string e = error_of(with_auth(auth));
    EXPECT_NE(e.find(want), std::string::npos) << auth << " -> " << e;
    EXPECT_EQ(e.find("s3cr3t"), std::string::npos) << e;
  }
  // Plain HTTP only to a loopback address (a test's, or a sidecar's).
  EXPECT_EQ(parse_gateway_config(with_auth(o2 + R"("token_url":"http://127.0.0.1:9/t",)" + ids + "}"))
                .upstreams[1].https,
            false);
  // The internal name is taken by another upstream: refused, naming both.
  const std::string e = error_of(R"({"upstreams":{"s":{"url":"http://127.0.0.1:1","auth":)" + o2 +
                                 R"("token_url":"http://127.0.0.1:9/t",)" + ids +
                                 R"(}},"s.token":{"url":"http://127.0.0.1:2"}},"routes":[{"prefix":"/","upstream":"s"}]})");
  EXPECT_NE(e.find("upstreams.s.auth"), std::string::npos) << e;
  // And no route may send requests to it.
  const std::string r = error_of(R"({"upstreams":{"s":{"url":"http://127.0.0.1:1","auth":)" + o2 +
                                 R"("token_url":"http://127.0.0.1:9/t",)" + ids +
                                 R"(}}},"routes":[{"prefix":"/","upstream":"s.token"}]})");
  EXPECT_NE(r.find("routes[0].upstream: names no upstream"), std::string::npos) << r;
}

}  // namespace
}  // namespace tollgate::config

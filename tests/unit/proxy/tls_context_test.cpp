// TLS profiles without a handshake: failure reasons in words, and files refused with their path
// and reason (a missing CA file, a world-readable key, a certificate that is no certificate).
#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/tls_context.hpp"

namespace tollgate::proxy {
namespace {

TEST(TlsFailure, VerifyErrorsInWords) {
  EXPECT_EQ(describe_verify_error(X509_V_ERR_CERT_HAS_EXPIRED, {}).words, "certificate has expired");
  EXPECT_EQ(describe_verify_error(X509_V_ERR_CERT_HAS_EXPIRED, {}).reason, "expired");
  const TlsFailure mismatch = describe_verify_error(X509_V_ERR_HOSTNAME_MISMATCH, {"evil.example", "10.1.2.3"});
  EXPECT_EQ(mismatch.words, "hostname mismatch: certificate is for evil.example, 10.1.2.3");
  EXPECT_EQ(mismatch.reason, "hostname_mismatch");
  EXPECT_EQ(describe_verify_error(X509_V_ERR_IP_ADDRESS_MISMATCH, {"127.0.0.2"}).reason, "hostname_mismatch");
  for (long e : {X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT,
                 X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN, X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE}) {
    EXPECT_EQ(describe_verify_error(e, {}).words, "unknown certificate authority") << e;
    EXPECT_EQ(describe_verify_error(e, {}).reason, "unknown_ca") << e;
  }
  EXPECT_EQ(describe_verify_error(X509_V_ERR_CERT_NOT_YET_VALID, {}).reason, "not_yet_valid");
  const TlsFailure other = describe_verify_error(X509_V_ERR_CERT_REVOKED, {});
  EXPECT_EQ(other.reason, "verify_failed");
  EXPECT_EQ(other.words, "certificate verify failed: certificate revoked");
}

// A certificate's text is printed as it is only when it is printable ASCII: a NUL, an escape
// sequence or a line break in a name reads as such (a name cut at its NUL would read as another).
TEST(TlsFailure, CertificateTextIsEscapedWhereItIsNotPrintable) {
  EXPECT_EQ(escape_cert_text("api.example"), "api.example");
  EXPECT_EQ(escape_cert_text(std::string_view("localhost\0.evil.example", 23)), "localhost\\x00.evil.example");
  EXPECT_EQ(escape_cert_text("\x1b]0;owned\x07x"), "\\x1B]0;owned\\x07x");
  EXPECT_EQ(escape_cert_text("a\r\nb\\c\xc3\xa9"), "a\\x0D\\x0Ab\\x5Cc\\xC3\\xA9");
}

TEST(TlsFailure, NoErrorAtAllIsAClosedConnection) {
  EXPECT_EQ(describe_tls_failure(nullptr, 0).words, "handshake failure: connection closed by peer");
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/tollgate-tls-unit-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
  std::string file(const std::string& name, const std::string& text, mode_t mode = 0600) const {
    const std::string p = path + "/" + name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  }
};

config::UpstreamConfig https_upstream() {
  config::UpstreamConfig u;
  u.name = "s";
  u.url = "https://localhost";
  u.host = "localhost";
  u.port = 443;
  u.https = true;
  u.targets.push_back({u.url, u.host, u.port, false, u.host});
  return u;
}

std::string load_error(const config::UpstreamConfig& u) {
  try {
    TlsClientProfile::load(u);
  } catch (const TlsLoadError& e) {
    return e.what();
  }
  return "";
}

TEST(TlsClientProfile, SystemStoreByDefaultVerifyOn) {
  const auto p = TlsClientProfile::load(https_upstream());
  EXPECT_FALSE(p->insecure());
  EXPECT_EQ(p->server_name(), "localhost");
  EXPECT_FALSE(p->name_is_ip());
  EXPECT_FALSE(p->has_client_cert());
  auto ip = https_upstream();
  ip.host = "127.0.0.1";
  EXPECT_TRUE(TlsClientProfile::load(ip)->name_is_ip());
  ip.tls.server_name = "api.example";
  EXPECT_EQ(TlsClientProfile::load(ip)->server_name(), "api.example");
  EXPECT_FALSE(TlsClientProfile::load(ip)->name_is_ip());
  // Every load is a new profile: pooled connections of the old one are not reused.
  EXPECT_NE(TlsClientProfile::load(ip)->generation(), TlsClientProfile::load(ip)->generation());
}

TEST(TlsClientProfile, FilesRefusedWithPathAndReason) {
  TempDir d;
  auto u = https_upstream();
  u.tls.ca_file = d.path + "/missing.pem";
  const std::string missing = load_error(u);
  EXPECT_NE(missing.find("upstream s: " + u.tls.ca_file), std::string::npos) << missing;
  u.tls.ca_file = d.file("garbage.pem", "not a certificate\n");
  EXPECT_NE(load_error(u).find(u.tls.ca_file), std::string::npos) << load_error(u);
  u.tls.ca_file.clear();
  u.tls.cert_file = d.file("c.pem", "not a certificate\n");
  u.tls.key_file = d.file("c.key", "not a key\n", 0644);
  const std::string readable = load_error(u);
  EXPECT_NE(readable.find(u.tls.key_file + ": private key is readable by every user (mode 644)"), std::string::npos)
      << readable;
  ::chmod(u.tls.key_file.c_str(), 0600);
  EXPECT_NE(load_error(u).find(u.tls.cert_file), std::string::npos) << load_error(u);
}

TEST(TlsProfiles, AGatewayWithoutTlsHasNone) {
  config::GatewayConfig cfg;
  config::UpstreamConfig plain;
  plain.name = "p";
  cfg.upstreams.push_back(plain);
  Metrics metrics;
  TlsProfiles profiles(cfg, metrics);
  EXPECT_FALSE(profiles.any());
  EXPECT_EQ(profiles.upstream("p"), nullptr);
  EXPECT_EQ(profiles.listener(), nullptr);
  EXPECT_TRUE(profiles.reload().reloaded.empty());
}

// A SIGHUP's new upstream list: an unchanged upstream keeps its TLS (profile, counters), a changed
// one is loaded anew, a file that does not load refuses the whole list and nothing changes.
TEST(TlsProfiles, PrepareKeepsTheUnchangedLoadsTheChangedAndRefusesABadFile) {
  TempDir d;
  config::GatewayConfig cfg;
  cfg.upstreams.push_back(https_upstream());
  Metrics metrics;
  TlsProfiles profiles(cfg, metrics);
  const std::shared_ptr<UpstreamTls> running = profiles.upstream("s");
  ASSERT_NE(running, nullptr);

  config::UpstreamConfig other = https_upstream();
  other.name = "t";
  config::UpstreamConfig plain;
  plain.name = "p";
  auto next = profiles.prepare({https_upstream(), plain, other});
  ASSERT_EQ(next.size(), 3u);
  EXPECT_EQ(next[0], running);  // unchanged: the same one
  EXPECT_EQ(next[1], nullptr);  // plain http
  ASSERT_NE(next[2], nullptr);
  EXPECT_EQ(profiles.upstream("t"), nullptr);  // prepared, not yet running
  profiles.adopt(next);
  EXPECT_EQ(profiles.upstream("t"), next[2]);
  EXPECT_EQ(profiles.status().size(), 2u);

  config::UpstreamConfig changed = https_upstream();
  changed.tls.server_name = "api.example";
  const auto renamed = profiles.prepare({changed});
  ASSERT_EQ(renamed.size(), 1u);
  EXPECT_NE(renamed[0], running);  // what a connection to it is made with changed
  EXPECT_EQ(renamed[0]->profile()->server_name(), "api.example");

  config::UpstreamConfig broken = https_upstream();
  broken.tls.ca_file = d.path + "/missing.pem";
  EXPECT_THROW(profiles.prepare({https_upstream(), broken}), TlsLoadError);
  EXPECT_EQ(profiles.upstream("s"), running);  // nothing adopted
  EXPECT_EQ(profiles.upstream("t"), next[2]);
}

TEST(TlsProfiles, ListenerKeyMustNotBeWorldReadable) {
  TempDir d;
  config::GatewayConfig cfg;
  cfg.upstreams.push_back(https_upstream());
  cfg.tls.cert_file = d.file("l.pem", "x");
  cfg.tls.key_file = d.file("l.key", "x", 0604);
  Metrics metrics;
  try {
    TlsProfiles profiles(cfg, metrics);
    FAIL() << "a world-readable listener key was accepted";
  } catch (const TlsLoadError& e) {
    EXPECT_NE(std::string(e.what()).find("tls: " + cfg.tls.key_file + ": private key is readable by every user"),
              std::string::npos)
        << e.what();
  }
}

// A resumable session of `version` whose id is `id` (what a server would have issued).
SSL_SESSION* session(int version, unsigned char id) {
  SSL_SESSION* s = SSL_SESSION_new();
  SSL_SESSION_set_protocol_version(s, version);
  const unsigned char sid[1] = {id};
  SSL_SESSION_set1_id(s, sid, 1);
  return s;
}

unsigned char id_of(SSL_SESSION* s) {
  unsigned int len = 0;
  const unsigned char* id = SSL_SESSION_get_id(s, &len);
  return len ? id[0] : 0;
}

TEST(TlsSessionCache, Tls13TicketsAreOfferedOnceNewestFirstAndTheLastKept) {
  TlsSessionCache c;
  EXPECT_EQ(c.take(1), nullptr);
  c.add(session(TLS1_3_VERSION, 1));
  c.add(session(TLS1_3_VERSION, 2));
  c.add(session(TLS1_3_VERSION, 3));
  SSL_SESSION* a = c.take(1);
  SSL_SESSION* b = c.take(1);
  EXPECT_EQ(id_of(a), 3);  // each once while others remain
  EXPECT_EQ(id_of(b), 2);
  SSL_SESSION* last = c.take(1);
  SSL_SESSION* again = c.take(1);
  EXPECT_EQ(id_of(last), 1);
  EXPECT_EQ(last, again);  // the last one is offered again rather than a full handshake
  EXPECT_EQ(c.size(), 1u);
  for (SSL_SESSION* s : {a, b, last, again}) SSL_SESSION_free(s);
}

TEST(TlsSessionCache, Tls12SessionIsReusedAndReplaced) {
  TlsSessionCache c;
  c.add(session(TLS1_2_VERSION, 7));
  SSL_SESSION* a = c.take(1);
  SSL_SESSION* b = c.take(1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a, b);  // the same session for every new connection
  SSL_SESSION_free(a);
  SSL_SESSION_free(b);
  c.add(session(TLS1_2_VERSION, 8));
  EXPECT_EQ(c.size(), 1u);
  SSL_SESSION* d = c.take(1);
  EXPECT_EQ(id_of(d), 8);
  SSL_SESSION_free(d);
}

TEST(TlsSessionCache, BoundedAndDroppedWhenTheProfileChanges) {
  TlsSessionCache c;
  EXPECT_EQ(c.take(5), nullptr);
  for (unsigned char i = 1; i <= TlsSessionCache::kMax + 4; ++i) c.add(session(TLS1_3_VERSION, i));
  EXPECT_EQ(c.size(), TlsSessionCache::kMax);  // the oldest went
  SSL_SESSION* newest = c.take(5);
  EXPECT_EQ(id_of(newest), TlsSessionCache::kMax + 4);
  SSL_SESSION_free(newest);
  EXPECT_EQ(c.take(6), nullptr);  // a reload: another profile's sessions are not offered
  EXPECT_EQ(c.size(), 0u);
}

}  // namespace
}  // namespace tollgate::proxy

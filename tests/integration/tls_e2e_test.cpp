// HTTPS end to end, with real TLS servers: the real gateway in front of nginx (a third-party TLS
// server) and of the mock upstream serving TLS, certificates from a private CA made at run time
// (tests/support/tls_pki.sh). Verification is on by default and each failure gives its 502 and its
// counted reason without reaching the upstream; mTLS; sessions resumed; throttling exactly as on
// plain HTTP; the HTTPS listener's defined outcomes for hostile clients; reload without a restart;
// and tollgate --check --probe.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/stack.hpp"
#include "support/tls.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// The mock upstream serving HTTPS with the given certificate (and requiring a client certificate
// when `client_ca` is given). Its own endpoints (/__stats) are read over HTTPS too.
struct TlsMock {
  std::unique_ptr<Process> proc;
  int port = -1;
  TlsMock(const std::string& cert, const std::string& key, const std::string& client_ca = "",
          std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{TOLLGATE_MOCK_BIN, "--port", "0", "--tls-cert", cert, "--tls-key", key};
    if (!client_ca.empty()) argv.insert(argv.end(), {"--tls-client-ca", client_ca});
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(argv);
    if (auto line = proc->wait_for_line("listening on", 10s)) port = port_from_line(*line);
  }
  json stats() const {
    TlsClientOptions o;
    o.client_cert = test_pki().client_cert;
    o.client_key = test_pki().client_key;
    return json::parse(https_get(port, "/__stats", o).body);
  }
  int count(const std::string& path) const {
    const json s = stats();
    return s["paths"].contains(path) ? s["paths"][path]["count"].get<int>() : 0;
  }
};

// The base config with upstream "ibe" at https://localhost:<port> and `tls` as its tls object.
json https_config(int port, const json& tls = json::object(), const std::string& host = "localhost") {
  json c = base_config(port);
  c["upstreams"]["ibe"]["url"] = "https://" + host + ":" + std::to_string(port);
  if (!tls.empty()) c["upstreams"]["ibe"]["tls"] = tls;
  return c;
}

json ca_only() { return {{"ca_file", test_pki().ca}}; }

// A labelled series' value in /metrics (-1 if absent); `labels` as Prometheus prints them.
double series(const GatewayProcess& gw, const std::string& name, const std::string& labels) {
  const std::string m = http_get(gw.admin_port, "/metrics").body;
  const std::string key = "\n" + name + "{" + labels + "} ";
  const auto at = m.find(key);
  return at == std::string::npos ? -1 : std::stod(m.substr(at + key.size()));
}

class TlsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NginxTls::available()) {
      // scripts/test.sh installs it: under CI a missing nginx is a failure, not a silent skip.
      if (std::getenv("CI")) FAIL() << "nginx is not installed (scripts/deps.sh test installs nginx-light)";
      GTEST_SKIP() << "nginx is not installed (scripts/deps.sh test installs nginx-light)";
    }
    (void)test_pki();
  }
};

// ---- verified by default -----------------------------------------------------------------------

TEST_F(TlsE2E, HttpsUrlWorksVerifiedWithNothingElseSet) {
  NginxTls nginx;
  // No tls object at all: the system store, which the test points at its private CA the way an
  // operator's distribution would hold a public one (OpenSSL reads SSL_CERT_FILE).
  GatewayProcess gw(https_config(nginx.port), {{"SSL_CERT_FILE", test_pki().ca}});
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const HttpResponse r = http_get(gw.port, "/ibe/anything");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["path"], "/ibe/anything");
  // The same file without that CA trusted: refused, not forwarded.
  GatewayProcess untrusting(https_config(nginx.port), {{"SSL_CERT_FILE", test_pki().other_ca}});
  ASSERT_GT(untrusting.port, 0) << untrusting.proc->output();
  const HttpResponse refused = http_get(untrusting.port, "/ibe/other");
  EXPECT_EQ(refused.status, 502) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"], "upstream_tls_failed");
  ASSERT_TRUE(nginx.wait_for_lines(1));
  EXPECT_EQ(nginx.access_lines().size(), 1u);  // only the verified gateway's request arrived
}

struct FailureCase {
  const char* name;
  std::string cert, key;
  json tls;
  std::string nginx_protocols;
  const char* reason;
  const char* words;
};

TEST_F(TlsE2E, EachFailureIsA502NamingItsCauseAndNeverReachesTheUpstream) {
  const TestPki& pki = test_pki();
  const std::vector<FailureCase> cases = {
      {"expired", pki.expired_cert, pki.expired_key, ca_only(), "TLSv1.2 TLSv1.3", "expired", "certificate has expired"},
      {"wrong name", pki.wrongname_cert, pki.wrongname_key, ca_only(), "TLSv1.2 TLSv1.3", "hostname_mismatch",
       "hostname mismatch: certificate is for evil.example"},
      // The right name in the CN only: not a name (OpenSSL alone would accept it; browsers and Go do not).
      {"name in the CN only", pki.cnonly_cert, pki.cnonly_key, ca_only(), "TLSv1.2 TLSv1.3", "hostname_mismatch",
       "hostname mismatch: certificate is for CN=localhost (no subjectAltName: not accepted)"},
      {"unknown CA", pki.unknownca_cert, pki.unknownca_key, ca_only(), "TLSv1.2 TLSv1.3", "unknown_ca",
       "unknown certificate authority"},
      {"protocol version", pki.server_cert, pki.server_key, {{"ca_file", pki.ca}, {"min_version", "1.3"}}, "TLSv1.2",
       "protocol_version", "handshake failure: protocol version"},
  };
  for (const FailureCase& c : cases) {
    SCOPED_TRACE(c.name);
    NginxTlsOptions o;
    o.cert = c.cert;
    o.key = c.key;
    o.protocols = c.nginx_protocols;
    NginxTls nginx(o);
    GatewayProcess gw(https_config(nginx.port, c.tls));
    ASSERT_GT(gw.port, 0) << gw.proc->output();
    const HttpResponse r = http_get(gw.port, "/ibe/shopping/search");
    EXPECT_EQ(r.status, 502) << r.body;
    const json body = json::parse(r.body);
    EXPECT_EQ(body["error"], "upstream_tls_failed");
    EXPECT_EQ(body["detail"], std::string("upstream 'ibe': TLS: ") + c.words);
    // Counted once under its reason: one request, one attempt (no retry to the same endpoint).
    EXPECT_EQ(series(gw, "tollgate_upstream_tls_failures_total", std::string("reason=\"") + c.reason + "\",upstream=\"ibe\""), 1);
    EXPECT_EQ(series(gw, "tollgate_upstream_tls_handshakes_total", "resumed=\"false\",upstream=\"ibe\""), 0);
    std::this_thread::sleep_for(100ms);  // nginx logs a request just after answering it; none came
    EXPECT_TRUE(nginx.access_lines().empty());
  }
}

TEST_F(TlsE2E, ServerNameOverridesTheUrlsHostAndAnIpLiteralIsCheckedAsAnIp) {
  NginxTls nginx;
  // The certificate is for localhost and 127.0.0.1: an IP URL verifies against its IP SAN ...
  GatewayProcess by_ip(https_config(nginx.port, ca_only(), "127.0.0.1"));
  EXPECT_EQ(http_get(by_ip.port, "/ibe/a").status, 200) << by_ip.proc->output();
  // ... and a server_name the certificate does not carry fails even though the address is right.
  json tls = ca_only();
  tls["server_name"] = "api.supplier.test";
  GatewayProcess named(https_config(nginx.port, tls, "127.0.0.1"));
  const HttpResponse r = http_get(named.port, "/ibe/b");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_NE(r.body.find("hostname mismatch: certificate is for localhost, 127.0.0.1"), std::string::npos) << r.body;
}

TEST_F(TlsE2E, InsecureSkipVerifyIsExplicitWarnedAndShown) {
  NginxTlsOptions o;
  o.cert = test_pki().wrongname_cert;
  o.key = test_pki().wrongname_key;
  NginxTls nginx(o);
  GatewayProcess gw(https_config(nginx.port, {{"insecure_skip_verify", true}}));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  EXPECT_NE(gw.proc->output().find("upstream 'ibe' (https://localhost:" + std::to_string(nginx.port) +
                                   "): tls.insecure_skip_verify is true"),
            std::string::npos)
      << gw.proc->output();
  EXPECT_EQ(http_get(gw.port, "/ibe/a").status, 200);
  const json overview = gw.admin_json("/admin/overview");
  bool shown = false;
  for (const json& u : overview["upstreams"])
    if (u["upstream"] == "ibe") shown = u["tls"]["insecure_skip_verify"] == true && u["tls"]["verify"] == false;
  EXPECT_TRUE(shown) << overview["upstreams"].dump();
}

// ---- mTLS --------------------------------------------------------------------------------------

TEST_F(TlsE2E, ClientCertificateWorksWithItAndFailsWithout) {
  const TestPki& pki = test_pki();
  NginxTlsOptions o;
  o.require_client_cert = true;
  NginxTls nginx(o);
  json with_cert = ca_only();
  with_cert["cert_file"] = pki.client_cert;
  with_cert["key_file"] = pki.client_key;
  GatewayProcess gw(https_config(nginx.port, with_cert));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const HttpResponse r = http_get(gw.port, "/ibe/book");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.header("x-tls-client").find("CN=tollgate-client"), std::string::npos) << r.header("x-tls-client");
  EXPECT_GT(series(gw, "tollgate_tls_certificate_expiry_seconds", "name=\"ibe\",use=\"client\""), 0);

  // A supplier that refuses the handshake without one (the mock checks during the handshake;
  // in TLS 1.3 its alert reaches the gateway on the first read).
  TlsMock strict(pki.server_cert, pki.server_key, pki.ca);
  ASSERT_GT(strict.port, 0) << strict.proc->output();
  GatewayProcess without(https_config(strict.port, ca_only()));
  const HttpResponse refused = http_get(without.port, "/ibe/book");
  EXPECT_EQ(refused.status, 502) << refused.body;
  EXPECT_NE(refused.body.find("client certificate"), std::string::npos) << refused.body;
  EXPECT_EQ(series(without, "tollgate_upstream_tls_failures_total", "reason=\"client_certificate\",upstream=\"ibe\""), 1);
  EXPECT_EQ(strict.count("/ibe/book"), 0);
  // The supplier read no request: the permit went back (as after a failed handshake), so a rule
  // of one permit a second, with no wait, refuses nothing for it.
  json one = https_config(strict.port, ca_only());
  one["limits"]["rules"][0]["rateLimit"] = 1;
  one["limits"]["rules"][0]["cache"] = 0;
  GatewayProcess single(one);
  ASSERT_GT(single.port, 0) << single.proc->output();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(http_get(single.port, "/ibe/shopping/search").status, 502) << i;
  const std::string m = http_get(single.admin_port, "/metrics").body;
  EXPECT_NE(m.find("\ntollgate_permits_returned_total 3"), std::string::npos) << m;
  GatewayProcess with(https_config(strict.port, with_cert));
  EXPECT_EQ(http_get(with.port, "/ibe/book").status, 200);
  EXPECT_EQ(strict.count("/ibe/book"), 1);
}

TEST_F(TlsE2E, AWorldReadableKeyRefusesTheStartNamingTheFile) {
  const std::string dir = temp_dir();
  const std::string key = dir + "/client.key";
  std::filesystem::copy_file(test_pki().client_key, key);
  ::chmod(key.c_str(), 0644);
  json tls = ca_only();
  tls["cert_file"] = test_pki().client_cert;
  tls["key_file"] = key;
  write_file(dir + "/gateway.json", https_config(1, tls).dump());
  Process check({TOLLGATE_BIN, "--config", dir + "/gateway.json", "--check"});
  EXPECT_EQ(check.wait_exit(10s), 1);
  EXPECT_NE(check.output().find(key + ": private key is readable by every user (mode 644)"), std::string::npos)
      << check.output();
}

// ---- supplier credentials over TLS --------------------------------------------------------------

TEST_F(TlsE2E, AnOAuth2TokenComesOverVerifiedTlsAndAnUnverifiedTokenEndpointGetsNoSecret) {
  const TestPki& pki = test_pki();
  const json auth_settings = {{"require", true}, {"client_id", "tls-client"}, {"client_secret", "tls-s3cr3t"}};
  TlsMock mock(pki.server_cert, pki.server_key, "", {"--auth", auth_settings.dump()});
  ASSERT_GT(mock.port, 0);
  const auto with_token_url = [&](const json& tls) {
    json c = https_config(mock.port, tls);
    c["upstreams"]["ibe"]["auth"] = {{"type", "oauth2_client_credentials"},
                                     {"token_url", "https://localhost:" + std::to_string(mock.port) + "/oauth2/token"},
                                     {"client_id_env", "TLS_CID"},
                                     {"client_secret_env", "TLS_SECRET"}};
    return c;
  };
  const std::map<std::string, std::string> env = {{"TLS_CID", "tls-client"}, {"TLS_SECRET", "tls-s3cr3t"}};
  const auto token_requests = [&] { return json::parse(https_get(mock.port, "/__auth").body)["token_requests"].get<int>(); };
  {
    // Trusting another CA: the token endpoint's certificate fails, so no request goes out with a
    // secret, and none reaches the API.
    json tls = {{"ca_file", pki.other_ca}};
    GatewayProcess gw(with_token_url(tls), env);
    ASSERT_GT(gw.port, 0) << gw.proc->output();
    const HttpResponse r = http_get(gw.port, "/ibe/x");
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_EQ(json::parse(r.body)["error"], "upstream_auth_failed") << r.body;
    EXPECT_EQ(token_requests(), 0);
    EXPECT_EQ(mock.count("/ibe/x"), 0);
    EXPECT_GE(series(gw, "tollgate_upstream_tls_failures_total", "reason=\"unknown_ca\",upstream=\"ibe.token\""), 1);
  }
  GatewayProcess gw(with_token_url(ca_only()), env);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(http_get(gw.port, "/ibe/y").status, 200);
  EXPECT_EQ(token_requests(), 1);
  EXPECT_EQ(mock.count("/ibe/y"), 20);
}

// ---- pooling and resumption --------------------------------------------------------------------

TEST_F(TlsE2E, NewConnectionsResumeTheirSession) {
  NginxTlsOptions o;
  o.keepalive_requests = 1;  // nginx closes after every answer: every request is a new connection
  NginxTls nginx(o);
  json c = https_config(nginx.port, ca_only());
  c["threads"] = 1;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  constexpr int kRequests = 40;
  for (int i = 0; i < kRequests; ++i) ASSERT_EQ(http_get(gw.port, "/ibe/r" + std::to_string(i)).status, 200);
  ASSERT_TRUE(nginx.wait_for_lines(kRequests));
  EXPECT_GE(nginx.reused_ratio(1), 0.95) << "nginx saw too few resumed sessions";
  const double resumed = series(gw, "tollgate_upstream_tls_handshakes_total", "resumed=\"true\",upstream=\"ibe\"");
  const double full = series(gw, "tollgate_upstream_tls_handshakes_total", "resumed=\"false\",upstream=\"ibe\"");
  EXPECT_EQ(resumed + full, kRequests);
  EXPECT_GE(resumed / (kRequests - 1), 0.95);
  EXPECT_GT(series(gw, "tollgate_tls_certificate_expiry_seconds", "name=\"ibe\",use=\"upstream\""), 0);
}

TEST_F(TlsE2E, KeepAliveOverTlsReusesOneConnectionAndDropsOneTheUpstreamClosed) {
  NginxTls nginx;  // keep-alive: nginx's default
  json c = https_config(nginx.port, ca_only());
  c["threads"] = 1;
  GatewayProcess gw(c);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(http_get(gw.port, "/ibe/k" + std::to_string(i)).status, 200);
  EXPECT_EQ(series(gw, "tollgate_upstream_tls_handshakes_total", "resumed=\"false\",upstream=\"ibe\"") +
                series(gw, "tollgate_upstream_tls_handshakes_total", "resumed=\"true\",upstream=\"ibe\""),
            1);
  // nginx closes the idle connection (close_notify, then FIN) when it stops; a new nginx on the
  // same port is a new server. The pooled connection must not be used: no 502, no retry needed.
  const double discarded_before = metric_value(gw, "tollgate_upstream_conns_discarded_total");
  nginx.proc->signal(SIGQUIT);  // graceful: closes idle keep-alive connections
  ASSERT_TRUE(nginx.proc->wait_exit(10s).has_value());
  const HttpResponse r = http_get(gw.port, "/ibe/after");
  EXPECT_EQ(r.status, 502) << r.body;  // nobody listens on the old port any more
  EXPECT_EQ(json::parse(r.body)["error"], "upstream_unavailable") << r.body;
  EXPECT_GE(metric_value(gw, "tollgate_upstream_conns_discarded_total"), discarded_before + 1);
  EXPECT_EQ(metric_value(gw, "tollgate_upstream_retries_total"), 0);
}

TEST_F(TlsE2E, ConcurrentClientsEachGetTheirOwnAnswerOverTls) {
  const TestPki& pki = test_pki();
  TlsMock mock(pki.server_cert, pki.server_key);
  ASSERT_GT(mock.port, 0) << mock.proc->output();
  json c = https_config(mock.port, ca_only());
  c["proxy"]["max_idle_upstream_conns"] = 4;  // connections are reused across clients
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        std::string id = std::to_string(t);
        id.append(1, '-').append(std::to_string(i));
        const HttpResponse r = http_request(gw.port, {"GET", "/ibe/x?echo=1&delay_ms=" + std::to_string(i % 3), {{"X-Request-Id", id}}, {}});
        if (r.status != 200) {
          ++failed;
          continue;
        }
        if (json::parse(r.body)["headers"].value("X-Request-Id", "") != id) ++wrong;
      }
    });
  }
  for (auto& th : clients) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(mock.count("/ibe/x"), 200);
}

// ---- throttling over HTTPS ---------------------------------------------------------------------

TEST_F(TlsE2E, BurstThenPacedThenRejectedOverHttps) {
  const TestPki& pki = test_pki();
  TlsMock mock(pki.server_cert, pki.server_key);
  ASSERT_GT(mock.port, 0) << mock.proc->output();
  // The 1/s rule with a 2.2 s window: 7 and 13 however the decisions spread, up to 0.8 s
  // (support/stack.hpp).
  json c = https_config(mock.port, ca_only());
  c["limits"]["rules"] = json::array({paced_search_rule()});
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const auto rs = concurrent_requests(gw.port, {"GET", "/ibe/shopping/search", {}, {}}, 20);
  EXPECT_EQ(count_status(rs, 200), 7);
  EXPECT_EQ(count_status(rs, 429), 13);
  for (const auto& r : rs) {
    if (r.status == 429) {
      EXPECT_EQ(r.header("ratelimit-policy"), kPacedPolicy);
    }
  }
  const json st = mock.stats();
  ASSERT_EQ(st["paths"]["/ibe/shopping/search"]["count"], 7);
  auto arrivals = st["paths"]["/ibe/shopping/search"]["arrivals_us"].get<std::vector<std::int64_t>>();
  std::sort(arrivals.begin(), arrivals.end());
  const auto t0 = arrivals[0];
  // 5 at once (each on a new TLS connection: generous), then the two held ones, released 1 s and
  // 2 s after the first decision; the first arrival is that decision plus its handshake, hence
  // the 200 ms below 1 s and 2 s.
  EXPECT_LT(arrivals[4] - t0, 800'000);
  EXPECT_GE(arrivals[5] - t0, 800'000);
  EXPECT_LE(arrivals[5] - t0, 1'700'000);
  EXPECT_GE(arrivals[6] - t0, 1'800'000);
  EXPECT_LE(arrivals[6] - t0, 2'700'000);
}

// ---- the HTTPS listener ------------------------------------------------------------------------

json listener_config(int upstream_port) {
  json c = base_config(upstream_port);
  c["tls"] = {{"cert_file", test_pki().server_cert}, {"key_file", test_pki().server_key}};
  c["proxy"]["header_timeout_ms"] = 1000;
  return c;
}

TEST_F(TlsE2E, ListenerServesHttpsAndSaysSoUpstream) {
  MockUpstream upstream;
  GatewayProcess gw(listener_config(upstream.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  TlsClientOptions o;
  o.alpn = {"h2", "http/1.1"};
  const HttpResponse r = https_request(gw.port, {"GET", "/ibe/x?echo=1", {}, {}}, o);
  ASSERT_EQ(r.status, 200) << r.error << r.body;
  EXPECT_EQ(json::parse(r.body)["headers"]["X-Forwarded-Proto"], "https");
  // Throttled as over plain HTTP: 20 clients at once, each with its own handshake. The exact 7/13
  // split is the HTTPS upstream's test; here the handshakes spread the arrivals a little, so
  // the bound is burst + rate * spread.
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 20; ++i)
    clients.emplace_back([&] {
      const int status = https_request(gw.port, {"GET", "/ibe/shopping/search", {}, {}}, o).status;
      (status == 200 ? ok : status == 429 ? refused : ok)++;
      if (status != 200 && status != 429) ADD_FAILURE() << "status " << status;
    });
  for (auto& c : clients) c.join();
  EXPECT_GE(ok.load(), 7);
  EXPECT_LE(ok.load(), 10);
  EXPECT_EQ(ok + refused, 20);
  EXPECT_GE(series(gw, "tollgate_listener_tls_handshakes_total", "result=\"full\""), 21);
  EXPECT_GT(series(gw, "tollgate_tls_certificate_expiry_seconds", "name=\"listener\",use=\"listener\""), 0);
}

TEST_F(TlsE2E, ListenerGivesHostileClientsDefinedOutcomes) {
  MockUpstream upstream;
  GatewayProcess gw(listener_config(upstream.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  // Plain HTTP to the HTTPS port: a plain-text 400 that says why.
  const std::string plain = raw_exchange(gw.port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 5s);
  EXPECT_EQ(plain.rfind("HTTP/1.1 400", 0), 0u) << plain;
  EXPECT_NE(plain.find("this port serves HTTPS"), std::string::npos) << plain;
  // A handshake record of garbage: closed, nothing sent back but an alert, no crash.
  const std::string garbage = raw_exchange(gw.port, std::string("\x16\x03\x01\x00\x10", 5) + std::string(16, '\xee'), 5s);
  EXPECT_EQ(garbage.find("HTTP/"), std::string::npos);
  // Bytes that are neither: closed.
  EXPECT_TRUE(raw_exchange(gw.port, std::string("\x00\x01\x02", 3), 5s).empty());
  // Clients that stall mid-handshake (half a ClientHello) and ones that never speak: closed at
  // proxy.header_timeout_ms (1 s here), none left open.
  std::vector<std::unique_ptr<RawConnection>> stalled;
  for (int i = 0; i < 20; ++i)
    stalled.push_back(std::make_unique<RawConnection>(gw.port, i % 2 ? std::string("\x16\x03\x01\x02\x00\x01", 6) : ""));
  EXPECT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") >= 20; }, 5s));
  EXPECT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") == 0; }, 6s))
      << metric_value(gw, "tollgate_connections");
  EXPECT_GE(series(gw, "tollgate_listener_tls_handshakes_total", "result=\"timeout\""), 20);
  EXPECT_EQ(series(gw, "tollgate_listener_tls_handshakes_total", "result=\"plain_http\""), 2);
  // And it still serves.
  EXPECT_EQ(https_get(gw.port, "/ibe/after").status, 200);
  EXPECT_FALSE(gw.proc->wait_exit(1ms).has_value());
}

// ---- reload ------------------------------------------------------------------------------------

TEST_F(TlsE2E, ReloadUnderLoadLosesNoRequestAndABadFileKeepsTheOldContext) {
  const TestPki& pki = test_pki();
  NginxTls nginx;
  // The gateway's files live in a folder of their own, replaced as an operator would.
  const std::string dir = temp_dir();
  const std::string cert = dir + "/listener.pem", key = dir + "/listener.key", ca = dir + "/ca.pem";
  std::filesystem::copy_file(pki.server_cert, cert);
  std::filesystem::copy_file(pki.server_key, key);
  std::filesystem::copy_file(pki.ca, ca);
  json c = https_config(nginx.port, {{"ca_file", ca}});
  c["tls"] = {{"cert_file", cert}, {"key_file", key}};
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, bad{0};
  std::vector<std::thread> load;
  for (int t = 0; t < 3; ++t)
    load.emplace_back([&] {
      while (!stop) (https_get(gw.port, "/ibe/load").status == 200 ? ok : bad)++;
    });
  for (int i = 0; i < 5; ++i) {
    const HttpResponse r = gw.admin("POST", "/admin/tls/reload");
    EXPECT_EQ(r.status, 200) << r.body;
    gw.proc->signal(SIGHUP);
    std::this_thread::sleep_for(100ms);
  }
  // A key file that does not load: refused naming it, the old context stays in force.
  write_file(key, "not a key\n");
  ::chmod(key.c_str(), 0600);
  const HttpResponse refused = gw.admin("POST", "/admin/tls/reload");
  EXPECT_EQ(refused.status, 422) << refused.body;
  EXPECT_NE(refused.body.find(key), std::string::npos) << refused.body;
  std::this_thread::sleep_for(300ms);
  stop = true;
  for (auto& th : load) th.join();
  EXPECT_GT(ok.load(), 20);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(https_get(gw.port, "/ibe/still").status, 200);
  // Unauthenticated: refused.
  EXPECT_EQ(http_request(gw.admin_port, {"POST", "/admin/tls/reload", {}, {}}).status, 401);

  // A new certificate is used by new handshakes: the wrong-name one, seen under its name.
  std::filesystem::copy_file(pki.wrongname_cert, cert, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki.wrongname_key, key, std::filesystem::copy_options::overwrite_existing);
  gw.proc->signal(SIGHUP);
  ASSERT_TRUE(gw.proc->wait_for_line("TLS files re-read", 5s).has_value()) << gw.proc->output();
  TlsClientOptions evil;
  evil.server_name = "evil.example";
  EXPECT_TRUE(eventually([&] { return https_get(gw.port, "/ibe/renamed", evil).status == 200; }, 3s));
}

// A FIFO named as a TLS file (by mistake, or a process substitution) is refused by name: --check
// exits at once instead of hanging in OpenSSL's read; a reload (admin or SIGHUP) refuses it and
// keeps the old context, the admin listener answering meanwhile.
TEST_F(TlsE2E, AFifoAsATlsFileIsRefusedByNameNeverWaitedOn) {
  const TestPki& pki = test_pki();
  NginxTls nginx;
  const std::string dir = temp_dir();
  const std::string fifo = dir + "/ca-fifo.pem";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  write_file(dir + "/fifo-ca.json", https_config(nginx.port, {{"ca_file", fifo}}).dump(2));
  Process check({TOLLGATE_BIN, "--config", dir + "/fifo-ca.json", "--check"});
  EXPECT_EQ(check.wait_exit(10s), 1) << check.output();
  EXPECT_NE(check.output().find(fifo + " is not a regular file"), std::string::npos) << check.output();

  const std::string cert = dir + "/listener.pem", key = dir + "/listener.key";
  std::filesystem::copy_file(pki.server_cert, cert);
  std::filesystem::copy_file(pki.server_key, key);
  json c = https_config(nginx.port, ca_only());
  c["tls"] = {{"cert_file", cert}, {"key_file", key}};
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  std::filesystem::remove(key);
  ASSERT_EQ(::mkfifo(key.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const HttpResponse refused = gw.admin("POST", "/admin/tls/reload");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(refused.status, 422) << refused.body;
  EXPECT_NE(refused.body.find(key + " is not a regular file"), std::string::npos) << refused.body;
  gw.proc->signal(SIGHUP);
  EXPECT_TRUE(gw.proc->wait_for_line(key + " is not a regular file", 5s).has_value()) << gw.proc->output();
  EXPECT_EQ(http_get(gw.admin_port, "/metrics").status, 200);
  EXPECT_EQ(https_get(gw.port, "/ibe/still").status, 200);  // the old context still serves
}

// ---- --check --probe ---------------------------------------------------------------------------

TEST_F(TlsE2E, ProbeReportsEachUpstreamAndFailsOnABadOne) {
  const TestPki& pki = test_pki();
  NginxTls good;
  NginxTlsOptions wo;
  wo.cert = pki.wrongname_cert;
  wo.key = pki.wrongname_key;
  NginxTls wrong(wo);
  NginxTlsOptions eo;
  eo.cert = pki.expired_cert;
  eo.key = pki.expired_key;
  NginxTls expired(eo);
  const std::string dir = temp_dir();
  json c = https_config(good.port, ca_only());
  c["upstreams"]["wrong"] = {{"url", "https://localhost:" + std::to_string(wrong.port)}, {"tls", ca_only()}};
  c["upstreams"]["old"] = {{"url", "https://localhost:" + std::to_string(expired.port)}, {"tls", ca_only()}};
  write_file(dir + "/all.json", c.dump());
  Process all({TOLLGATE_BIN, "--config", dir + "/all.json", "--check", "--probe"});
  EXPECT_EQ(all.wait_exit(20s), 1);
  const std::string out = all.output();
  EXPECT_NE(out.find("upstream ibe (https://localhost:" + std::to_string(good.port) + ")"), std::string::npos) << out;
  EXPECT_NE(out.find("TLSv1.3, cipher "), std::string::npos) << out;
  EXPECT_NE(out.find("name: localhost matched"), std::string::npos) << out;
  EXPECT_NE(out.find("second connection resumed the session: yes"), std::string::npos) << out;
  EXPECT_NE(out.find("TLS: hostname mismatch: certificate is for evil.example"), std::string::npos) << out;
  EXPECT_NE(out.find("TLS: certificate has expired"), std::string::npos) << out;
  EXPECT_NE(out.find("2 upstream(s) failed"), std::string::npos) << out;
  // No HTTP request was spent on any of them.
  EXPECT_TRUE(good.access_lines().empty());

  write_file(dir + "/good.json", https_config(good.port, ca_only()).dump());
  Process fine({TOLLGATE_BIN, "--config", dir + "/good.json", "--check", "--probe"});
  EXPECT_EQ(fine.wait_exit(20s), 0) << fine.output();
}

// A TLS 1.3 supplier that wants a client certificate completes the handshake and refuses after
// it: the probe reads that refusal and fails, naming it as the gateway's 502 does, with no
// certificate and with one from a CA the supplier does not trust; with the right one it passes.
TEST_F(TlsE2E, ProbeFailsWhereTheSupplierRefusesTheClientCertificateAfterTheHandshake) {
  const TestPki& pki = test_pki();
  TlsMock strict(pki.server_cert, pki.server_key, pki.ca);
  ASSERT_GT(strict.port, 0) << strict.proc->output();
  const std::string dir = temp_dir();
  auto probe = [&](const json& tls, const std::string& name) {
    write_file(dir + "/" + name + ".json", https_config(strict.port, tls).dump());
    auto p = std::make_unique<Process>(std::vector<std::string>{TOLLGATE_BIN, "--config", dir + "/" + name + ".json",
                                                                "--check", "--probe"});
    return p;
  };
  auto none = probe(ca_only(), "none");
  EXPECT_EQ(none->wait_exit(20s), 1) << none->output();
  EXPECT_NE(none->output().find("TLS: handshake failure: the upstream requires a client certificate (client_certificate)"),
            std::string::npos)
      << none->output();
  EXPECT_NE(none->output().find("1 upstream(s) failed"), std::string::npos) << none->output();
  json foreign = ca_only();
  foreign["cert_file"] = pki.unknownca_cert;  // a certificate from a CA the supplier does not trust
  foreign["key_file"] = pki.unknownca_key;
  auto untrusted = probe(foreign, "foreign");
  EXPECT_EQ(untrusted->wait_exit(20s), 1) << untrusted->output();
  EXPECT_NE(untrusted->output().find("(client_certificate)"), std::string::npos) << untrusted->output();
  json right = ca_only();
  right["cert_file"] = pki.client_cert;
  right["key_file"] = pki.client_key;
  auto with = probe(right, "right");
  EXPECT_EQ(with->wait_exit(20s), 0) << with->output();
  EXPECT_EQ(strict.count("/"), 0);  // no request spent
}

}  // namespace
}  // namespace tollgate::testing

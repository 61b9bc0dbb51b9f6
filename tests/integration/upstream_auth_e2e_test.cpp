// Supplier credentials end to end: the real gateway in front of the mock upstream, which checks
// a static key or Bearer tokens it issued itself from its POST /oauth2/token, and counts what it
// saw (GET /__auth). The caller never chooses the credential; one token serves every request
// until it is due; a 401 is one purge, one fetch and one retry; a token endpoint that fails,
// hangs or answers garbage gives 502 upstream_auth_failed within the caller's deadline and
// nothing reaches the supplier unauthenticated; no secret shows in any output.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kStaticKey = "e2e-static-key-Xw7";
constexpr const char* kSecret = kOauth2Secret;

// A mock that requires Bearer tokens it issued (for the e2e client), and a gateway whose one
// upstream holds that client's credentials.
json oauth2_config(const MockUpstream& m, const json& extra = json::object()) {
  json c = base_config(m.port);
  json auth = oauth2_auth(m.port);
  auth.update(extra);
  c["upstreams"]["ibe"]["auth"] = auth;
  return c;
}
const std::map<std::string, std::string>& kOauthEnv = kOauth2Env;

MockUpstream oauth2_mock(int expires_in = 1800) { return MockUpstream(mock_oauth2_args(expires_in)); }

json auth_of(const MockUpstream& m) { return m.auth(); }
void set_auth(const MockUpstream& m, const json& j) { ASSERT_EQ(m.set_auth(j), 200); }

int path_count(const MockUpstream& m, const std::string& path) { return m.count(path); }

// Everything an operator or a log reader could see of the gateway.
std::string everything_visible(const GatewayProcess& gw) {
  std::string all = gw.proc->read_available();
  for (const char* t : {"/metrics", "/admin/overview", "/admin/rules", "/healthz", "/readyz"}) all += http_get(gw.admin_port, t).body;
  return all;
}

// ---- a static key ------------------------------------------------------------------------------

TEST(UpstreamAuthE2E, AStaticKeyIsSetOnEveryRequestAndTheCallersOwnIsReplaced) {
  MockUpstream m({"--auth", json{{"require_header", {{"name", "X-Api-Key"}, {"value", kStaticKey}}}}.dump()});
  ASSERT_GT(m.port, 0);
  // The mock refuses a request without the key: what the gateway adds is what makes it pass.
  EXPECT_EQ(http_request(m.host, m.port, {"GET", "/shopping/direct", {}, {}}).status, 401);
  json c = base_config(m.port);
  c["upstreams"]["ibe"]["auth"] = {{"type", "header"}, {"name", "X-Api-Key"}, {"value_env", "E2E_KEY"}};
  GatewayProcess gw(c, {{"E2E_KEY", kStaticKey}});
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  EXPECT_EQ(http_get(gw.port, "/shopping/plain").status, 200);
  // A caller's own key, in any case and twice, never reaches the supplier.
  const HttpResponse r = http_request(
      gw.port, {"GET", "/shopping/own?echo=1", {{"X-Api-Key", "callers-own"}, {"x-api-key", "another"}}, {}});
  ASSERT_EQ(r.status, 200) << r.body;
  int keys = 0;
  const json echoed = json::parse(r.body);
  for (const auto& f : echoed["fields"]) {
    std::string name = f[0];
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (name == "x-api-key") {
      ++keys;
      EXPECT_EQ(f[1], kStaticKey);
    }
  }
  EXPECT_EQ(keys, 1);
  const json a = auth_of(m);
  EXPECT_EQ(a["unauthorized"], 1);  // only the direct request above
  EXPECT_EQ(a["last_header_value"], kStaticKey);
  EXPECT_EQ(everything_visible(gw).find(kStaticKey), std::string::npos);
}

TEST(UpstreamAuthE2E, AKeyFileOthersCanReadStopsTheStartNamingTheFile) {
  MockUpstream m;
  ASSERT_GT(m.port, 0);
  const std::string dir = temp_dir();
  const std::string key = dir + "/supplier.key";
  write_file(key, std::string(kStaticKey) + "\n");
  ::chmod(key.c_str(), 0644);
  json c = base_config(m.port);
  c["upstreams"]["ibe"]["auth"] = {{"type", "header"}, {"name", "X-Api-Key"}, {"value_file", key}};
  {
    GatewayProcess gw(c);
    EXPECT_EQ(gw.port, -1);
    EXPECT_NE(gw.proc->wait_exit(10s).value_or(0), 0);
    const std::string out = gw.proc->output();
    EXPECT_NE(out.find("upstreams.ibe.auth.value_file"), std::string::npos) << out;
    EXPECT_NE(out.find(key), std::string::npos) << out;
    EXPECT_NE(out.find("0600"), std::string::npos) << out;
    EXPECT_EQ(out.find(kStaticKey), std::string::npos) << out;
  }
  // Made private, the same file starts it, and the key goes out.
  ::chmod(key.c_str(), 0600);
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  EXPECT_EQ(http_get(gw.port, "/shopping/x").status, 200);
  EXPECT_EQ(auth_of(m)["last_header_value"], kStaticKey);
}

// ---- OAuth2 client credentials -----------------------------------------------------------------

TEST(UpstreamAuthE2E, OneTokenServesAThousandRequestsAndTheCallersAuthorizationIsReplaced) {
  MockUpstream m = oauth2_mock();
  ASSERT_GT(m.port, 0);
  GatewayProcess gw(oauth2_config(m), kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  // The first 50 arrive together, before any token: they all wait for the one fetch.
  int ok = 0;
  for (int round = 0; round < 20; ++round)
    ok += count_status(concurrent_requests(gw.port, {"GET", "/other/" + std::to_string(round),
                                                     {{"Authorization", "Bearer callers-own"}}, {}},
                                           50),
                       200);
  EXPECT_EQ(ok, 1000);
  const json a = auth_of(m);
  EXPECT_EQ(a["token_requests"], 1);
  EXPECT_EQ(a["token_styles"], json::array({"basic"}));
  EXPECT_EQ(a["token_scopes"], json::array({"air.shop air.book"}));
  EXPECT_EQ(a["unauthorized"], 0);
  const std::string used = a["last_authorization"];
  EXPECT_TRUE(used.starts_with("Bearer tok-")) << used;
  EXPECT_EQ(metric_series(gw, "tollgate_upstream_auth_refresh_total", {{"upstream", "ibe"}, {"result", "ok"}}), 1.0);
  EXPECT_GT(metric_series(gw, "tollgate_upstream_auth_token_ttl_seconds", {{"upstream", "ibe"}}).value_or(0), 1700.0);
  // No secret and no token in the output, the metrics or the admin answers.
  const std::string seen = everything_visible(gw);
  EXPECT_EQ(seen.find(kSecret), std::string::npos);
  EXPECT_EQ(seen.find(used.substr(7)), std::string::npos);
  const json overview = gw.admin_json("/admin/overview");
  bool found = false;
  for (const auto& u : overview["upstreams"])
    if (u["upstream"] == "ibe") {
      found = true;
      EXPECT_EQ(u["auth"]["type"], "oauth2_client_credentials");
      EXPECT_GT(u["auth"]["expires_in_s"].get<int>(), 1700);
      EXPECT_EQ(u["auth"]["failures"], 0);
    }
  EXPECT_TRUE(found) << overview.dump();
}

TEST(UpstreamAuthE2E, BodyStyleSendsTheCredentialsAsFormFields) {
  MockUpstream m = oauth2_mock();
  ASSERT_GT(m.port, 0);
  GatewayProcess gw(oauth2_config(m, {{"auth_style", "body"}}), kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  EXPECT_EQ(http_get(gw.port, "/other").status, 200);
  EXPECT_EQ(auth_of(m)["token_styles"], json::array({"body"}));
}

TEST(UpstreamAuthE2E, ATokenIsRefreshedBeforeItExpiresUnderLoadWithExactlyOneFetch) {
  // Lifetime 4 s, refreshed from 2 s before its end: the first token at t0, one refresh at
  // t0 + 2 s (the next would be due at t0 + 4 s); 3 s of load from four callers sees exactly
  // two token requests, and never a 401 or a 502.
  MockUpstream m = oauth2_mock(4);
  ASSERT_GT(m.port, 0);
  GatewayProcess gw(oauth2_config(m, {{"refresh_before_s", 2}}), kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_EQ(http_get(gw.port, "/other/first").status, 200);
  std::atomic<int> ok{0}, other{0};
  const auto until = std::chrono::steady_clock::now() + 3s;
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      while (std::chrono::steady_clock::now() < until) (http_get(gw.port, "/other/load").status == 200 ? ok : other)++;
    });
  for (auto& t : callers) t.join();
  EXPECT_GT(ok.load(), 100);
  EXPECT_EQ(other.load(), 0);
  const json a = auth_of(m);
  EXPECT_EQ(a["token_requests"], 2);
  EXPECT_EQ(a["unauthorized"], 0);
}

TEST(UpstreamAuthE2E, ASupplier401PurgesTheTokenFetchesOneAndRetriesTheRequestOnce) {
  MockUpstream m = oauth2_mock();
  ASSERT_GT(m.port, 0);
  GatewayProcess gw(oauth2_config(m), kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_EQ(http_get(gw.port, "/other/warm").status, 200);
  // The supplier forgets every token it gave (a revocation, a restart of its auth service).
  ASSERT_EQ(m.revoke_tokens(), 200);
  const HttpResponse r = http_request(gw.port, {"POST", "/other/book", {{"Content-Type", "application/json"}}, R"({"pnr":1})"});
  EXPECT_EQ(r.status, 200) << r.body;
  const json a = auth_of(m);
  EXPECT_EQ(a["token_requests"], 2);   // one fetch after the purge
  EXPECT_EQ(a["unauthorized"], 1);     // the one 401
  EXPECT_EQ(path_count(m, "/other/book"), 2);  // sent, refused, sent again: once more only
  // The new token serves what follows.
  EXPECT_EQ(http_get(gw.port, "/other/after").status, 200);
  EXPECT_EQ(auth_of(m)["token_requests"], 2);
}

TEST(UpstreamAuthE2E, ASecond401GoesToTheCallerWithoutAnotherRetry) {
  // The supplier starts refusing every request whatever its token (it now wants a field the
  // gateway does not send): the request is sent twice, on the old token and on a new one, then
  // the caller gets the supplier's 401.
  MockUpstream m = oauth2_mock();
  ASSERT_GT(m.port, 0);
  GatewayProcess gw(oauth2_config(m), kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_EQ(http_get(gw.port, "/other/warm").status, 200);
  set_auth(m, {{"require_header", {{"name", "X-Never"}, {"value", "set"}}}});
  const HttpResponse r = http_get(gw.port, "/other/never");
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(path_count(m, "/other/never"), 2);
}

// The evidence rule (UpstreamAuth::confirm_401): one caller the supplier refuses for its own
// account, among other callers' successes, gets its 401s as they come, each sent once, and the
// fleet's token stays (no fetch, no retry: two supplier calls per permit before). When the token
// itself is refused, callers of two addresses refused within 2 s replace it.
TEST(UpstreamAuthE2E, OneCallersOwn401sLeaveTheTokenAloneAndTwoCallersReplaceIt) {
  MockUpstream m = oauth2_mock();
  ASSERT_GT(m.port, 0);
  json c = oauth2_config(m);
  c["proxy"]["trusted_proxies"] = json::array({"127.0.0.1"});  // X-Forwarded-For names the caller
  GatewayProcess gw(c, kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  auto get_as = [&](const std::string& ip, const std::string& path) {
    return http_request(gw.port, {"GET", path, {{"X-Forwarded-For", ip}}, {}});
  };
  ASSERT_EQ(get_as("10.0.0.1", "/other/warm").status, 200);
  set_auth(m, {{"unauthorized_callers", {"10.0.0.99"}}});
  std::atomic<bool> stop{false};
  std::atomic<int> others_ok{0}, others_bad{0};
  std::thread others([&] {
    for (int i = 0; !stop; ++i) {
      (get_as("10.0.0." + std::to_string(1 + i % 3), "/other/busy").status == 200 ? others_ok : others_bad)++;
      std::this_thread::sleep_for(20ms);
    }
  });
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 10; ++i) {
    const HttpResponse r = get_as("10.0.0.99", "/other/mine");
    EXPECT_EQ(r.status, 401) << r.body;
  }
  stop = true;
  others.join();
  EXPECT_EQ(path_count(m, "/other/mine"), 10);  // each sent once: no retry on a new token
  EXPECT_EQ(auth_of(m)["token_requests"], 1);   // the token stayed
  EXPECT_GT(others_ok.load(), 5);
  EXPECT_EQ(others_bad.load(), 0);
  const std::string metrics = http_get(gw.admin_port, "/metrics").body;
  EXPECT_NE(metrics.find("tollgate_upstream_auth_unconfirmed_401_total{upstream=\"ibe\"} 10"), std::string::npos)
      << metrics;

  // Now the token itself is refused (revoked) while three callers ask in turn: the first refused
  // has no evidence yet that it is not its own (its 401 goes to it, once); the next caller refused
  // within 2 s is the evidence, so the token is replaced and that request goes again on the new one.
  set_auth(m, {{"unauthorized_callers", json::array()}});
  std::this_thread::sleep_for(2100ms);  // the refusals above are out of the evidence window
  stop = false;
  std::atomic<int> refused{0}, after_ok{0};
  std::atomic<bool> revoked{false};
  std::thread turns([&] {
    for (int i = 0; !stop; ++i) {
      const int status = get_as("10.0.0." + std::to_string(1 + i % 3), "/other/turn").status;
      if (status == 401) ++refused;
      if (revoked && status == 200) ++after_ok;
      std::this_thread::sleep_for(20ms);
    }
  });
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(m.revoke_tokens(), 200);
  revoked = true;
  EXPECT_TRUE(eventually([&] { return auth_of(m)["token_requests"] == 2 && after_ok > 5; }, 5s));
  stop = true;
  turns.join();
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(auth_of(m)["token_requests"], 2);
}

TEST(UpstreamAuthE2E, ARefusedTokenThatCannotBeReplacedIsNotSentAgain) {
  MockUpstream m = oauth2_mock();
  ASSERT_GT(m.port, 0);
  GatewayProcess gw(oauth2_config(m), kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_EQ(http_get(gw.port, "/other/warm").status, 200);
  set_auth(m, {{"mode", "fail"}});
  ASSERT_EQ(m.revoke_tokens(), 200);
  // Refused on the revoked token, and no new one: 502, and the supplier saw it once.
  const HttpResponse first = http_get(gw.port, "/other/refused");
  EXPECT_EQ(first.status, 502) << first.body;
  EXPECT_EQ(path_count(m, "/other/refused"), 1);
  // The next is answered at once, without the refused token going out again.
  const HttpResponse next = http_get(gw.port, "/other/next");
  EXPECT_EQ(next.status, 502) << next.body;
  EXPECT_EQ(json::parse(next.body)["error"], "upstream_auth_failed");
  EXPECT_EQ(path_count(m, "/other/next"), 0);
  EXPECT_EQ(auth_of(m)["unauthorized"], 1);
  set_auth(m, {{"mode", "ok"}});
  EXPECT_TRUE(eventually([&] { return http_get(gw.port, "/other/again").status == 200; }, 5s));
}

struct BrokenEndpoint {
  const char* name;
  json auth;            // what the mock's token endpoint is told
  const char* result;   // the refresh result the gateway counts
};

TEST(UpstreamAuthE2E, ATokenEndpointThatFailsHangsOrTalksGarbageGives502InTimeAndNothingUnauthenticated) {
  const std::vector<BrokenEndpoint> cases = {
      {"fail", {{"mode", "fail"}}, "rejected"},
      {"garbage", {{"mode", "garbage"}}, "invalid"},
      {"no token", {{"mode", "no_token"}}, "invalid"},
      {"wrong secret", {{"client_secret", "not-the-gateways"}}, "rejected"},
      {"slow", {{"mode", "slow"}, {"slow_ms", 3000}}, "ok"},  // the token comes, after the deadline
  };
  for (const BrokenEndpoint& c : cases) {
    SCOPED_TRACE(c.name);
    MockUpstream m = oauth2_mock();
    ASSERT_GT(m.port, 0);
    set_auth(m, c.auth);
    GatewayProcess gw(oauth2_config(m), kOauthEnv);
    ASSERT_GT(gw.port, 0) << gw.proc->output();
    const auto t0 = std::chrono::steady_clock::now();
    const HttpResponse r = http_request(gw.port, {"GET", "/other/x", {{"Request-Timeout", "1"}}, {}});
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_EQ(json::parse(r.body)["error"], "upstream_auth_failed") << r.body;
    EXPECT_LT(took, 2500ms);  // the caller's 1 s, with room for a loaded machine
    // Nothing reached the supplier's API: not unauthenticated, not at all.
    EXPECT_EQ(path_count(m, "/other/x"), 0);
    EXPECT_EQ(auth_of(m)["unauthorized"], 0);
    EXPECT_EQ(metric_series(gw, "tollgate_upstream_failures_total", {{"upstream", "ibe"}, {"kind", "auth"}}), 1.0);
    EXPECT_TRUE(eventually(
        [&] {
          return metric_series(gw, "tollgate_upstream_auth_refresh_total", {{"upstream", "ibe"}, {"result", c.result}})
                     .value_or(0) >= 1;
        },
        5s));
    // The endpoint recovers: within a few token requests (one a second) requests go through.
    set_auth(m, {{"mode", "ok"}, {"client_secret", kSecret}});
    EXPECT_TRUE(eventually([&] { return http_get(gw.port, "/other/again").status == 200; }, 6s));
    EXPECT_EQ(auth_of(m)["unauthorized"], 0);
    EXPECT_LE(auth_of(m)["token_requests"].get<int>(), 8);  // token_rate 1/s: no storm
    const std::string seen = everything_visible(gw);
    EXPECT_EQ(seen.find(kSecret), std::string::npos);
  }
}

TEST(UpstreamAuthE2E, ADeadTokenEndpointIsNotStormedAtTokenRate) {
  // The token URL's port takes no connections: 40 callers for 3 s make at most token_rate 2/s
  // of token attempts, each counted as failed, every caller answered 502.
  MockUpstream m = oauth2_mock();
  ASSERT_GT(m.port, 0);
  ClosedPort dead;
  json c = oauth2_config(m, {{"token_rate", 2}});
  c["upstreams"]["ibe"]["auth"]["token_url"] = "http://127.0.0.1:" + std::to_string(dead.port()) + "/oauth2/token";
  GatewayProcess gw(c, kOauthEnv);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  std::atomic<int> bad{0}, other{0};
  const auto until = std::chrono::steady_clock::now() + 3s;
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&] {
      while (std::chrono::steady_clock::now() < until)
        (http_request(gw.port, {"GET", "/other/y", {{"Request-Timeout", "0.2"}}, {}}).status == 502 ? bad : other)++;
    });
  for (auto& t : callers) t.join();
  EXPECT_GT(bad.load(), 20);
  EXPECT_EQ(other.load(), 0);
  const double failed =
      metric_series(gw, "tollgate_upstream_auth_refresh_total", {{"upstream", "ibe"}, {"result", "failed"}}).value_or(0);
  EXPECT_GE(failed, 2.0);
  EXPECT_LE(failed, 8.0);  // 2/s over ~3 s, with the first at once
  EXPECT_EQ(path_count(m, "/other/y"), 0);
}

}  // namespace
}  // namespace tollgate::testing

// Real processes for end-to-end tests: the mock upstream and the gateway, on free ports.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.hpp"
#include "support/process.hpp"

namespace tollgate::testing {

struct MockUpstream {
  std::unique_ptr<Process> proc;
  std::string host = "127.0.0.1";
  int port = -1;  // -1: it did not start (the port was taken, say)
  explicit MockUpstream(std::vector<std::string> extra = {}) : MockUpstream("127.0.0.1", 0, std::move(extra)) {}
  // Bound to another loopback address and a given port (0: a free one), as when several
  // upstream addresses share one port.
  MockUpstream(std::string bind_host, int bind_port, std::vector<std::string> extra = {}) : host(std::move(bind_host)) {
    std::vector<std::string> argv{TOLLGATE_MOCK_BIN, "--host", host, "--port", std::to_string(bind_port)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(argv);
    if (auto line = proc->wait_for_line("listening on", std::chrono::seconds(10))) port = port_from_line(*line);
  }
  nlohmann::json stats() const { return nlohmann::json::parse(http_request(host, port, {"GET", "/__stats", {}, {}}).body); }
  int count(const std::string& path) const {
    const auto s = stats();
    return s["paths"].contains(path) ? s["paths"][path]["count"].get<int>() : 0;
  }
  void reset() const { http_request(host, port, {"POST", "/__reset", {}, {}}); }
  std::string endpoint() const { return host + ":" + std::to_string(port); }
  // Its supplier credentials (tools/mock_upstream: --auth): the settings and what it counted.
  nlohmann::json auth() const { return nlohmann::json::parse(http_request(host, port, {"GET", "/__auth", {}, {}}).body); }
  int set_auth(const nlohmann::json& settings) const {
    return http_request(host, port, {"PUT", "/__auth", {}, settings.dump()}).status;
  }
  int revoke_tokens() const { return http_request(host, port, {"POST", "/__auth/revoke", {}, {}}).status; }
  int token_requests() const { return auth()["token_requests"].get<int>(); }
};

// The OAuth2 client the end-to-end tests use: the mock upstream started with mock_oauth2_args()
// issues tokens to it alone and requires them on its API paths; oauth2_auth() is the gateway's
// upstreams.<name>.auth for it, with kOauth2Env as the gateway's environment.
inline constexpr const char* kOauth2ClientId = "tollgate-e2e-client";
inline constexpr const char* kOauth2Secret = "e2e-s3cr3t-Zq9";
inline const std::map<std::string, std::string> kOauth2Env = {{"E2E_CLIENT_ID", kOauth2ClientId},
                                                             {"E2E_CLIENT_SECRET", kOauth2Secret}};
inline std::vector<std::string> mock_oauth2_args(int expires_in = 1800) {
  return {"--auth", nlohmann::json{{"require", true},
                                   {"client_id", kOauth2ClientId},
                                   {"client_secret", kOauth2Secret},
                                   {"expires_in", expires_in}}.dump()};
}
inline nlohmann::json oauth2_auth(int token_port) {
  return {{"type", "oauth2_client_credentials"},
          {"token_url", "http://127.0.0.1:" + std::to_string(token_port) + "/oauth2/token"},
          {"client_id_env", "E2E_CLIENT_ID"},
          {"client_secret_env", "E2E_CLIENT_SECRET"},
          {"scope", "air.shop air.book"}};
}

// A gateway config with one upstream and the /shopping/search rule (5/s, cache 0.5).
inline nlohmann::json base_config(int upstream_port) {
  return nlohmann::json::parse(R"({
    "listen": "127.0.0.1:0", "threads": 2,
    "admin": {"listen": "127.0.0.1:0", "token_env": "TOLLGATE_E2E_TOKEN"},
    "upstreams": {"ibe": {"url": "http://127.0.0.1:)" + std::to_string(upstream_port) + R"("}},
    "routes": [{"prefix": "/", "upstream": "ibe"}],
    "proxy": {"response_timeout_ms": 1500, "connect_timeout_ms": 1000},
    "limits": {"source": "file", "store": "local", "switch": true, "rules": [
      {"configId": 1, "channelType": "IBE+", "interfaceNo": "S01", "interfaceUrl": "/shopping/search",
       "rateLimit": 5, "cache": 0.5, "status": 1}]}})");
}

// The /shopping/search rule at 1/s, burst 5, a 2.2 s wait window, for the tests that count the
// exact split of 20 requests sent at once. All at the same instant, they get 5 at once, 2 held (1 s
// and 2 s on) and 13 refused (the next slot, 3 s on, is 0.8 s past the window): the same 7 and 13
// as long as every decision falls within 0.8 s of the first, where base_config's 5/s with a 0.5 s
// window gives 7 only within 0.1 s (its next slot, 600 ms on, is 100 ms past the window). The
// refused ones would fit 0.8 s later, less the time their decision came after the first:
// Retry-After 1.
inline constexpr const char* kPacedPolicy = "\"/shopping/search\";q=1;w=1;burst=5";
inline nlohmann::json paced_search_rule() {
  return nlohmann::json::parse(R"({"configId": 1, "channelType": "IBE+", "interfaceNo": "S01",
    "interfaceUrl": "/shopping/search", "rateLimit": 1, "burst": 5, "cache": 2.2, "status": 1})");
}
// base_config with that rule in place of its own.
inline nlohmann::json paced_config(int upstream_port) {
  nlohmann::json c = base_config(upstream_port);
  c["limits"]["rules"] = nlohmann::json::array({paced_search_rule()});
  return c;
}

// The original designs' per-client example as rules: per client IP 3/s and 20/min for the
// whole IBE+ channel, and per client IP + path 2/s and 5/min for /login; /shopping/search keeps a
// roomy bucket so that only the quotas bind. Sliding windows: a burst never gets more than a
// quota's limit even when it crosses a window boundary, so counts do not depend on the wall clock.
inline nlohmann::json quota_example_rules() {
  return nlohmann::json::parse(R"([
    {"configId": 1, "channelType": "IBE+", "interfaceUrl": "/shopping/search", "rateLimit": 100, "status": 1},
    {"configId": 4, "channelType": "IBE+", "interfaceUrl": "/login", "status": 1, "quotas": [
      {"quotaId": 3, "periodSeconds": 1, "limitCount": 2, "algorithm": "sliding", "keyBy": "client_ip_path"},
      {"quotaId": 4, "periodSeconds": 60, "limitCount": 5, "algorithm": "sliding", "keyBy": "client_ip_path"}]},
    {"configId": 9, "channelType": "IBE+", "scope": "channel", "status": 1, "quotas": [
      {"quotaId": 1, "periodSeconds": 1, "limitCount": 3, "algorithm": "sliding", "keyBy": "client_ip"},
      {"quotaId": 2, "periodSeconds": 60, "limitCount": 20, "algorithm": "sliding", "keyBy": "client_ip"}]}])");
}

inline constexpr const char* kAdminToken = "e2e-token";

struct GatewayProcess {
  std::string dir = temp_dir();
  std::unique_ptr<Process> proc;
  int port = -1;
  int admin_port = -1;
  // `nofile` > 0: the gateway runs under that open-file limit (prlimit, soft and hard), so that
  // descriptors run out after a few hundred connections.
  explicit GatewayProcess(const nlohmann::json& config, std::map<std::string, std::string> env = {},
                          bool with_token = true, int nofile = 0) {
    write_file(dir + "/gateway.json", config.dump(2));
    if (with_token) env["TOLLGATE_E2E_TOKEN"] = kAdminToken;
    std::vector<std::string> argv{TOLLGATE_BIN, "--config", dir + "/gateway.json"};
    if (nofile > 0) {
      const std::string n = std::to_string(nofile);
      argv.insert(argv.begin(), {"/usr/bin/prlimit", "--nofile=" + n + ":" + n});
    }
    proc = std::make_unique<Process>(argv, env);
    if (auto l = proc->wait_for_line("proxy listening on", std::chrono::seconds(15))) port = port_from_line(*l);
    if (auto l = proc->wait_for_line("admin listening on", std::chrono::seconds(10))) admin_port = port_from_line(*l);
    proc->wait_for_line("ready", std::chrono::seconds(10));
  }
  HttpResponse admin(const std::string& method, const std::string& target, const std::string& body = "") const {
    return http_request(admin_port, {method, target, {{"Authorization", std::string("Bearer ") + kAdminToken}}, body});
  }
  nlohmann::json admin_json(const std::string& target) const {
    return nlohmann::json::parse(http_get(admin_port, target).body);
  }
};

// The value of an unlabelled series in the gateway's /metrics (-1 if absent).
inline double metric_value(const GatewayProcess& gw, const std::string& name) {
  const std::string m = http_get(gw.admin_port, "/metrics").body;
  const auto at = m.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(m.substr(at + name.size() + 2));
}

// The sum of the series of `name` whose labels include every one of `labels` (in any order, other
// labels allowed) in Prometheus text `metrics`; nullopt when there is none.
inline std::optional<double> metric_series(const std::string& metrics, const std::string& name,
                                           const std::map<std::string, std::string>& labels) {
  std::optional<double> sum;
  std::size_t at = 0;
  while (at < metrics.size()) {
    std::size_t end = metrics.find('\n', at);
    if (end == std::string::npos) end = metrics.size();
    const std::string line = metrics.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    std::size_t i = name.size();
    std::map<std::string, std::string> have;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const std::size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
        std::string key = line.substr(i, eq - i), value;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) ++i;  // \" \\ (and \n, kept as n)
          value.push_back(line[i]);
        }
        have[std::move(key)] = std::move(value);
        ++i;  // the closing quote
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size() || line[i] != '}') continue;  // not Prometheus text
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') continue;  // another metric whose name starts with `name`
    bool match = true;
    for (const auto& [k, v] : labels) match = match && have.count(k) && have[k] == v;
    if (match) sum = sum.value_or(0) + std::stod(line.substr(i + 1));
  }
  return sum;
}

inline std::optional<double> metric_series(const GatewayProcess& gw, const std::string& name,
                                           const std::map<std::string, std::string>& labels) {
  return metric_series(http_get(gw.admin_port, "/metrics").body, name, labels);
}

inline int count_status(const std::vector<HttpResponse>& rs, int status) {
  return static_cast<int>(std::count_if(rs.begin(), rs.end(), [&](const HttpResponse& r) { return r.status == status; }));
}

// Polls `pred` every 50 ms until it holds or `timeout` passes.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace tollgate::testing

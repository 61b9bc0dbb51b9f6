// The worked deployment (conf/examples/supplier-fleet, docs/worked-deployment.md) as a newcomer
// runs it: the example files with only their CHANGE lines changed, a real MariaDB loaded with
// sql/schema.sql and the example's rules.sql, a real Redis, an HTTPS supplier (the mock, with a
// certificate of the tests' private CA) that wants an API key or OAuth2 tokens, `--check` first,
// then a fleet of three gateways. The supplier sees every request with its credential, and no more
// than the table's limit fleet-wide.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "support/mariadb.hpp"
#include "support/redis.hpp"
#include "support/stack.hpp"
#include "support/tls.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kKey = "worked-example-key-7Qp";

std::string example_text(const std::string& name) {
  std::ifstream in(std::string(TOLLGATE_SOURCE_DIR) + "/conf/examples/supplier-fleet/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The example with its CHANGE lines set for this machine: the supplier's address, the CA, the
// key's file, MySQL's and Redis's addresses; the listeners on free ports.
json configured(const std::string& name, int supplier_port, const std::string& db, const std::string& key_file) {
  json c = json::parse(example_text(name), nullptr, true, true);  // the example has comments
  json& nds = c["upstreams"]["nds"];
  nds["url"] = "https://localhost:" + std::to_string(supplier_port);
  nds["tls"]["ca_file"] = test_pki().ca;
  if (nds["auth"]["type"] == "header") nds["auth"]["value_file"] = key_file;
  else nds["auth"]["token_url"] = "https://localhost:" + std::to_string(supplier_port) + "/oauth2/token";
  c["listen"] = "127.0.0.1:0";
  c["admin"]["listen"] = "127.0.0.1:0";
  c["threads"] = 1;
  c["limits"]["mysql"].update({{"port", MariaDb::shared().port()}, {"user", "tg"}, {"database", db}});
  c["limits"]["redis"]["port"] = RedisServer::shared().port();
  c["limits"]["redis"]["key_prefix"] = "wd" + std::to_string(getpid()) + ":";
  return c;
}

// The supplier's own endpoints, over HTTPS as everything it serves.
json supplier_json(int port, const std::string& target) { return json::parse(https_get(port, target).body); }
int supplier_count(int port, const std::string& path) {
  const json s = supplier_json(port, "/__stats");
  return s["paths"].contains(path) ? s["paths"][path]["count"].get<int>() : 0;
}

class WorkedDeployment : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!MariaDb::shared().available()) GTEST_SKIP() << MariaDb::shared().why_not();
    if (!RedisServer::shared().available()) GTEST_SKIP() << RedisServer::shared().why_not();
    RedisServer::shared().flush();
    db = MariaDb::shared().create_database(false);
    MariaDb::shared().sql(db, example_text("rules.sql"));
    key_file = temp_dir() + "/nds-api-key";
    write_file(key_file, kKey);
    ::chmod(key_file.c_str(), 0600);
  }
  std::map<std::string, std::string> env(std::map<std::string, std::string> more = {}) const {
    more["TOLLGATE_MYSQL_PASSWORD"] = "tgpass";
    more["TOLLGATE_ADMIN_TOKEN"] = kAdminToken;
    return more;
  }
  // `tollgate --check` on the configured example: exit 0, and it names the table's rows.
  void check(const json& c, const std::map<std::string, std::string>& e) {
    const std::string dir = temp_dir();
    write_file(dir + "/gateway.json", c.dump(2));
    Process p({TOLLGATE_BIN, "--config", dir + "/gateway.json", "--check"}, e);
    const std::optional<int> code = p.wait_exit(30s);
    ASSERT_TRUE(code.has_value()) << p.output();
    EXPECT_EQ(*code, 0) << p.output();
  }
  // Three gateways, 30 requests at once for /shopping/search (5/s, cache 0.5 in the table) spread
  // over them: the supplier gets the table's limit fleet-wide, each with its credential.
  void fleet_keeps_the_limit(const json& c, const std::map<std::string, std::string>& e, MockUpstream& supplier) {
    std::vector<std::unique_ptr<GatewayProcess>> fleet;
    for (int i = 0; i < 3; ++i) {
      fleet.push_back(std::make_unique<GatewayProcess>(c, e));
      ASSERT_GT(fleet.back()->port, 0) << fleet.back()->proc->output();
    }
    // The rows from MySQL, not the fallback rule in the file: /booking/create is only in the table.
    for (auto& gw : fleet) {
      const json rules = gw->admin_json("/admin/rules");
      ASSERT_EQ(rules["rules"].size(), 2u) << rules.dump();
    }
    // At once, as the page's curl loop sends them: a request waits at most the row's 0.5 s.
    std::atomic<int> ok{0}, limited{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> callers;
    for (int i = 0; i < 30; ++i)
      callers.emplace_back([&, i] {
        const HttpResponse r = http_get(fleet[static_cast<std::size_t>(i) % 3]->port, "/shopping/search?i=" + std::to_string(i));
        ok += r.status == 200;
        limited += r.status == 429;
      });
    for (auto& t : callers) t.join();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(ok + limited, 30);
    // burst 5 + 5/s over the time taken (+1 for the edge), fleet-wide; and some were limited.
    EXPECT_LE(ok.load(), 5 + 5 * took + 1) << "took " << took << " s";
    EXPECT_GE(ok.load(), 5);
    EXPECT_GT(limited.load(), 0);
    EXPECT_EQ(supplier_count(supplier.port, "/shopping/search"), ok.load());
    const json auth = supplier_json(supplier.port, "/__auth");
    EXPECT_EQ(auth["unauthorized"], 0) << auth.dump();
  }
  std::string db, key_file;
};

MockUpstream https_supplier(std::vector<std::string> auth) {
  std::vector<std::string> args{"--tls-cert", test_pki().server_cert, "--tls-key", test_pki().server_key};
  args.insert(args.end(), auth.begin(), auth.end());
  return MockUpstream(args);
}

TEST_F(WorkedDeployment, AnApiKeyFromAFileOnMysqlAndRedis) {
  MockUpstream supplier =
      https_supplier({"--auth", json{{"require_header", {{"name", "X-Api-Key"}, {"value", kKey}}}}.dump()});
  ASSERT_GT(supplier.port, 0);
  const json c = configured("gateway.json", supplier.port, db, key_file);
  check(c, env());
  fleet_keeps_the_limit(c, env(), supplier);
}

TEST_F(WorkedDeployment, AnOauth2TokenOnMysqlAndRedis) {
  MockUpstream supplier = https_supplier(mock_oauth2_args());
  ASSERT_GT(supplier.port, 0);
  json c = configured("gateway-oauth2.json", supplier.port, db, key_file);
  c["upstreams"]["nds"]["auth"]["client_id_env"] = "E2E_CLIENT_ID";
  c["upstreams"]["nds"]["auth"]["client_secret_env"] = "E2E_CLIENT_SECRET";
  std::map<std::string, std::string> e = env(kOauth2Env);
  check(c, e);
  fleet_keeps_the_limit(c, e, supplier);
}

}  // namespace
}  // namespace tollgate::testing

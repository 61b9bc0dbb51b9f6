// The MySQL config source on a real MariaDB, with the real gateway and mock upstream processes.
// These tests share one server and one of them stops it: ctest runs them under RESOURCE_LOCK mysql.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "support/mariadb.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

json mysql_config(int upstream_port, int mysql_port, const std::string& db) {
  json c = base_config(upstream_port);
  c["limits"]["source"] = "mysql";
  c["limits"]["rules"] = json::array();  // no fallback rules unless a test adds them
  // poll_interval_ms left at its default (1 s): the tests hold the gateway to it.
  c["limits"]["mysql"] = {{"host", "127.0.0.1"}, {"port", mysql_port}, {"user", "tg"}, {"database", db},
                          {"password_env", "TOLLGATE_TEST_MYSQL_PASSWORD"}};
  return c;
}

class MysqlE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!db_server().available()) GTEST_SKIP() << db_server().why_not();
    ASSERT_GT(upstream.port, 0);
    db = db_server().create_database(/*seed=*/true);
  }
  static MariaDb& db_server() { return MariaDb::shared(); }
  std::unique_ptr<GatewayProcess> start_gateway(json config = {}) {
    if (config.is_null()) config = mysql_config(upstream.port, db_server().port(), db);
    auto gw = std::make_unique<GatewayProcess>(config, std::map<std::string, std::string>{
                                                           {"TOLLGATE_TEST_MYSQL_PASSWORD", "tgpass"}});
    EXPECT_GT(gw->port, 0) << gw->proc->output();
    return gw;
  }
  // How many of n simultaneous requests the upstream saw.
  int admitted(const GatewayProcess& gw, const std::string& path, int n) {
    const auto rs = concurrent_requests(gw.port, {"GET", path, {}, {}}, n);
    return count_status(rs, 200);
  }
  json rule(const GatewayProcess& gw, int config_id) {
    const json all = gw.admin_json("/admin/rules");
    for (const auto& r : all["rules"])
      if (r["configId"] == config_id) return r;
    return nullptr;
  }
  // `tollgate --check` on `config`: its exit code, its output and how long it took.
  struct CheckRun {
    std::optional<int> code;
    std::string output;
    std::chrono::steady_clock::duration took;
  };
  CheckRun check(const json& config) {
    const std::string file = temp_dir() + "/gateway.json";
    write_file(file, config.dump(2));
    const auto t = std::chrono::steady_clock::now();
    Process p({TOLLGATE_BIN, "--check", "--config", file},
              {{"TOLLGATE_TEST_MYSQL_PASSWORD", "tgpass"}, {"TOLLGATE_E2E_TOKEN", kAdminToken}});
    const auto code = p.wait_exit(30s);
    const auto took = std::chrono::steady_clock::now() - t;
    return {code, p.output(), took};
  }
  MockUpstream upstream;
  std::string db;
};

std::string source_file(const std::string& path) {
  std::ifstream in(std::string(TOLLGATE_SOURCE_DIR) + "/" + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(MysqlE2E, LoadsTheSeededRows) {
  // The seeded /shopping/search row (5/s, cache 0.5) gives 7 of 20 only if the 20 decisions fall
  // within 0.1 s of each other; in this test's own database it becomes the 1/s rule with a 2.2 s
  // window (support/stack.hpp), which gives the same 7 within 0.8 s, and its burst column is read.
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 1, burst = 5, cache = 2.2 WHERE configId = 1");
  auto gw = start_gateway();
  const json rules = gw->admin_json("/admin/rules");
  EXPECT_EQ(rules["rules"].size(), 4u);
  EXPECT_EQ(rules["source"], "mysql:tg@127.0.0.1:" + std::to_string(db_server().port()) + "/" + db);
  EXPECT_EQ(rules["config_source"]["healthy"], true);
  // /shopping/search: 1/s, burst 5, cache 2.2 -> 7 of 20 (as with the file).
  const json search = rule(*gw, 1);
  EXPECT_EQ(search["rateLimit"], 1) << search.dump();
  EXPECT_EQ(search["burst"], 5) << search.dump();
  EXPECT_EQ(admitted(*gw, "/ibe/shopping/search", 20), 7);
  // /login: the seeded quotas (per client IP and path: 2 per second, 5 per minute).
  const json login = rule(*gw, 4);
  ASSERT_EQ(login["quotas"].size(), 2u) << login.dump();
  EXPECT_EQ(login["quotas"][0]["limitCount"], 2);
  EXPECT_EQ(login["quotas"][1]["periodSeconds"], 60);
  EXPECT_EQ(login["rateLimit"], nullptr);
}

TEST_F(MysqlE2E, EditedQuotaRowIsInForceWithoutRestart) {
  // Only the per-minute quota, sliding: a burst never gets more than its limit, even across a
  // window boundary, so the counts below do not depend on when the test runs.
  db_server().sql(db, "UPDATE t_ratelimite_quota SET status = 0 WHERE quotaId = 1");
  db_server().sql(db, "UPDATE t_ratelimite_quota SET algorithm = 'sliding' WHERE quotaId = 2");
  auto gw = start_gateway();
  EXPECT_EQ(admitted(*gw, "/ibe/login", 10), 5);
  const auto edited = std::chrono::steady_clock::now();
  db_server().sql(db, "UPDATE t_ratelimite_quota SET limitCount = 8 WHERE quotaId = 2");
  ASSERT_TRUE(eventually([&] { return rule(*gw, 4)["quotas"][0]["limitCount"] == 8; }, 2s)) << gw->proc->output();
  EXPECT_LT(std::chrono::steady_clock::now() - edited, 2s);
  // An edited quota counts afresh under its new terms.
  EXPECT_EQ(admitted(*gw, "/ibe/login", 10), 8);
  // A bad edit is rejected by name and not applied: the quota's last valid version stays in force.
  db_server().sql(db, "UPDATE t_ratelimite_quota SET keyBy = 'cookie' WHERE quotaId = 2");
  ASSERT_TRUE(eventually([&] { return gw->admin_json("/admin/rules")["rejected"].size() == 1; }, 2s));
  const json bad = gw->admin_json("/admin/rules")["rejected"][0];
  EXPECT_EQ(bad["origin"], "t_ratelimite_quota[quotaId=2]");
  EXPECT_EQ(bad["field"], "keyBy");
  EXPECT_EQ(bad["kept_previous"], true);
  EXPECT_EQ(rule(*gw, 4)["quotas"][0]["limitCount"], 8);
  EXPECT_EQ(admitted(*gw, "/ibe/login", 10), 0);  // its 8 for this minute are used
}

TEST_F(MysqlE2E, ABadEditKeepsTheRowsLastValidVersion) {
  auto gw = start_gateway();
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 0 WHERE configId = 2");
  ASSERT_TRUE(eventually([&] { return gw->admin_json("/admin/rules")["rejected"].size() == 1; }, 2s));
  const json bad = gw->admin_json("/admin/rules")["rejected"][0];
  EXPECT_EQ(bad["configId"], 2);
  EXPECT_EQ(bad["field"], "rateLimit");
  EXPECT_EQ(bad["kept_previous"], true);
  EXPECT_TRUE(gw->proc->wait_for_line("its last valid version stays in force", 2s));
  EXPECT_EQ(rule(*gw, 2)["rateLimit"], 10.0);  // still limited as before the bad edit
  // Fixed: the new value applies.
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 20 WHERE configId = 2");
  ASSERT_TRUE(eventually([&] { return rule(*gw, 2)["rateLimit"] == 20.0; }, 2s));
  EXPECT_EQ(gw->admin_json("/admin/rules")["rejected"].size(), 0u);
}

TEST_F(MysqlE2E, AdaptiveColumnIsReadAndCheckedLikeMode) {
  // NULL (the seeded rows) is off; a value is read from the column, a bad edit is
  // rejected by name and the row's last valid version stays in force.
  db_server().sql(db, "UPDATE t_ratelimite_conf SET adaptive = 'shadow' WHERE configId = 2");
  auto gw = start_gateway();
  EXPECT_EQ(rule(*gw, 1)["adaptive"], "off");
  EXPECT_EQ(rule(*gw, 2)["adaptive"], "shadow");
  db_server().sql(db, "UPDATE t_ratelimite_conf SET adaptive = 'on' WHERE configId = 2");
  ASSERT_TRUE(eventually([&] { return rule(*gw, 2)["adaptive"] == "on"; }, 2s));
  db_server().sql(db, "UPDATE t_ratelimite_conf SET adaptive = 'fast' WHERE configId = 2");
  ASSERT_TRUE(eventually([&] { return gw->admin_json("/admin/rules")["rejected"].size() == 1; }, 2s));
  const json bad = gw->admin_json("/admin/rules")["rejected"][0];
  EXPECT_EQ(bad["field"], "adaptive");
  EXPECT_EQ(bad["reason"], "must be \"on\", \"shadow\" or \"off\"");
  EXPECT_EQ(bad["kept_previous"], true);
  EXPECT_EQ(rule(*gw, 2)["adaptive"], "on");
}

TEST_F(MysqlE2E, MatchCaseColumnIsReadAndChecked) {
  // NULL is limits.match.case (sensitive here); a value is read from the column, and a bad edit is
  // rejected by name while the row's last valid version stays in force.
  db_server().sql(db, "UPDATE t_ratelimite_conf SET matchCase = 'insensitive' WHERE configId = 1");
  auto gw = start_gateway();
  EXPECT_EQ(rule(*gw, 1)["matchCase"], "insensitive");
  EXPECT_EQ(rule(*gw, 2)["matchCase"], "sensitive");
  db_server().sql(db, "UPDATE t_ratelimite_conf SET matchCase = 'any' WHERE configId = 1");
  ASSERT_TRUE(eventually([&] { return gw->admin_json("/admin/rules")["rejected"].size() == 1; }, 2s));
  const json bad = gw->admin_json("/admin/rules")["rejected"][0];
  EXPECT_EQ(bad["field"], "matchCase");
  EXPECT_EQ(bad["kept_previous"], true);
  EXPECT_EQ(rule(*gw, 1)["matchCase"], "insensitive");
}

TEST_F(MysqlE2E, CostPriorityAndMeterColumnsAreReadAndChecked) {
  // The columns of cost, classes and meters: read where set (NULL: as before), a bad edit rejected
  // by name with the row's last valid version in force.
  db_server().sql(db, "UPDATE t_ratelimite_conf SET cost = 2, priority = "
                      "'{\"by\":\"method\",\"classes\":[\"POST\",\"GET\"],\"default\":\"GET\",\"reserve\":{\"POST\":0.25}}' "
                      "WHERE configId = 1");
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = NULL, algorithm = 'trtcm', cir = 5, cbs = 5, pir = 10, "
                      "pbs = 10, yellow = 'wait' WHERE configId = 2");
  auto gw = start_gateway();
  const json r1 = rule(*gw, 1);
  EXPECT_EQ(r1["cost"], 2);
  EXPECT_EQ(r1["priority"]["classes"], json::array({"POST", "GET"}));
  EXPECT_EQ(r1["priority"]["reserve"]["POST"], 0.25);
  const json r2 = rule(*gw, 2);
  EXPECT_EQ(r2["meter"]["algorithm"], "trtcm");
  EXPECT_EQ(r2["meter"]["pir"], 10);
  EXPECT_EQ(r2["meter"]["yellow"], "wait");
  db_server().sql(db, "UPDATE t_ratelimite_conf SET priority = '{\"by\":\"method\",\"classes\":[\"POST\"]}' "
                      "WHERE configId = 1");
  ASSERT_TRUE(eventually([&] { return gw->admin_json("/admin/rules")["rejected"].size() == 1; }, 2s));
  const json bad = gw->admin_json("/admin/rules")["rejected"][0];
  EXPECT_EQ(bad["field"], "priority.classes");
  EXPECT_EQ(bad["kept_previous"], true);
  EXPECT_EQ(rule(*gw, 1)["priority"]["classes"], json::array({"POST", "GET"}));
}

TEST_F(MysqlE2E, SqlScriptsAreSafeToRunTwice) {
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 99 WHERE configId = 1");
  db_server().sql(db, "UPDATE t_ratelimite_quota SET limitCount = 99 WHERE quotaId = 1");
  const auto file = [](const char* name) {
    std::ifstream in(std::string(TOLLGATE_SOURCE_DIR) + "/sql/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  db_server().sql(db, file("schema.sql"));
  db_server().sql(db, file("seed.sql"));
  EXPECT_EQ(db_server().sql(db, "SELECT COUNT(*), SUM(rateLimit) FROM t_ratelimite_conf"), "4\t17\n");
  EXPECT_EQ(db_server().sql(db, "SELECT COUNT(*), SUM(limitCount) FROM t_ratelimite_quota"), "2\t7\n");
  EXPECT_EQ(db_server().sql(db, "SELECT COUNT(*) FROM t_ratelimite_switch"), "1\n");
}

TEST_F(MysqlE2E, EditedRateIsInForceWithinTwoSeconds) {
  db_server().sql(db, "UPDATE t_ratelimite_conf SET cache = 0 WHERE configId = 2");  // /pricing 10/s, no wait
  auto gw = start_gateway();
  ASSERT_EQ(rule(*gw, 2)["cache"], 0.0);
  const auto edited = std::chrono::steady_clock::now();
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 30 WHERE configId = 2");
  ASSERT_TRUE(eventually([&] { return rule(*gw, 2)["rateLimit"] == 30.0; }, 2s)) << gw->proc->output();
  EXPECT_LT(std::chrono::steady_clock::now() - edited, 2s);
  // The bucket rests to its new size (30) in one second: then 30 of 40 simultaneous requests pass
  // (one or two more may be minted while the 40 arrive).
  std::this_thread::sleep_for(1100ms);
  const int n = admitted(*gw, "/ibe/pricing", 40);
  EXPECT_GE(n, 30);
  EXPECT_LE(n, 32);
}

TEST_F(MysqlE2E, DisableDeleteAndInsertRows) {
  db_server().sql(db, "UPDATE t_ratelimite_conf SET cache = 0 WHERE configId = 2");
  auto gw = start_gateway();
  EXPECT_EQ(admitted(*gw, "/ibe/booking", 10), 4);  // 2/s with a 1 s window: 2 at once + 2 held (0.5 s, 1 s)
  db_server().sql(db, "UPDATE t_ratelimite_conf SET status = 0 WHERE configId = 3");
  ASSERT_TRUE(eventually([&] { return rule(*gw, 3)["status"] == 0; }, 2s));
  EXPECT_EQ(admitted(*gw, "/ibe/booking", 10), 10);  // disabled: limits nothing

  db_server().sql(db, "INSERT INTO t_ratelimite_conf (configId, channelType, interfaceNo, interfaceUrl, rateLimit, "
                      "cache, status) VALUES (10, 'IBE+', 'T01', '/ticketing', 2, 0, 1)");
  ASSERT_TRUE(eventually([&] { return !rule(*gw, 10).is_null(); }, 2s));
  EXPECT_EQ(admitted(*gw, "/ibe/ticketing", 10), 2);

  db_server().sql(db, "DELETE FROM t_ratelimite_conf WHERE configId = 10");
  ASSERT_TRUE(eventually([&] { return rule(*gw, 10).is_null(); }, 2s));
  EXPECT_EQ(admitted(*gw, "/ibe/ticketing", 10), 10);
}

TEST_F(MysqlE2E, BadRowIsRejectedWithItsReasonWhileOthersApply) {
  auto gw = start_gateway();
  db_server().sql(db, "INSERT INTO t_ratelimite_conf (configId, channelType, interfaceUrl, rateLimit, status) VALUES "
                      "(20, 'IBE+', '/refund', 0, 1), (21, 'IBE+', 'no-slash', 5, 1), "
                      "(22, 'IBE+', '/shopping/search', 9, 1), (23, 'IBE+', '/change', 4, 1)");
  ASSERT_TRUE(eventually([&] { return !rule(*gw, 23).is_null(); }, 2s));
  const json rules = gw->admin_json("/admin/rules");
  std::map<int, std::string> reasons;
  for (const auto& r : rules["rejected"]) reasons[r["configId"].get<int>()] = r["field"].get<std::string>() + ": " + r["reason"].get<std::string>();
  EXPECT_EQ(reasons[20], "rateLimit: must be > 0");
  EXPECT_EQ(reasons[21], "interfaceUrl: must start with '/'");
  EXPECT_EQ(reasons[22], "interfaceUrl: another enabled row (configId 1) already limits /shopping/search");
  EXPECT_EQ(rules["config_source"]["rejected_rows"], 3);
  // Each is logged once, naming the row.
  EXPECT_TRUE(gw->proc->wait_for_line("t_ratelimite_conf[configId=20].rateLimit: must be > 0", 2s));
  EXPECT_TRUE(rule(*gw, 20).is_null());
  EXPECT_EQ(rule(*gw, 1)["rateLimit"], 5.0);  // the original row is untouched by its duplicate
  EXPECT_EQ(admitted(*gw, "/ibe/refund", 10), 10);
}

TEST_F(MysqlE2E, SwitchFlipsTheWholeFleetAndIsAudited) {
  auto a = start_gateway();
  auto b = start_gateway();
  const auto put = a->admin("PUT", "/admin/switch", R"({"enabled":false})");
  ASSERT_EQ(put.status, 200) << put.body;
  const auto flipped = std::chrono::steady_clock::now();
  EXPECT_EQ(a->admin_json("/admin/switch")["enabled"], false);  // at once on the instance that wrote it
  ASSERT_TRUE(eventually([&] { return b->admin_json("/admin/switch")["enabled"] == false; }, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - flipped, 2s);
  const json sw = b->admin_json("/admin/switch");
  EXPECT_EQ(sw["source"], "mysql");
  EXPECT_EQ(sw["changed_by"], "admin@127.0.0.1");
  EXPECT_EQ(admitted(*b, "/ibe/shopping/search", 20), 20);  // off on b too
  EXPECT_EQ(db_server().sql(db, "SELECT name, oldState, newState, changedBy FROM t_ratelimite_switch_audit"),
            "global\t1\t0\tadmin@127.0.0.1\n");
  // Without the token nothing is written.
  EXPECT_EQ(http_request(b->admin_port, {"PUT", "/admin/switch", {}, R"({"enabled":true})"}).status, 401);
  EXPECT_EQ(db_server().sql(db, "SELECT COUNT(*) FROM t_ratelimite_switch_audit"), "1\n");
}

TEST_F(MysqlE2E, RevertAfterIsFleetWideAndAudited) {
  auto a = start_gateway();
  auto b = start_gateway();
  // Due after 3 s: b (polling every second) sees the change well before it reverts.
  const auto put = a->admin("PUT", "/admin/switch", R"({"state":"shadow","revert_after_s":3})");
  ASSERT_EQ(put.status, 200) << put.body;
  ASSERT_TRUE(eventually([&] { return b->admin_json("/admin/switch")["state"] == "shadow"; }, 2s));
  EXPECT_EQ(b->admin_json("/admin/switch")["revert_to"], "enforce");
  // The first instance to poll after it is due reverts the row, once, for everyone.
  ASSERT_TRUE(eventually([&] { return a->admin_json("/admin/switch")["state"] == "enforce"; }, 6s));
  ASSERT_TRUE(eventually([&] { return b->admin_json("/admin/switch")["state"] == "enforce"; }, 3s));
  EXPECT_EQ(db_server().sql(db, "SELECT oldState, newState, changedBy FROM t_ratelimite_switch_audit ORDER BY auditId"),
            "1\t2\tadmin@127.0.0.1\n2\t1\trevert_after\n");
  EXPECT_EQ(db_server().sql(db, "SELECT state, revertAt IS NULL FROM t_ratelimite_switch"), "1\t1\n");
}

TEST_F(MysqlE2E, AnUnknownSwitchStateIsExplainedAndNeverWritten) {
  auto gw = start_gateway();
  ASSERT_EQ(gw->admin_json("/admin/switch")["state"], "enforce");
  // Off first, so that a state read as enforce (what 9 once meant) would show as a change.
  ASSERT_EQ(gw->admin("PUT", "/admin/switch", R"({"state":"off"})").status, 200);
  db_server().sql(db, "UPDATE t_ratelimite_switch SET state = 9, changedBy = 'typo' WHERE name = 'global'");
  ASSERT_TRUE(gw->proc->wait_for_line("t_ratelimite_switch[name=global].state: 9 is not 0 (off), 1 (enforce) or 2 (shadow)", 5s))
      << gw->proc->output();
  EXPECT_EQ(gw->admin_json("/admin/switch")["state"], "off");  // as it was
  EXPECT_EQ(admitted(*gw, "/ibe/shopping/search", 20), 20);

  // A due revert to an unknown state: not done, not written, and said.
  db_server().sql(db, "UPDATE t_ratelimite_switch SET state = 2, revertTo = 77, "
                      "revertAt = CURRENT_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE name = 'global'");
  ASSERT_TRUE(eventually([&] { return gw->admin_json("/admin/switch")["state"] == "shadow"; }, 5s));
  ASSERT_TRUE(gw->proc->wait_for_line("t_ratelimite_switch[name=global].revertTo: 77 is not 0", 5s)) << gw->proc->output();
  std::this_thread::sleep_for(2500ms);  // two more polls, each of which would do a due revert
  EXPECT_EQ(db_server().sql(db, "SELECT state, revertTo FROM t_ratelimite_switch WHERE name = 'global'"), "2\t77\n");
  EXPECT_EQ(db_server().sql(db, "SELECT COUNT(*) FROM t_ratelimite_switch_audit WHERE newState NOT IN (0, 1, 2)"), "0\n");
  EXPECT_EQ(gw->admin_json("/admin/switch")["state"], "shadow");
}

TEST_F(MysqlE2E, ReloadNowAndTokenName) {
  json c = mysql_config(upstream.port, db_server().port(), db);
  c["admin"]["token_name"] = "ops-oncall";
  c["limits"]["mysql"]["poll_interval_ms"] = 60000;  // only a forced reload can pick the edit up
  auto gw = start_gateway(c);
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 8 WHERE configId = 1");
  EXPECT_EQ(rule(*gw, 1)["rateLimit"], 5.0);
  EXPECT_EQ(http_request(gw->admin_port, {"POST", "/admin/reload", {}, {}}).status, 401);
  const auto r = gw->admin("POST", "/admin/reload");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["reloaded"], true);
  EXPECT_EQ(rule(*gw, 1)["rateLimit"], 8.0);
  ASSERT_EQ(gw->admin("PUT", "/admin/switch", R"({"enabled":false})").status, 200);
  EXPECT_EQ(db_server().sql(db, "SELECT changedBy FROM t_ratelimite_switch WHERE name = 'global'"), "ops-oncall\n");
}

// Stops the shared server and starts it again (ctest runs the MySQL tests one at a time).
TEST_F(MysqlE2E, ServerOutageKeepsLastRulesAndRecovers) {
  db_server().sql(db, "UPDATE t_ratelimite_conf SET cache = 0 WHERE configId = 3");  // /booking 2/s, no wait
  auto gw = start_gateway();
  db_server().stop();
  ASSERT_TRUE(eventually([&] { return gw->admin_json("/readyz")["config_source"]["healthy"] == false; }, 5s));
  const json ready = gw->admin_json("/readyz");
  EXPECT_EQ(ready["ready"], true);  // still enforcing the last good rules
  EXPECT_NE(ready["config_source"]["last_error"].get<std::string>().find("mysql"), std::string::npos);
  EXPECT_EQ(admitted(*gw, "/ibe/booking", 10), 2);
  // A switch change cannot be written: refused, and nothing changes.
  EXPECT_EQ(gw->admin("PUT", "/admin/switch", R"({"enabled":false})").status, 503);
  EXPECT_EQ(gw->admin_json("/admin/switch")["enabled"], true);

  // A second gateway started now falls back to the rules in its file.
  json c = mysql_config(upstream.port, db_server().port(), db);
  c["limits"]["rules"] = json::array({{{"configId", 1}, {"interfaceUrl", "/fallback"}, {"rateLimit", 1},
                                       {"cache", 0}, {"status", 1}}});
  auto late = start_gateway(c);
  EXPECT_NE(late->admin_json("/admin/rules")["source"].get<std::string>().find("file-fallback"), std::string::npos);
  EXPECT_EQ(admitted(*late, "/ibe/fallback", 5), 1);

  db_server().start();
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 4 WHERE configId = 3");
  ASSERT_TRUE(eventually([&] { return rule(*gw, 3)["rateLimit"] == 4.0; }, 10s)) << gw->proc->output();
  EXPECT_EQ(gw->admin_json("/readyz")["config_source"]["healthy"], true);
  ASSERT_TRUE(eventually([&] { return late->admin_json("/admin/rules")["source"].get<std::string>().rfind("mysql:", 0) == 0; }, 10s));
  EXPECT_EQ(admitted(*late, "/ibe/fallback", 5), 5);  // the MySQL rules replaced the fallback
  // Incidents are logged once each, start and end.
  EXPECT_TRUE(gw->proc->wait_for_line("is back", 5s));
  const std::string out = gw->proc->output();
  EXPECT_NE(out.find("failed, keeping config"), std::string::npos);
  EXPECT_EQ(out.find("failed, keeping config"), out.rfind("failed, keeping config"));
  EXPECT_NE(out.find("is back"), std::string::npos);
}

// --check reads the rows once and checks them as the gateway would: each rejected row is named by
// its id and field and fails the check; a good table passes; no retry loop.
TEST_F(MysqlE2E, CheckNamesEachRejectedRowAndFails) {
  const json config = mysql_config(upstream.port, db_server().port(), db);
  const CheckRun good = check(config);
  EXPECT_EQ(good.code, 0) << good.output;
  EXPECT_NE(good.output.find("is valid"), std::string::npos) << good.output;
  EXPECT_EQ(good.output.find("retrying"), std::string::npos) << good.output;

  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 0 WHERE configId = 2");
  db_server().sql(db, "UPDATE t_ratelimite_quota SET keyBy = 'cookie' WHERE quotaId = 1");
  const CheckRun bad = check(config);
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("2 rows the gateway would reject"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("t_ratelimite_conf[configId=2].rateLimit: must be > 0"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("t_ratelimite_quota[quotaId=1].keyBy: "), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("is valid"), std::string::npos) << bad.output;

  // A switch row the gateway would not apply fails it too.
  db_server().sql(db, "UPDATE t_ratelimite_conf SET rateLimit = 10 WHERE configId = 2");
  db_server().sql(db, "UPDATE t_ratelimite_quota SET keyBy = 'client_ip' WHERE quotaId = 1");
  db_server().sql(db, "UPDATE t_ratelimite_switch SET state = 7 WHERE name = 'global'");
  const CheckRun sw = check(config);
  EXPECT_EQ(sw.code, 1) << sw.output;
  EXPECT_NE(sw.output.find("t_ratelimite_switch[name=global].state: 7 is not 0 (off)"), std::string::npos) << sw.output;
}

// A MySQL that cannot be reached fails the check at once, naming it; a start would serve the
// file's rules and retry.
TEST_F(MysqlE2E, CheckFailsFastOnAnUnreachableMysql) {
  const int closed = unused_port();
  const CheckRun r = check(mysql_config(upstream.port, closed, db));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_LT(r.took, 10s) << r.output;
  EXPECT_NE(r.output.find("cannot read the rules from mysql:tg@127.0.0.1:" + std::to_string(closed) + "/" + db),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("retrying"), std::string::npos) << r.output;
}

// sql/upgrade.sql on the tables of the first shipped schema, with rows in them: run twice, the
// tables are the current schema's, column for column, every value is kept, every row loads, and a
// row can now hold what the file takes (a fractional rateLimit, a cache over 9.99 s).
TEST_F(MysqlE2E, TheOldestTableUpgradesWithoutLoss) {
  const std::string old_db = db + "_first";
  db_server().sql("", "CREATE DATABASE " + old_db);
  db_server().sql(old_db, source_file("tests/integration/sql/schema-first.sql"));
  db_server().sql(old_db, "INSERT INTO t_ratelimite_conf (configId, channelType, interfaceNo, interfaceUrl, rateLimit, "
                          "cache, status, burst) VALUES (1, 'IBE+', 'S01', '/shopping/search', 5, 0.50, 1, NULL), "
                          "(2, 'IBE+', 'P01', '/pricing', 10, 0.20, 1, 20), (3, 'IBE+', 'B01', '/booking', 2, 0.30, 0, NULL), "
                          "(7, 'NDC', NULL, '/ndc/offers', 3, NULL, 1, 6)");
  db_server().sql(old_db, "UPDATE t_ratelimite_switch SET state = 0, changedBy = 'ops' WHERE name = 'global'");
  db_server().sql(old_db, "INSERT INTO t_ratelimite_switch_audit (name, oldState, newState, changedBy) "
                          "VALUES ('global', 1, 0, 'ops')");
  const std::string rows_query =
      "SELECT configId, channelType, IFNULL(interfaceNo, '-'), interfaceUrl, rateLimit, CAST(cache AS DECIMAL(6,2)), "
      "status, IFNULL(burst, '-'), lastModifyTime FROM t_ratelimite_conf ORDER BY configId; "
      "SELECT name, state, changedBy, changedAt FROM t_ratelimite_switch; "
      "SELECT auditId, name, oldState, newState, changedBy, changedAt FROM t_ratelimite_switch_audit";
  const std::string before = db_server().sql(old_db, rows_query);
  json config = mysql_config(upstream.port, db_server().port(), old_db);
  EXPECT_EQ(check(config).code, 1);  // not readable as it is (no revertAt): the upgrade is needed

  db_server().sql(old_db, source_file("sql/upgrade.sql"));
  db_server().sql(old_db, source_file("sql/upgrade.sql"));
  EXPECT_EQ(db_server().sql(old_db, rows_query), before);
  EXPECT_EQ(db_server().sql(old_db, "SELECT configId, cache FROM t_ratelimite_conf WHERE cache IN (0.5, 0.2, 0.3)"),
            "1\t0.5\n2\t0.2\n3\t0.3\n");  // the values written, not the FLOAT's 0.200000003
  // Column for column, index for index, the tables sql/schema.sql makes.
  const std::string fresh = db_server().create_database(/*seed=*/false);
  for (const char* table : {"t_ratelimite_conf", "t_ratelimite_quota", "t_ratelimite_switch", "t_ratelimite_switch_audit"}) {
    const auto shape = [&](const std::string& d) {
      std::string t = db_server().sql(d, std::string("SHOW CREATE TABLE ") + table);
      const auto at = t.find(" AUTO_INCREMENT=");
      if (at != std::string::npos) t.erase(at, t.find(' ', at + 1) - at);
      return t;
    };
    EXPECT_EQ(shape(old_db), shape(fresh)) << table;
  }

  const CheckRun checked = check(config);
  EXPECT_EQ(checked.code, 0) << checked.output;
  db_server().sql(old_db, "INSERT INTO t_ratelimite_conf (configId, channelType, interfaceUrl, rateLimit, cache, status) "
                          "VALUES (8, 'NDC', '/ndc/orders', 0.5, 12.5, 1)");
  auto gw = start_gateway(config);
  const json rules = gw->admin_json("/admin/rules");
  EXPECT_EQ(rules["rules"].size(), 5u) << rules.dump();
  EXPECT_EQ(rules["rejected"].size(), 0u) << rules.dump();
  EXPECT_EQ(rule(*gw, 2)["cache"], 0.2);
  EXPECT_EQ(rule(*gw, 2)["burst"], 20);
  EXPECT_EQ(rule(*gw, 3)["status"], 0);
  EXPECT_EQ(rule(*gw, 8)["rateLimit"], 0.5);
  EXPECT_EQ(rule(*gw, 8)["cache"], 12.5);
  EXPECT_EQ(gw->admin_json("/admin/switch")["enabled"], false);  // the switch row kept its state
}

}  // namespace
}  // namespace tollgate::testing

#include <gtest/gtest.h>

#include "support/config_text.hpp"
#include "tollgate/config/config_source.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/snapshot.hpp"

namespace tollgate::config {
namespace {

using testing::error_of;
using testing::with_rules;

TEST(GatewayConfig, ShippedDefaultIsValid) {
  const GatewayConfig c = load_gateway_config(TOLLGATE_SOURCE_DIR "/conf/gateway.json");
  EXPECT_EQ(c.listen.port, 8080);
  EXPECT_EQ(c.admin.listen.host, "127.0.0.1");
  ASSERT_EQ(c.upstreams.size(), 1u);
  EXPECT_EQ(c.upstreams[0].port, 9000);
  const LoadResult r = FileSource::from_rows(c.limits.rows, c.limits.switch_mode);
  ASSERT_FALSE(r.rules.rules.empty());
  EXPECT_EQ(r.rules.rules[0].interface_url, "/shopping/search");
  EXPECT_DOUBLE_EQ(r.rules.rules[0].rate_limit, 5);
  EXPECT_EQ(r.rules.rules[0].timeout_us(), 500000);
}

TEST(GatewayConfig, DefaultsWhenOmitted) {
  const GatewayConfig c = parse_gateway_config(with_rules("[]"));
  EXPECT_EQ(c.listen.to_string(), "0.0.0.0:8080");
  EXPECT_EQ(c.admin.listen.to_string(), "127.0.0.1:9901");
  EXPECT_EQ(c.admin.token_env, "TOLLGATE_ADMIN_TOKEN");
  EXPECT_EQ(c.proxy.max_header_bytes, 16384u);
  EXPECT_EQ(c.limits.switch_mode, SwitchMode::enforce);
}

TEST(GatewayConfig, ErrorsNameTheFieldPath) {
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":0,"status":1}])")),
            "limits.rules[0].rateLimit: must be > 0 (configId 1)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1},
                                    {"configId":2,"interfaceUrl":"a","rateLimit":5,"status":1}])")),
            "limits.rules[1].interfaceUrl: must start with '/' (configId 2)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"cache":61,"status":1}])")),
            "limits.rules[0].cache: must be within [0, 60] seconds (configId 1)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":"5","status":1}])")),
            "limits.rules[0].rateLimit: must be a number (configId 1)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"colour":2}])")),
            "limits.rules[0].colour: unknown field (configId 1)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"","rateLimit":5,"status":1}])")),
            "limits.rules[0].interfaceUrl: must not be empty (configId 1)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":3}])")),
            "limits.rules[0].status: must be 0 or 1 (configId 1)");
  EXPECT_EQ(error_of(R"({"upstreams":{"ibe":{"url":"ftp://x"}},"routes":[{"prefix":"/","upstream":"ibe"}]})"),
            "upstreams.ibe.url: must start with http:// or https://");
  EXPECT_EQ(error_of(R"({"upstreams":{"ibe":{"url":"http://x:1"}},"routes":[{"prefix":"/","upstream":"nope"}]})"),
            "routes[0].upstream: names no upstream: 'nope'");
  EXPECT_EQ(error_of(R"({"listn":"0.0.0.0:1"})"), "listn: unknown field");
  EXPECT_EQ(error_of(R"({"upstreams":{"ibe":{"url":"http://x:1"}},"routes":[{"prefix":"/","upstream":"ibe"}],
                        "proxy":{"max_header_bytes":10}})"),
            "proxy.max_header_bytes: must be within [1024, 1048576]");
  EXPECT_NE(error_of("{not json").find("config: invalid JSON"), std::string::npos);
  // Found by fuzzing: a number too large for a double is a config error too, not another exception.
  EXPECT_NE(error_of(R"({"threads": 7777775700E25823})").find("config: invalid JSON"), std::string::npos);
}

TEST(RuleValidation, TwoEnabledRowsForOneUrlKeepTheFirst) {
  std::vector<RawRow> rows(3);
  for (int i = 0; i < 3; ++i) {
    rows[i].config_id = i + 1;
    rows[i].interface_url = "/same";
    rows[i].rate_limit = 5;
    rows[i].status = i == 1 ? 0 : 1;
  }
  const ValidatedRules v = validate_rows(rows);
  ASSERT_EQ(v.rules.size(), 2u);  // row 1 (enabled) and row 2 (disabled)
  ASSERT_EQ(v.rejected.size(), 1u);
  EXPECT_EQ(*v.rejected[0].config_id, 3);
  EXPECT_EQ(v.rejected[0].field, "interfaceUrl");
  EXPECT_NE(v.rejected[0].reason.find("configId 1"), std::string::npos);
}

TEST(RuleValidation, OriginalRowKeepsItsMeaning) {
  RawRow r;
  r.config_id = 9;
  r.channel_type = "IBE+";
  r.interface_no = "S01";
  r.interface_url = "/shopping/search";
  r.rate_limit = 5;
  r.status = 1;  // cache absent: 0.5 s
  const ValidatedRules v = validate_rows({r});
  ASSERT_EQ(v.rules.size(), 1u);
  const Rule& rule = v.rules[0];
  EXPECT_TRUE(rule.enabled);
  EXPECT_DOUBLE_EQ(rule.cache_s, 0.5);
  EXPECT_FALSE(rule.params.burst.has_value());  // one second of permits
  EXPECT_EQ(rule.params.warmup_us, 0);
  EXPECT_DOUBLE_EQ(limiter::shape_of(rule.params).max_permits, 5);
}

TEST(RuleValidation, RejectsBadExtensions) {
  RawRow r;
  r.config_id = 1;
  r.interface_url = "/a";
  r.rate_limit = 5;
  r.status = 1;
  r.burst = 0.5;
  EXPECT_EQ(validate_rows({r}).rejected.at(0).field, "burst");
  r.burst.reset();
  r.warmup_seconds = -1;
  EXPECT_EQ(validate_rows({r}).rejected.at(0).field, "warmupSeconds");
  r.warmup_seconds.reset();
  r.rate_limit = 2e6;
  EXPECT_EQ(validate_rows({r}).rejected.at(0).field, "rateLimit");
}

// The opt-in per-rule `adaptive` field.
ValidatedRules adaptive_rules(const std::string& json_rows) { return validate_rows(parse_rule_rows(json_rows, "rules")); }

std::string adaptive_row(const std::string& extra) {
  return R"([{"configId": 1, "interfaceUrl": "/a", "rateLimit": 5, "status": 1)" + extra + "}]";
}

TEST(RuleValidation, AnIdPastItsRangeIsRefusedNotWrapped) {
  // 2^63 + 5 would read as -9223372036854775803: another row's id, or a negative one.
  EXPECT_EQ(error_of(with_rules(R"([{"configId":9223372036854775813,"interfaceUrl":"/a","rateLimit":5,"status":1}])")),
            "limits.rules[0].configId: 9223372036854775813 is out of range (at most 9223372036854775807)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,
                                     "quotas":[{"quotaId":18446744073709551615,"periodSeconds":60,"limitCount":10}]}])")),
            "limits.rules[0].quotas[0].quotaId: 18446744073709551615 is out of range (at most 9223372036854775807) (configId 1)");
  // The largest id is an id.
  EXPECT_EQ(error_of(with_rules(R"([{"configId":9223372036854775807,"interfaceUrl":"/a","rateLimit":5,"status":1}])")), "");
}

TEST(AdaptiveConfig, AcceptsOnShadowOffAndBooleansAndDefaultsToOff) {
  const std::pair<const char*, limiter::Adaptive> cases[] = {
      {"", limiter::Adaptive::off},
      {R"(, "adaptive": null)", limiter::Adaptive::off},
      {R"(, "adaptive": "off")", limiter::Adaptive::off},
      {R"(, "adaptive": "on")", limiter::Adaptive::on},
      {R"(, "adaptive": "shadow")", limiter::Adaptive::shadow},
      {R"(, "adaptive": true)", limiter::Adaptive::on},
      {R"(, "adaptive": false)", limiter::Adaptive::off},
      // off is accepted wherever: only an adaptive rule needs a bucket it can adapt.
      {R"(, "adaptive": "off", "keyBy": "client_ip", "warmupSeconds": 2)", limiter::Adaptive::off},
  };
  for (const auto& [extra, want] : cases) {
    const ValidatedRules v = adaptive_rules(adaptive_row(extra));
    ASSERT_TRUE(v.rejected.empty()) << extra << ": " << v.rejected[0].message();
    ASSERT_EQ(v.rules.size(), 1u) << extra;
    EXPECT_EQ(v.rules[0].adaptive, want) << extra;
  }
  // A file with them loads; a channel rule with "off" too.
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":"on"},
                                    {"configId":2,"interfaceUrl":"/b","rateLimit":5,"status":1,"adaptive":true},
                                    {"configId":3,"channelType":"IBE+","scope":"channel","rateLimit":9,"status":1,"adaptive":"off"}])")),
            "");
  // The original row (no column) keeps its meaning.
  RawRow r;
  r.config_id = 9;
  r.interface_url = "/shopping/search";
  r.rate_limit = 5;
  r.status = 1;
  EXPECT_EQ(validate_rows({r}).rules.at(0).adaptive, limiter::Adaptive::off);
  r.adaptive = "shadow";  // as the MySQL source reads the column
  EXPECT_EQ(validate_rows({r}).rules.at(0).adaptive, limiter::Adaptive::shadow);
}

TEST(AdaptiveConfig, RejectionsNameTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":"yes"}])",
       R"(limits.rules[0].adaptive: must be "on", "shadow" or "off" (configId 1))"},
      {R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":"ON"}])",
       R"(limits.rules[0].adaptive: must be "on", "shadow" or "off" (configId 1))"},
      {R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":""}])",
       R"(limits.rules[0].adaptive: must be "on", "shadow" or "off" (configId 1))"},
      {R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":1}])",
       "limits.rules[0].adaptive: must be a string or a boolean (configId 1)"},
      {R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":["on"]}])",
       "limits.rules[0].adaptive: must be a string or a boolean (configId 1)"},
      {R"([{"configId":1,"channelType":"IBE+","scope":"channel","rateLimit":9,"status":1,"adaptive":"on"}])",
       "limits.rules[0].adaptive: applies to an interface's own bucket, not a channel's (configId 1)"},
      {R"([{"configId":1,"channelType":"IBE+","scope":"channel","rateLimit":9,"status":1,"adaptive":"shadow"}])",
       "limits.rules[0].adaptive: applies to an interface's own bucket, not a channel's (configId 1)"},
      {R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":"on","keyBy":"client_ip"}])",
       "limits.rules[0].adaptive: needs the shared bucket: not with keyBy (configId 1)"},
      {R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":true,"warmupSeconds":3}])",
       "limits.rules[0].adaptive: needs a SmoothBursty bucket: not with warmupSeconds (configId 1)"},
      {R"([{"configId":1,"interfaceUrl":"/a","status":1,"adaptive":"shadow",
            "quotas":[{"quotaId":1,"periodSeconds":60,"limitCount":10}]}])",
       "limits.rules[0].adaptive: needs a rateLimit (configId 1)"},
  };
  for (const auto& [rules, want] : cases) EXPECT_EQ(error_of(with_rules(rules)), want) << rules;
  // warmupSeconds 0 is no warm-up: allowed.
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"adaptive":"on","warmupSeconds":0}])")),
            "");
}

TEST(AdaptiveConfig, ABadEditKeepsTheLastGoodVersion) {
  const auto prev = make_snapshot(adaptive_rules(R"([{"configId": 1, "interfaceUrl": "/a", "rateLimit": 5, "status": 1, "adaptive": "on"},
      {"configId": 2, "interfaceUrl": "/b", "rateLimit": 3, "status": 1, "adaptive": "shadow"},
      {"configId": 3, "interfaceUrl": "/c", "rateLimit": 4, "status": 1},
      {"configId": 4, "interfaceUrl": "/d", "rateLimit": 6, "status": 1, "adaptive": "on"},
      {"configId": 5, "interfaceUrl": "/e", "rateLimit": 7, "status": 1, "adaptive": "on"}])"),
                                  1, "test");
  ValidatedRules next = adaptive_rules(R"([{"configId": 1, "interfaceUrl": "/a", "rateLimit": 5, "status": 1, "adaptive": "fast"},
      {"configId": 2, "interfaceUrl": "/b", "rateLimit": 3, "status": 1, "adaptive": "shadow", "keyBy": "client_ip"},
      {"configId": 3, "interfaceUrl": "/c", "rateLimit": 4, "status": 1, "adaptive": "on", "warmupSeconds": 1},
      {"configId": 4, "interfaceUrl": "/d", "status": 1, "adaptive": "on",
       "quotas": [{"quotaId": 1, "periodSeconds": 60, "limitCount": 10}]},
      {"configId": 5, "interfaceUrl": "/e", "rateLimit": 7, "status": 1, "adaptive": 2}])");
  ASSERT_EQ(next.rejected.size(), 5u);
  keep_last_good(next, *prev);
  const auto snap = make_snapshot(std::move(next), 2, "test");
  ASSERT_EQ(snap->rejected.size(), 5u);
  for (const RejectedRow& r : snap->rejected) {
    EXPECT_EQ(r.field, "adaptive") << r.message();
    EXPECT_TRUE(r.kept_previous) << r.message();
  }
  const std::pair<const char*, limiter::Adaptive> kept[] = {{"/a", limiter::Adaptive::on},
                                                            {"/b", limiter::Adaptive::shadow},
                                                            {"/c", limiter::Adaptive::off},
                                                            {"/d", limiter::Adaptive::on},
                                                            {"/e", limiter::Adaptive::on}};
  for (const auto& [url, want] : kept) {
    const Rule* r = snap->match(url);
    ASSERT_NE(r, nullptr) << url;
    EXPECT_EQ(r->adaptive, want) << url;
    EXPECT_TRUE(r->has_bucket) << url;
    EXPECT_EQ(r->key_by.kind, KeySpec::Kind::none) << url;
    EXPECT_EQ(r->params.warmup_us, 0) << url;
  }
}

TEST(Snapshot, DisabledRowsLimitNothing) {
  std::vector<RawRow> rows(2);
  rows[0].config_id = 1;
  rows[0].interface_url = "/on";
  rows[0].rate_limit = 1;
  rows[0].status = 1;
  rows[1].config_id = 2;
  rows[1].interface_url = "/off";
  rows[1].rate_limit = 1;
  rows[1].status = 0;
  auto snap = make_snapshot(validate_rows(rows), 1, "test");
  EXPECT_NE(snap->match("/x/on"), nullptr);
  EXPECT_EQ(snap->match("/x/off"), nullptr);
  EXPECT_NE(snap->find_bucket("/off"), nullptr);  // still listed for the admin API
}

// limits.match.case and a rule's matchCase: how an interfaceUrl compares with a request path.
std::string match_config(const std::string& match, const std::string& rules) {
  std::string s = R"({"upstreams":{"ibe":{"url":"http://127.0.0.1:9000"}},
  "routes":[{"prefix":"/","upstream":"ibe"}], "limits":{MATCH"rules":RULES}})";
  s.replace(s.find("MATCH"), 5, match.empty() ? "" : R"("match": )" + match + ",");
  s.replace(s.find("RULES"), 5, rules);
  return s;
}

std::shared_ptr<const Snapshot> snapshot_of(const std::string& text) {
  const GatewayConfig c = parse_gateway_config(text);
  return make_snapshot(FileSource::from_rows(c.limits.rows, c.limits.switch_mode).rules, 1, "test");
}

TEST(MatchCase, DefaultIsSensitiveAndLimitsMatchCaseSetsItForEveryRule) {
  const std::string rules = R"([{"configId": 1, "interfaceUrl": "/shopping/search", "rateLimit": 5, "status": 1},
    {"configId": 2, "interfaceUrl": "/Pricing", "rateLimit": 5, "status": 1, "matchCase": "sensitive"}])";
  EXPECT_EQ(parse_gateway_config(match_config("", rules)).limits.match_case, MatchCase::sensitive);
  auto sensitive = snapshot_of(match_config("", rules));
  EXPECT_EQ(sensitive->rules[0].match_case, MatchCase::sensitive);
  EXPECT_NE(sensitive->match("/ibe/shopping/search"), nullptr);
  EXPECT_EQ(sensitive->match("/ibe/SHOPPING/SEARCH"), nullptr);

  const GatewayConfig c = parse_gateway_config(match_config(R"({"case": "insensitive"})", rules));
  EXPECT_EQ(c.limits.match_case, MatchCase::insensitive);
  EXPECT_EQ(c.limits.mysql.match_case, MatchCase::insensitive);  // MySQL rows take it as their default too
  auto insensitive = snapshot_of(match_config(R"({"case": "insensitive"})", rules));
  EXPECT_EQ(insensitive->rules[0].match_case, MatchCase::insensitive);
  EXPECT_EQ(insensitive->match("/ibe/SHOPPING/SEARCH"), &insensitive->rules[0]);
  EXPECT_EQ(insensitive->match("/ibe/Shopping/Search"), &insensitive->rules[0]);
  // The row's own matchCase wins over the default.
  EXPECT_EQ(insensitive->rules[1].match_case, MatchCase::sensitive);
  EXPECT_NE(insensitive->match("/ibe/Pricing"), nullptr);
  EXPECT_EQ(insensitive->match("/ibe/pricing"), nullptr);
  // And the other way round.
  auto one = snapshot_of(match_config(
      "", R"([{"configId": 1, "interfaceUrl": "/a", "rateLimit": 5, "status": 1, "matchCase": "insensitive"}])"));
  EXPECT_NE(one->match("/x/A"), nullptr);
}

TEST(MatchCase, BadValuesNameTheField) {
  EXPECT_EQ(testing::error_of(match_config(R"({"case": "Insensitive"})", "[]")),
            R"(limits.match.case: must be "sensitive" or "insensitive" (got "Insensitive"))");
  EXPECT_EQ(testing::error_of(match_config(R"({"cases": "insensitive"})", "[]")), "limits.match.cases: unknown field");
  EXPECT_EQ(testing::error_of(match_config(R"("insensitive")", "[]")), "limits.match: must be an object");
  EXPECT_EQ(testing::error_of(with_rules(R"([{"configId": 1, "interfaceUrl": "/a", "rateLimit": 5, "status": 1,
                                              "matchCase": "ci"}])")),
            R"(limits.rules[0].matchCase: must be "sensitive" or "insensitive" (configId 1))");
  EXPECT_EQ(testing::error_of(with_rules(R"([{"configId": 1, "interfaceUrl": "/a", "rateLimit": 5, "status": 1,
                                              "matchCase": true}])")),
            "limits.rules[0].matchCase: must be a string (configId 1)");
  EXPECT_EQ(testing::error_of(with_rules(R"([{"configId": 1, "channelType": "IBE", "scope": "channel", "rateLimit": 5,
                                              "status": 1, "matchCase": "insensitive"}])")),
            "limits.rules[0].matchCase: applies to an interfaceUrl, not to a channel limit (configId 1)");
}

// Two enabled rows whose URLs differ only in case, one of them case-insensitive, would both match
// one request: the later is rejected as the earlier's duplicate, naming the row and the field.
TEST(MatchCase, RowsThatCollideWhenFoldedAreDuplicates) {
  EXPECT_EQ(testing::error_of(with_rules(R"([{"configId": 1, "interfaceUrl": "/Search", "rateLimit": 5, "status": 1},
    {"configId": 2, "interfaceUrl": "/search", "rateLimit": 5, "status": 1, "matchCase": "insensitive"}])")),
            "limits.rules[1].interfaceUrl: another enabled row (configId 1) already limits /search in another case, "
            "and one of them matches case-insensitively (matchCase) (configId 2)");
  EXPECT_NE(testing::error_of(with_rules(R"([{"configId": 1, "interfaceUrl": "/SEARCH", "rateLimit": 5, "status": 1,
    "matchCase": "insensitive"}, {"configId": 2, "interfaceUrl": "/search", "rateLimit": 5, "status": 1}])")), "");
  EXPECT_NE(testing::error_of(match_config(R"({"case": "insensitive"})",
                                           R"([{"configId": 1, "interfaceUrl": "/a/B", "rateLimit": 5, "status": 1},
    {"configId": 2, "interfaceUrl": "/A/b", "rateLimit": 5, "status": 1}])")), "");
  // Both case-sensitive: two buckets, as before. A disabled row holds nothing.
  EXPECT_EQ(testing::error_of(with_rules(R"([{"configId": 1, "interfaceUrl": "/Search", "rateLimit": 5, "status": 1},
    {"configId": 2, "interfaceUrl": "/search", "rateLimit": 5, "status": 1}])")), "");
  EXPECT_EQ(testing::error_of(with_rules(R"([{"configId": 1, "interfaceUrl": "/Search", "rateLimit": 5, "status": 0},
    {"configId": 2, "interfaceUrl": "/search", "rateLimit": 5, "status": 1, "matchCase": "insensitive"}])")), "");
  // From MySQL (no file error): the later row is rejected, the earlier one limits.
  std::vector<RawRow> rows(2);
  for (int i = 0; i < 2; ++i) {
    rows[i].config_id = i + 1;
    rows[i].rate_limit = 5;
    rows[i].status = 1;
    rows[i].default_case = MatchCase::insensitive;
  }
  rows[0].interface_url = "/Pricing";
  rows[1].interface_url = "/pricing";
  const ValidatedRules v = validate_rows(rows);
  ASSERT_EQ(v.rules.size(), 1u);
  EXPECT_EQ(v.rules[0].config_id, 1);
  ASSERT_EQ(v.rejected.size(), 1u);
  EXPECT_EQ(*v.rejected[0].config_id, 2);
  EXPECT_EQ(v.rejected[0].field, "interfaceUrl");
}

// URLs that no request could match in the normal form are refused, as other spellings are.
TEST(MatchCase, InterfaceUrlsInAnUnmatchableSpellingAreRefused) {
  auto error = [](const std::string& url) {
    return testing::error_of(with_rules(R"([{"configId": 1, "interfaceUrl": ")" + url +
                                        R"(", "rateLimit": 5, "status": 1}])"));
  };
  EXPECT_EQ(error("/shopping/search."),
            "limits.rules[0].interfaceUrl: must not end a segment with '.' (requests are matched with a segment's "
            "trailing dots cut) (configId 1)");
  EXPECT_NE(error("/v1./search"), "");
  EXPECT_NE(error("/a/..."), "");
  EXPECT_NE(error("/search%00"), "");
  EXPECT_NE(error("/search%7F"), "");
  EXPECT_NE(error("/search%20"), "");
  EXPECT_NE(error("/%20search"), "");
  EXPECT_EQ(error("/my%20search"), "");
  EXPECT_EQ(error("/v1.0/search"), "");
  EXPECT_EQ(error("/.well-known/x"), "");
}

TEST(MatchCase, AFileReloadAppliesIt) {
  EXPECT_TRUE(fields_needing_restart(R"({"limits": {"source": "file", "rules": []}})",
                                     R"({"limits": {"source": "file", "match": {"case": "insensitive"}, "rules": []}})")
                  .empty());
  EXPECT_EQ(fields_needing_restart(R"({"limits": {"source": "mysql", "rules": []}})",
                                   R"({"limits": {"source": "mysql", "match": {"case": "insensitive"}, "rules": []}})"),
            std::vector<std::string>{"limits.match"});
}

}  // namespace
}  // namespace tollgate::config

namespace tollgate::config {
namespace {

TEST(RestartFields, AReloadNamesWhatItCannotApply) {
  const std::string before = R"({"listen": "0.0.0.0:8080", "proxy": {"max_body_bytes": 1024, "idle_timeout_ms": 5},
    "upstreams": {"ibe": {"url": "http://a:1"}}, "routes": [{"prefix": "/", "upstream": "ibe"}],
    "limits": {"source": "file", "switch": true, "rules": [{"configId": 1}]}})";
  // Rules and switch of a file source are applied by the reload: nothing to say.
  EXPECT_TRUE(fields_needing_restart(before, R"({"listen": "0.0.0.0:8080", "proxy": {"max_body_bytes": 1024, "idle_timeout_ms": 5},
    "upstreams": {"ibe": {"url": "http://a:1"}}, "routes": [{"prefix": "/", "upstream": "ibe"}],
    "limits": {"source": "file", "switch": false, "rules": [{"configId": 2}]}})").empty());
  // Nor upstreams, routes and dns: the reload swaps the route table.
  EXPECT_TRUE(fields_needing_restart(before, R"({"listen": "0.0.0.0:8080", "proxy": {"max_body_bytes": 1024, "idle_timeout_ms": 5},
    "upstreams": {"ibe": {"url": "http://b:1"}, "ndc": {"url": "http://c:1"}}, "routes": [{"prefix": "/n", "upstream": "ndc"}],
    "dns": {"servers": ["127.0.0.1:53"]},
    "limits": {"source": "file", "switch": true, "rules": [{"configId": 1}]}})").empty());
  const auto changed = fields_needing_restart(before, R"({"listen": "0.0.0.0:9090", "proxy": {"max_body_bytes": 2048},
    "upstreams": {"ibe": {"url": "http://b:1"}}, "routes": [{"prefix": "/", "upstream": "ibe"}],
    "limits": {"source": "file", "switch": true, "rules": []}, "threads": 4})");
  // Keys in the file's order is not kept by the JSON library: sorted, then the new keys.
  EXPECT_EQ(changed, (std::vector<std::string>{"listen", "proxy.idle_timeout_ms", "proxy.max_body_bytes", "threads"}));
  // With MySQL as the source, the file's rules are only the start-up fallback.
  EXPECT_EQ(fields_needing_restart(R"({"limits": {"source": "mysql", "rules": []}})",
                                   R"({"limits": {"source": "mysql", "rules": [{"configId": 1}]}})"),
            std::vector<std::string>{"limits.rules"});
  EXPECT_TRUE(fields_needing_restart(before, "{ broken").empty());
}

TEST(RestartFields, ACommentedFileIsReadAsTheLoaderReadsIt) {
  // The loader takes // and /* */ comments; the diff reads the file the same way, so a commented
  // file's restart-only change is still named (it was silently nothing).
  const std::string before = "// the gateway\n{\"listen\": \"0.0.0.0:8080\", /* start only */ \"threads\": 2,\n"
                             "  \"limits\": {\"source\": \"file\", \"rules\": []}}";
  const std::string after = "// the gateway\n{\"listen\": \"0.0.0.0:8080\", /* start only */ \"threads\": 4,\n"
                            "  // a rule edit is applied by the reload\n"
                            "  \"limits\": {\"source\": \"file\", \"rules\": [{\"configId\": 1}]}}";
  EXPECT_EQ(fields_needing_restart(before, after), std::vector<std::string>{"threads"});
}

}  // namespace
}  // namespace tollgate::config

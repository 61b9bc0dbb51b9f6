// Per-client limits in the configuration: quotas under a rule, keyBy, maxShare, and keeping a row's last valid version.
#include <gtest/gtest.h>

#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/config/config_source.hpp"
#include "support/config_text.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/snapshot.hpp"

namespace tollgate::config {
namespace {

using testing::first_error;
using testing::rules_of;

TEST(QuotaConfig, ARuleWithQuotasOnly) {
  const ValidatedRules v = rules_of(R"([{"configId": 4, "interfaceUrl": "/login", "status": 1, "quotas": [
      {"quotaId": 3, "periodSeconds": 1, "limitCount": 2, "keyBy": "client_ip_path"},
      {"quotaId": 4, "periodSeconds": 60, "limitCount": 5, "algorithm": "sliding", "keyBy": "header:X-Api-Key"},
      {"quotaId": 5, "periodSeconds": 60, "limitCount": 9, "status": 0}]}])");
  ASSERT_TRUE(v.rejected.empty()) << v.rejected[0].message();
  ASSERT_EQ(v.rules.size(), 1u);
  const Rule& r = v.rules[0];
  EXPECT_FALSE(r.has_bucket);
  ASSERT_EQ(r.quotas.size(), 2u);  // the disabled one limits nothing
  EXPECT_EQ(r.quotas[0].key_by.kind, KeySpec::Kind::client_ip_path);
  EXPECT_EQ(r.quotas[1].algorithm, limiter::WindowAlgorithm::sliding);
  EXPECT_EQ(r.quotas[1].key_by.header, "X-Api-Key");
  EXPECT_EQ(r.quotas[1].params().period_us, 60'000'000);
  EXPECT_EQ(proxy::rule_policies(r), "\"/login#q3\";q=2;w=1, \"/login#q4\";q=5;w=60");
}

TEST(QuotaConfig, BucketAndQuotasTogether) {
  const ValidatedRules v = rules_of(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 5, "status": 1,
      "keyBy": "client_ip", "maxShare": 0.25, "cache": 2, "quotas": [{"quotaId": 1, "periodSeconds": 60, "limitCount": 100}]}])");
  ASSERT_TRUE(v.rejected.empty()) << v.rejected[0].message();
  const Rule& r = v.rules[0];
  EXPECT_TRUE(r.has_bucket);
  EXPECT_EQ(r.key_by.kind, KeySpec::Kind::client_ip);
  EXPECT_EQ(r.max_held_per_client, 2);  // 0.25 of a 2 s window at 5/s = 10 permits
  EXPECT_EQ(r.share_key.kind, KeySpec::Kind::client_ip);
  EXPECT_EQ(proxy::rule_policies(r), "\"/s\";q=5;w=1;burst=5, \"/s#q1\";q=100;w=60");
}

TEST(QuotaConfig, ErrorsNameTheQuotaAndField) {
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1,
      "quotas": [{"quotaId": 7, "periodSeconds": 0, "limitCount": 5}]}])"),
            "rules[0].quotas[0].periodSeconds: must be within [1, 86400] (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1,
      "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 0}]}])"),
            "rules[0].quotas[0].limitCount: must be within [1, 1000000000] (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1,
      "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 1, "algorithm": "leaky"}]}])"),
            "rules[0].quotas[0].algorithm: must be \"fixed\" or \"sliding\" (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1,
      "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 1, "keyBy": "cookie"}]}])"),
            "rules[0].quotas[0].keyBy: must be none, client_ip, client_ip_path or header:<Name> (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1,
      "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 1, "keyBy": "header:"}]}])"),
            "rules[0].quotas[0].keyBy: header:<Name> needs a header name (letters, digits, '-', at most 64) (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1,
      "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 1, "limit": 3}]}])"),
            "rules[0].quotas[0].limit: unknown field (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1}])"),
            "rules[0].rateLimit: is required (or give the rule quotas) (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 1, "status": 1, "maxShare": 1.5}])"),
            "rules[0].maxShare: must be within (0, 1] (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1, "maxShare": 0.5,
      "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 1}]}])"),
            "rules[0].maxShare: needs a token bucket (rateLimit) whose wait window it shares (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "channelType": "X", "scope": "channel", "rateLimit": 1, "status": 1,
      "keyBy": "client_ip"}])"),
            "rules[0].keyBy: is not supported on a channel limit (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/a", "status": 1, "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 1}]},
      {"configId": 2, "interfaceUrl": "/b", "status": 1, "quotas": [{"quotaId": 7, "periodSeconds": 1, "limitCount": 1}]}])"),
            "rules[1].quotas[0].quotaId: duplicate quotaId (also rules[0].quotas[0]) (configId 2)");
}

TEST(QuotaConfig, AFileWithABadQuotaIsRefusedWhole) {
  const std::string text = R"({"upstreams":{"ibe":{"url":"http://127.0.0.1:9000"}},
    "routes":[{"prefix":"/","upstream":"ibe"}], "limits":{"rules":[{"configId": 1, "interfaceUrl": "/s",
    "status": 1, "quotas": [{"quotaId": 1, "periodSeconds": 1, "limitCount": -1}]}]}})";
  const GatewayConfig c = parse_gateway_config(text);
  EXPECT_THROW(FileSource::from_rows(c.limits.rows, c.limits.switch_mode), ConfigError);
}

TEST(QuotaConfig, GatewayOptions) {
  const GatewayConfig c = parse_gateway_config(R"({"upstreams":{"ibe":{"url":"http://127.0.0.1:9000"}},
    "routes":[{"prefix":"/","upstream":"ibe"}], "proxy": {"trusted_proxies": ["10.0.0.0/8", "::1"]},
    "limits": {"missing_key": "reject", "max_client_keys": 5000}})");
  EXPECT_EQ(c.proxy.trusted_proxies.size(), 2u);
  EXPECT_EQ(c.limits.missing_key, MissingKey::reject);
  EXPECT_EQ(c.limits.max_client_keys, 5000u);
  EXPECT_THROW(parse_gateway_config(R"({"upstreams":{"ibe":{"url":"http://127.0.0.1:9000"}},
    "routes":[{"prefix":"/","upstream":"ibe"}], "limits": {"missing_key": "ignore"}})"), ConfigError);
}

TEST(KeepLastGood, ABadEditKeepsTheRowAndQuotaInForce) {
  const auto prev = make_snapshot(rules_of(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 5, "status": 1,
      "quotas": [{"quotaId": 1, "periodSeconds": 60, "limitCount": 10}, {"quotaId": 2, "periodSeconds": 1, "limitCount": 2}]},
      {"configId": 2, "interfaceUrl": "/t", "rateLimit": 3, "status": 1}])"), 1, "test");
  // Quota 1 edited badly, rule 2 edited badly, rule 3 new and bad.
  ValidatedRules next = rules_of(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 5, "status": 1,
      "quotas": [{"quotaId": 1, "periodSeconds": 60, "limitCount": 0}, {"quotaId": 2, "periodSeconds": 1, "limitCount": 3}]},
      {"configId": 2, "interfaceUrl": "/t", "rateLimit": -3, "status": 1},
      {"configId": 3, "interfaceUrl": "/u", "rateLimit": 0, "status": 1}])");
  ASSERT_EQ(next.rejected.size(), 3u);
  keep_last_good(next, *prev);
  const auto snap = make_snapshot(std::move(next), 2, "test");
  const Rule* s = snap->match("/s");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->quotas.size(), 2u);
  EXPECT_EQ(s->quotas[0].limit, 3);   // quota 2: the new valid edit
  EXPECT_EQ(s->quotas[1].limit, 10);  // quota 1: its last valid version
  EXPECT_NE(proxy::rule_policies(*s).find("\"/s#q1\";q=10;w=60"), std::string::npos);
  ASSERT_NE(snap->match("/t"), nullptr);
  EXPECT_DOUBLE_EQ(snap->match("/t")->rate_limit, 3);  // rule 2: its last valid version
  EXPECT_EQ(snap->match("/u"), nullptr);                // rule 3: nothing to keep
  EXPECT_TRUE(snap->rejected[0].kept_previous);
  EXPECT_TRUE(snap->rejected[1].kept_previous);
  EXPECT_FALSE(snap->rejected[2].kept_previous);
  EXPECT_NE(snap->rejected[0].message().find("its last valid version stays in force"), std::string::npos);
}

}  // namespace
}  // namespace tollgate::config

// A rule's request cost (cost, channelCost), priority classes (priority) and meter (algorithm srtcm
// or trtcm) in the configuration: what is accepted, what each means, and each refusal naming the
// row and field.
#include <gtest/gtest.h>

#include "tollgate/config/config_source.hpp"
#include "support/config_text.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

using testing::first_error;
using testing::rules_of;

TEST(CostConfig, CostAndChannelCost) {
  const ValidatedRules v = rules_of(R"([
      {"configId": 1, "scope": "channel", "channelType": "IBE", "rateLimit": 10, "status": 1},
      {"configId": 2, "channelType": "IBE", "interfaceUrl": "/book", "rateLimit": 10, "status": 1, "cost": 5},
      {"configId": 3, "channelType": "IBE", "interfaceUrl": "/look", "rateLimit": 10, "status": 1, "channelCost": 2},
      {"configId": 4, "interfaceUrl": "/plain", "rateLimit": 10, "status": 1}])");
  ASSERT_TRUE(v.rejected.empty()) << v.rejected[0].message();
  ASSERT_EQ(v.rules.size(), 4u);
  EXPECT_EQ(v.rules[1].cost, 5);
  EXPECT_EQ(v.rules[1].channel_cost, 5);  // channelCost follows cost unless given
  EXPECT_EQ(v.rules[2].cost, 1);
  EXPECT_EQ(v.rules[2].channel_cost, 2);
  EXPECT_EQ(v.rules[3].cost, 1);
  EXPECT_EQ(v.rules[3].channel_cost, 1);
}

TEST(CostConfig, BadCostsAreRefusedNamingTheField) {
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "status": 1, "cost": 0}])"),
            "rules[0].cost: must be a whole number of permits within [1, 1000000] (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "status": 1, "cost": 1.5}])"),
            "rules[0].cost: must be a whole number of permits within [1, 1000000] (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "status": 1, "cost": "2"}])"),
            "rules[0].cost: must be a number (configId 1)");
  // 10 stored and 10 more within the 1 s window: 21 could never be granted.
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "cache": 1, "status": 1, "cost": 21}])"),
            "rules[0].cost: is more than the bucket can give within its wait window (burst + rateLimit * cache = 20) "
            "(configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "cache": 1, "status": 1, "cost": 20}])"), "");
  // With classes, the lowest one must still be able to take it after the reserves: 10 + 5 - 3.
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "cache": 0.5, "status": 1, "cost": 13,
      "priority": {"by": "method", "classes": ["POST", "GET"], "default": "GET", "reserve": {"POST": 0.3}}}])"),
            "rules[0].cost: leaves the lowest priority class nothing: cost + the reserves above it is more than the "
            "bucket can give within its wait window (burst + rateLimit * cache = 15) (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "cache": 0.5, "status": 1, "cost": 12,
      "priority": {"by": "method", "classes": ["POST", "GET"], "default": "GET", "reserve": {"POST": 0.3}}}])"), "");
  // A rested warm-up bucket is cold: 10/s warming over 10 s holds 100 permits, the top 50 costing
  // up to 300 ms each; 40 of them would take about 10 s.
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "cache": 2, "status": 1,
      "warmupSeconds": 10, "cost": 40}])"),
            "rules[0].cost: is more than a rested warm-up bucket can give within its wait window (its cold permits "
            "cost up to warm-up's cold interval each) (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "scope": "channel", "channelType": "IBE", "rateLimit": 10, "status": 1, "cost": 2}])"),
            "rules[0].cost: is what an interface's request takes; on a channel limit use the interfaces' channelCost "
            "(configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "rateLimit": 10, "status": 1, "channelCost": 2}])"),
            "rules[0].channelCost: needs a channelType: the channel limit it is charged to (configId 1)");
  EXPECT_EQ(first_error(R"([{"configId": 1, "interfaceUrl": "/s", "status": 1, "cost": 2,
      "quotas": [{"quotaId": 1, "periodSeconds": 60, "limitCount": 100}]}])"),
            "rules[0].cost: needs a token bucket (rateLimit) or a meter to take permits from (configId 1)");
}

TEST(PriorityConfig, ClassesReservesAndTheDefault) {
  const ValidatedRules v = rules_of(R"([{"configId": 1, "interfaceUrl": "/air", "rateLimit": 50, "status": 1,
      "priority": {"by": "header:X-Tollgate-Priority", "classes": ["book", "pay", "look"], "default": "look",
                   "reserve": {"book": 0.3, "pay": 0.1}}}])");
  ASSERT_TRUE(v.rejected.empty()) << v.rejected[0].message();
  const Rule& r = v.rules[0];
  ASSERT_TRUE(r.priority);
  const Priority& p = *r.priority;
  EXPECT_EQ(p.by, Priority::By::header);
  EXPECT_EQ(p.header, "X-Tollgate-Priority");
  EXPECT_EQ(p.classes, (std::vector<std::string>{"book", "pay", "look"}));
  EXPECT_EQ(p.default_class, 2u);
  // What each class must leave behind: the reserves of the classes above it.
  ASSERT_EQ(p.keep.size(), 3u);
  EXPECT_DOUBLE_EQ(p.keep[0], 0.0);
  EXPECT_DOUBLE_EQ(p.keep[1], 0.3);
  EXPECT_DOUBLE_EQ(p.keep[2], 0.3 + 0.1);
  EXPECT_EQ(p.class_of("pay"), 1u);
  EXPECT_EQ(p.class_of("PAY"), 2u);  // names compare exactly; anything else is the default
  EXPECT_EQ(p.class_of(""), 2u);
}

TEST(PriorityConfig, ByMethod) {
  const ValidatedRules v = rules_of(R"([{"configId": 1, "interfaceUrl": "/air", "rateLimit": 50, "status": 1,
      "priority": {"by": "method", "classes": ["POST", "GET"], "default": "GET", "reserve": {"POST": 0.2}}}])");
  ASSERT_TRUE(v.rejected.empty()) << v.rejected[0].message();
  EXPECT_EQ(v.rules[0].priority->by, Priority::By::method);
  EXPECT_EQ(v.rules[0].priority->class_of("POST"), 0u);
  EXPECT_EQ(v.rules[0].priority->class_of("DELETE"), 1u);
}

TEST(PriorityConfig, BadPriorityIsRefusedNamingTheField) {
  auto row = [](const std::string& priority, const std::string& extra = "") {
    return R"([{"configId": 7, "interfaceUrl": "/air", "rateLimit": 50, "status": 1)" + extra +
           R"(, "priority": )" + priority + "}]";
  };
  EXPECT_EQ(first_error(row(R"("book")")), "rules[0].priority: must be an object (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "cookie", "classes": ["a", "b"], "default": "b"})")),
            "rules[0].priority.by: must be \"method\" or \"header:<Name>\" (e.g. \"header:X-Tollgate-Priority\") "
            "(configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a"], "default": "a"})")),
            "rules[0].priority.classes: must list 2 to 8 classes, highest first (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "a"], "default": "a"})")),
            "rules[0].priority.classes: names \"a\" twice (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b c"], "default": "a"})")),
            "rules[0].priority.classes: each class is a name of letters, digits, '-', '_' or '.' (at most 32) "
            "(configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b"], "default": "c"})")),
            "rules[0].priority.default: must be one of the classes (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b"]})")),
            "rules[0].priority.default: is required: the class of a request that names none (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b"], "default": "b", "reserve": {"b": 0.2}})")),
            "rules[0].priority.reserve: cannot reserve for the lowest class (there is no class below it to hold "
            "back) (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b"], "default": "b", "reserve": {"a": 1}})")),
            "rules[0].priority.reserve: each share must be a number within (0, 1) (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b", "c"], "default": "c",
                                "reserve": {"a": 0.6, "b": 0.5}})")),
            "rules[0].priority.reserve: the shares must add up to less than 1 (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b"], "default": "b", "weights": 1})")),
            "rules[0].priority: unknown field \"weights\" (by, classes, default, reserve) (configId 7)");
  EXPECT_EQ(first_error(row(R"({"by": "method", "classes": ["a", "b"], "default": "b"})", R"(, "warmupSeconds": 3)")),
            "rules[0].priority: needs a SmoothBursty bucket: not with warmupSeconds (configId 7)");
}

TEST(PriorityConfig, TheMysqlColumnsTextMeansTheSame) {
  // The MySQL source hands the column's text as it is; a malformed one is refused, not applied.
  RawRow row;
  row.config_id = 3;
  row.origin = "t_ratelimite_conf[configId=3]";
  row.interface_url = "/air";
  row.rate_limit = 50;
  row.status = 1;
  row.priority = R"({"by":"header:X-Tollgate-Priority","classes":["book","look"],"default":"look","reserve":{"book":0.3}})";
  ValidatedRules v = validate_rows({row});
  ASSERT_TRUE(v.rejected.empty()) << v.rejected[0].message();
  EXPECT_DOUBLE_EQ(v.rules[0].priority->keep[1], 0.3);
  row.priority = "{not json";
  v = validate_rows({row});
  ASSERT_EQ(v.rejected.size(), 1u);
  EXPECT_EQ(v.rejected[0].message(),
            "t_ratelimite_conf[configId=3].priority: must be a JSON object {\"by\", \"classes\", \"default\", "
            "\"reserve\"}");
}

TEST(MeterConfig, SrtcmAndTrtcmRules) {
  const ValidatedRules v = rules_of(R"([
      {"configId": 1, "interfaceUrl": "/a", "status": 1, "algorithm": "srtcm", "cir": 10, "cbs": 5, "ebs": 10},
      {"configId": 2, "interfaceUrl": "/b", "status": 1, "algorithm": "trtcm", "cir": 10, "cbs": 5, "pir": 20, "pbs": 10,
       "yellow": "wait", "cost": 2},
      {"configId": 3, "interfaceUrl": "/c", "rateLimit": 5, "status": 1, "algorithm": "bucket"}])");
  ASSERT_TRUE(v.rejected.empty()) << v.rejected[0].message();
  ASSERT_TRUE(v.rules[0].meter);
  EXPECT_FALSE(v.rules[0].has_bucket);
  EXPECT_FALSE(v.rules[0].meter->two_rate);
  EXPECT_EQ(v.rules[0].meter->sr, (limiter::SrtcmParams{10, 5, 10}));
  EXPECT_FALSE(v.rules[0].meter->wait_green);
  EXPECT_EQ(v.rules[0].rate_limit, 10);  // the committed rate, for displays and RateLimit-Policy
  ASSERT_TRUE(v.rules[1].meter);
  EXPECT_TRUE(v.rules[1].meter->two_rate);
  EXPECT_EQ(v.rules[1].meter->tr, (limiter::TrtcmParams{10, 5, 20, 10}));
  EXPECT_TRUE(v.rules[1].meter->wait_green);
  EXPECT_FALSE(v.rules[2].meter);
  EXPECT_TRUE(v.rules[2].has_bucket);
}

TEST(MeterConfig, BadMetersAreRefusedNamingTheField) {
  auto row = [](const std::string& fields) {
    return R"([{"configId": 4, "interfaceUrl": "/m", "status": 1, )" + fields + "}]";
  };
  EXPECT_EQ(first_error(row(R"("algorithm": "gcra")")),
            "rules[0].algorithm: must be \"bucket\", \"srtcm\" or \"trtcm\" (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cbs": 5, "ebs": 5)")),
            "rules[0].cir: is required for algorithm srtcm (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 0, "cbs": 5, "ebs": 5)")),
            "rules[0].cir: must be within (0, 1000000] permits per second (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 0, "ebs": 0)")),
            "rules[0].cbs: cbs + ebs must be > 0 (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 5, "pir": 9)")),
            "rules[0].pir: belongs to trtcm; srtcm has cir, cbs and ebs (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "trtcm", "cir": 10, "cbs": 5, "pir": 5, "pbs": 5)")),
            "rules[0].pir: must be >= cir (the peak rate is at least the committed one) (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "trtcm", "cir": 10, "cbs": 0, "pir": 20, "pbs": 5)")),
            "rules[0].cbs: must be within (0, 1000000000] permits (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 5, "rateLimit": 5)")),
            "rules[0].rateLimit: does not apply to a meter (algorithm srtcm): give its rates and sizes (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 5, "keyBy": "client_ip")")),
            "rules[0].keyBy: does not apply to a meter (algorithm srtcm): give its rates and sizes (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 5, "yellow": "drop")")),
            "rules[0].yellow: must be \"forward\" or \"wait\" (configId 4)");
  EXPECT_EQ(first_error(row(R"("rateLimit": 5, "cir": 5)")),
            "rules[0].cir: applies to a meter: \"algorithm\": \"srtcm\" or \"trtcm\" (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 3, "cost": 6)")),
            "rules[0].cost: is more than both cbs and ebs: every request would be red (configId 4)");
  EXPECT_EQ(first_error(R"([{"configId": 4, "channelType": "X", "scope": "channel", "status": 1, "algorithm": "srtcm",
      "cir": 5, "cbs": 5, "ebs": 5}])"),
            "rules[0].algorithm: a meter limits an interface, not a channel (configId 4)");
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 5,
      "priority": {"by": "method", "classes": ["POST", "GET"], "default": "GET", "reserve": {"POST": 0.2}})")),
            "rules[0].priority.reserve: applies to a token bucket; a meter's classes are its pre-colours (configId 4)");
  // The classes below the highest are pre-coloured yellow: an srTCM passes them through E only.
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 0,
      "priority": {"by": "method", "classes": ["POST", "GET"], "default": "GET"})")),
            "rules[0].cost: is more than ebs: with priority classes, every request below the highest class would "
            "be red (configId 4)");
  // Classes without reserves are a meter's pre-colours.
  EXPECT_EQ(first_error(row(R"("algorithm": "srtcm", "cir": 5, "cbs": 5, "ebs": 5,
      "priority": {"by": "method", "classes": ["POST", "GET"], "default": "GET"})")), "");
}

}  // namespace
}  // namespace tollgate::config

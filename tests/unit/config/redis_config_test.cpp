// limits.redis: the three deployments (standalone, cluster, sentinel) and what --check says of a
// section that does not fit its mode, field named.
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/config_text.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

using testing::error_of;

std::string with_redis(const std::string& redis) {
  return R"({"upstreams":{"ibe":{"url":"http://127.0.0.1:9000"}},
  "routes":[{"prefix":"/","upstream":"ibe"}], "limits":{"store":"redis","redis":)" +
         redis + R"(,"rules":[]}})";
}

TEST(RedisConfig, StandaloneIsTheDefault) {
  const GatewayConfig c = parse_gateway_config(with_redis(R"({"host":"10.0.0.5","port":6380})"));
  EXPECT_EQ(c.limits.redis.mode, RedisMode::standalone);
  EXPECT_EQ(c.limits.redis.host, "10.0.0.5");
  EXPECT_EQ(c.limits.redis.port, 6380);
  EXPECT_TRUE(c.limits.redis.nodes.empty());
}

TEST(RedisConfig, ClusterTakesSeedNodes) {
  const GatewayConfig c =
      parse_gateway_config(with_redis(R"({"mode":"cluster","nodes":["127.0.0.1:7000","redis-b:7001"]})"));
  EXPECT_EQ(c.limits.redis.mode, RedisMode::cluster);
  ASSERT_EQ(c.limits.redis.nodes.size(), 2u);
  EXPECT_EQ(c.limits.redis.nodes[1].host, "redis-b");
  EXPECT_EQ(c.limits.redis.nodes[1].port, 7001);
}

TEST(RedisConfig, SentinelTakesSentinelsMasterNameAndAPasswordFromTheEnvironment) {
  ::setenv("TOLLGATE_TEST_SENTINEL_PW", "s3cret", 1);
  const GatewayConfig c = parse_gateway_config(with_redis(
      R"({"mode":"sentinel","sentinels":["127.0.0.1:26379","127.0.0.1:26380"],"master_name":"tollgate",
          "sentinel_password_env":"TOLLGATE_TEST_SENTINEL_PW"})"));
  ::unsetenv("TOLLGATE_TEST_SENTINEL_PW");
  EXPECT_EQ(c.limits.redis.mode, RedisMode::sentinel);
  EXPECT_EQ(c.limits.redis.sentinels.size(), 2u);
  EXPECT_EQ(c.limits.redis.master_name, "tollgate");
  EXPECT_EQ(c.limits.redis.sentinel_password, "s3cret");
}

TEST(RedisConfig, ErrorsNameTheField) {
  EXPECT_EQ(error_of(with_redis(R"({"mode":"shards"})")),
            R"(limits.redis.mode: must be "standalone", "cluster" or "sentinel" (got "shards"))");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster"})")), R"(limits.redis.nodes: is required when mode is "cluster")");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster","nodes":[]})")),
            R"(limits.redis.nodes: must be a non-empty array of "host:port" strings)");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster","nodes":["127.0.0.1:7000","127.0.0.1"]})")),
            "limits.redis.nodes[1]: must be host:port, got '127.0.0.1'");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster","nodes":["127.0.0.1:0"]})")),
            "limits.redis.nodes[0]: must name a port (1-65535)");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster","nodes":[7000]})")),
            R"(limits.redis.nodes[0]: must be a "host:port" string)");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster","nodes":["a:1"],"database":2})")),
            "limits.redis.database: must be 0 in cluster mode (Redis Cluster has one database)");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster","nodes":["a:1"],"host":"b"})")),
            R"(limits.redis.host: is not read in cluster mode: list the seed nodes in "nodes")");
  EXPECT_EQ(error_of(with_redis(R"({"nodes":["a:1"]})")),
            R"(limits.redis.nodes: is only read when mode is "cluster")");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"sentinel","master_name":"m"})")),
            R"(limits.redis.sentinels: is required when mode is "sentinel")");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"sentinel","sentinels":["a:26379"]})")),
            R"(limits.redis.master_name: is required when mode is "sentinel")");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"cluster","nodes":["a:1"],"master_name":"m"})")),
            R"(limits.redis.master_name: is only read when mode is "sentinel")");
  EXPECT_EQ(error_of(with_redis(R"({"mode":"sentinel","sentinels":["a:26379"],"master_name":"m","port":1})")),
            "limits.redis.port: is not read in sentinel mode: the sentinels name the primary");
}

}  // namespace
}  // namespace tollgate::config

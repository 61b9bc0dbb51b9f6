// The cluster slot map from CLUSTER SLOTS' ranges, and the redirections a node answers with,
// without a server (the Redis cluster tests run them against a real one).
#include "tollgate/store/redis_layout.hpp"

#include <gtest/gtest.h>

#include "tollgate/store/cluster_slot.hpp"

namespace tollgate::store {
namespace {

TEST(RedisLayout, OneServerServesEveryKey) {
  RedisLayout one;
  one.nodes.push_back({"127.0.0.1", 6379});
  EXPECT_EQ(one.node_of("tollgate:{/shopping/search}"), 0);
  EXPECT_EQ(one.describe(), "127.0.0.1:6379");
  EXPECT_EQ(RedisLayout{}.node_of("x"), RedisLayout::kNoOwner);
}

TEST(RedisLayout, SlotRangesMakeTheMap) {
  const auto l = layout_of({{0, 5460, {"127.0.0.1", 7000}},
                            {5461, 10922, {"127.0.0.1", 7001}},
                            {10923, 16383, {"127.0.0.1", 7002}},
                            {100, 100, {"127.0.0.1", 7001}}});  // a slot moved out of the first range
  ASSERT_TRUE(l);
  ASSERT_EQ(l->nodes.size(), 3u);
  EXPECT_EQ(l->owner[0], 0);
  EXPECT_EQ(l->owner[100], 1);
  EXPECT_EQ(l->owner[5461], 1);
  EXPECT_EQ(l->owner[16383], 2);
  const std::string key = "tollgate:{/shopping/search}";  // slot 8629
  ASSERT_EQ(cluster_slot(key), 8629);
  EXPECT_EQ(l->node_of(key), 1);
  EXPECT_EQ(l->describe(),
            "127.0.0.1:7000 (slots 0-99,101-5460), 127.0.0.1:7001 (slots 100,5461-10922), "
            "127.0.0.1:7002 (slots 10923-16383)");
}

TEST(RedisLayout, UnservedSlotsHaveNoOwner) {
  const auto l = layout_of({{0, 8000, {"127.0.0.1", 7000}}});
  ASSERT_TRUE(l);
  EXPECT_EQ(l->owner[8000], 0);
  EXPECT_EQ(l->owner[8001], RedisLayout::kNoOwner);
  EXPECT_EQ(l->node_of("tollgate:{/shopping/search}"), RedisLayout::kNoOwner);
  EXPECT_NE(l->describe().find("8383 slots unserved"), std::string::npos);
}

TEST(RedisLayout, BadRangesAreRefused) {
  EXPECT_FALSE(layout_of({}));
  EXPECT_FALSE(layout_of({{0, 16384, {"127.0.0.1", 7000}}}));
  EXPECT_FALSE(layout_of({{10, 5, {"127.0.0.1", 7000}}}));
  EXPECT_FALSE(layout_of({{0, 5, {"", 7000}}}));
}

TEST(RedisLayout, Redirections) {
  const auto moved = parse_redirect("MOVED 8629 127.0.0.1:7001");
  ASSERT_TRUE(moved);
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 8629);
  EXPECT_EQ(moved->to, (RedisAddress{"127.0.0.1", 7001}));
  const auto ask = parse_redirect("ASK 3999 redis-b:6380");
  ASSERT_TRUE(ask);
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->to.host, "redis-b");
  EXPECT_EQ(ask->to.port, 6380);
  const auto v6 = parse_redirect("MOVED 1 ::1:7000");  // the port is after the last ':'
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->to.host, "::1");
  for (const char* not_one : {"TRYAGAIN Multiple keys request during rehashing of slot", "MOVED", "MOVED 16384 a:1",
                              "MOVED 12 a", "MOVED 12 a:0", "MOVED x a:1", "ASK 1 a:1x", "READONLY You can't write"})
    EXPECT_FALSE(parse_redirect(not_one)) << not_one;
}

}  // namespace
}  // namespace tollgate::store

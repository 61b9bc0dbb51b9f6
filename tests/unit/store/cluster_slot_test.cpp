// Redis Cluster's slot function without a server: the CRC16 check value, slots Redis's own
// documentation gives, and every hash-tag rule. (RedisCluster.SlotsAreRedisOwn in the Redis tests
// compares it with CLUSTER KEYSLOT of a real cluster-enabled server, Tollgate's own keys included.)
#include "tollgate/store/cluster_slot.hpp"

#include <gtest/gtest.h>

#include "tollgate/store/key_schema.hpp"

namespace tollgate::store {
namespace {

TEST(ClusterSlot, Crc16IsXmodem) {
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);  // the CRC's published check value
  EXPECT_EQ(crc16_xmodem(""), 0);
}

TEST(ClusterSlot, SlotsOfKnownKeys) {
  EXPECT_EQ(cluster_slot("somekey"), 11058);
  EXPECT_EQ(cluster_slot("foo{hash_tag}"), 2515);
  EXPECT_EQ(cluster_slot("foo"), 12182);
  EXPECT_EQ(cluster_slot("bar"), 5061);
}

TEST(ClusterSlot, HashTags) {
  EXPECT_EQ(hash_tag_of("{user1000}.following"), "user1000");
  EXPECT_EQ(cluster_slot("{user1000}.following"), cluster_slot("{user1000}.followers"));
  EXPECT_EQ(hash_tag_of("foo{}{bar}"), "foo{}{bar}");  // an empty tag: the whole key
  EXPECT_EQ(hash_tag_of("foo{{bar}}zap"), "{bar");     // from the first '{' to the first '}' after it
  EXPECT_EQ(hash_tag_of("foo{bar}{zap}"), "bar");      // only the first tag counts
  EXPECT_EQ(hash_tag_of("no tag"), "no tag");
  EXPECT_EQ(hash_tag_of("open{only"), "open{only");
  EXPECT_EQ(hash_tag_of("}{x}"), "x");
}

// A request's keys share one slot: its bucket, its abandoned set, its channel bucket.
TEST(ClusterSlot, ARequestsKeysShareOneSlot) {
  const std::string tag = "IBE+";
  const std::uint16_t s = cluster_slot(redis_key("tollgate:", tag, "/shopping/search"));
  EXPECT_EQ(cluster_slot(redis_key("tollgate:", tag, "channel:IBE+")), s);
  EXPECT_EQ(cluster_slot(abandoned_key("tollgate:", tag, "/shopping/search")), s);
  EXPECT_EQ(cluster_slot(redis_key("tollgate:", "", "/a")), cluster_slot(abandoned_key("tollgate:", "", "/a")));
}

}  // namespace
}  // namespace tollgate::store

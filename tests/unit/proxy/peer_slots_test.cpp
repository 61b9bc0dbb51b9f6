#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "proxy/peer_slots.hpp"
#include "support/config_text.hpp"

namespace tollgate::proxy {
namespace {

PeerKey v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) { return peer_key_v4({a, b, c, d}); }

TEST(PeerSlots, AnAddressHoldsAtMostItsCapAndSlotsComeBack) {
  PeerSlots slots(2);
  const PeerKey a = v4(192, 0, 2, 1), b = v4(192, 0, 2, 2);
  PeerSlot s1, s2, s3, other;
  EXPECT_TRUE(slots.acquire(a, s1));
  EXPECT_TRUE(slots.acquire(a, s2));
  EXPECT_FALSE(slots.acquire(a, s3));  // the third from the same address
  EXPECT_FALSE(s3.holds());
  EXPECT_TRUE(slots.acquire(b, other));  // another address is counted apart
  EXPECT_EQ(slots.held(a), 2u);
  EXPECT_EQ(slots.peers(), 2u);
  s1.reset();
  EXPECT_EQ(slots.held(a), 1u);
  EXPECT_TRUE(slots.acquire(a, s3));
  {
    PeerSlot moved = std::move(s2);  // a moved slot is given back once, by its new owner
    EXPECT_FALSE(s2.holds());
  }
  EXPECT_EQ(slots.held(a), 1u);
  s3.reset();
  other.reset();
  EXPECT_EQ(slots.peers(), 0u);  // an address with no connection leaves no entry behind
}

// A session still open when the gateway exits is destroyed with its worker's io_context, after
// the proxy and its PeerSlots: its slot must still be given back safely (ASan checks this).
TEST(PeerSlots, ASlotOutlivingTheTableThatGaveItIsGivenBackSafely) {
  PeerSlot s;
  {
    PeerSlots slots(1);
    ASSERT_TRUE(slots.acquire(v4(192, 0, 2, 1), s));
  }
  EXPECT_TRUE(s.holds());
  s.reset();
  EXPECT_FALSE(s.holds());
}

TEST(PeerSlots, IPv4MappedIPv6IsTheIPv4Address) {
  PeerSlots slots(1);
  PeerKey mapped{};
  mapped[10] = mapped[11] = 0xff;
  mapped[12] = 198, mapped[13] = 51, mapped[14] = 100, mapped[15] = 7;
  PeerSlot s1, s2;
  EXPECT_TRUE(slots.acquire(v4(198, 51, 100, 7), s1));
  EXPECT_FALSE(slots.acquire(mapped, s2));
}

TEST(PeerSlots, ZeroIsNoCap) {
  PeerSlots slots(0);
  std::vector<PeerSlot> many(100);
  for (auto& s : many) EXPECT_TRUE(slots.acquire(v4(10, 0, 0, 1), s));
  EXPECT_EQ(slots.held(v4(10, 0, 0, 1)), 0u);  // nothing counted
}

TEST(PeerSlots, CountsAcrossThreads) {
  PeerSlots slots(1000);
  const PeerKey a = v4(10, 1, 2, 3);
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<PeerSlot>> kept(4);
  for (auto& k : kept) k.resize(400);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (auto& s : kept[t]) granted += slots.acquire(a, s);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(granted.load(), 1000);
  EXPECT_EQ(slots.held(a), 1000u);
  kept.clear();
  EXPECT_EQ(slots.held(a), 0u);
}

TEST(PeerSlots, TheConfigFieldIsANonNegativeInteger) {
  auto with_proxy = [](const std::string& proxy) {
    std::string text = testing::with_rules("[]");
    text.insert(text.rfind('}'), ", \"proxy\": " + proxy);
    return text;
  };
  EXPECT_EQ(config::parse_gateway_config(testing::with_rules("[]")).proxy.max_connections_per_client, 1000u);
  EXPECT_EQ(config::parse_gateway_config(with_proxy(R"({"max_connections_per_client": 0})")).proxy.max_connections_per_client,
            0u);
  EXPECT_EQ(config::parse_gateway_config(with_proxy(R"({"max_connections_per_client": 5})")).proxy.max_connections_per_client,
            5u);
  for (const char* bad : {R"({"max_connections_per_client": -1})", R"({"max_connections_per_client": 1.5})",
                          R"({"max_connections_per_client": "10"})"}) {
    const std::string why = testing::error_of(with_proxy(bad));
    EXPECT_NE(why.find("proxy.max_connections_per_client"), std::string::npos) << bad << ": " << why;
  }
}

}  // namespace
}  // namespace tollgate::proxy

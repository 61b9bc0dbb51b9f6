// Where the Redis store's keys live: one server (standalone, or the primary the sentinels name), or
// a Redis Cluster's primaries and which of them serves each slot. Built by the topology watcher
// (src/store/redis_topology.cpp) and read by every gateway thread to pick a connection; immutable
// once made (a new one replaces it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate::store {

struct RedisAddress {
  std::string host;
  std::uint16_t port = 0;
  bool operator==(const RedisAddress&) const = default;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

struct RedisLayout {
  static constexpr std::uint16_t kNoOwner = 0xFFFF;
  std::vector<RedisAddress> nodes;   // the primaries; one outside cluster mode
  std::vector<std::uint16_t> owner;  // cluster: slot -> index in nodes (kNoOwner: none serves it);
                                     // empty: nodes[0] serves every key
  std::string note;                  // with no nodes: why none is to be used (a failover under way)
  // The index in `nodes` of the primary serving `key`, or kNoOwner.
  std::uint16_t node_of(std::string_view key) const;
  bool operator==(const RedisLayout&) const = default;
  std::string describe() const;  // "127.0.0.1:7000 (slots 0-5460), ..." for the log
};

// One line of CLUSTER SLOTS: a range of slots and the primary serving it.
struct SlotRange {
  std::uint16_t first = 0, last = 0;
  RedisAddress primary;
};
// A cluster layout from CLUSTER SLOTS' ranges (nodes in order of first appearance); nullopt when a
// range is out of bounds.
std::optional<RedisLayout> layout_of(const std::vector<SlotRange>& ranges);

// A cluster redirection, from the error a node answers with: "MOVED <slot> <host>:<port>" (the
// slot is served elsewhere now) or "ASK <slot> <host>:<port>" (this one key is being moved: ask
// there once, after ASKING). nullopt for any other error.
struct Redirect {
  bool ask = false;
  std::uint16_t slot = 0;
  RedisAddress to;
};
std::optional<Redirect> parse_redirect(std::string_view error);

}  // namespace tollgate::store

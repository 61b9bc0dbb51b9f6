// Real Redis Cluster and Redis Sentinel set-ups for integration tests, on free loopback ports in a
// temporary folder, started by scripts/redis-cluster.sh and scripts/redis-sentinel.sh and stopped
// when the object goes away. Without redis-server or redis-cli, available() is false and why_not()
// says so (skip the test with it); a set-up that is installed but does not come up throws.
// Not thread-safe: use one object from one thread (clients under test may run in others).
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace tollgate::testing {

// Six cluster nodes: ports()[0..2] start as primaries, ports()[3] replicates ports()[0], [4] [1] and
// [5] [2]. Node timeout 1 s: a killed primary's replica takes over in about 2-3 s. Each node also
// listens on its port + 10000 (the cluster bus).
class RedisClusterServers {
 public:
  RedisClusterServers();
  ~RedisClusterServers();
  RedisClusterServers(const RedisClusterServers&) = delete;
  RedisClusterServers& operator=(const RedisClusterServers&) = delete;

  bool available() const { return available_; }
  const std::string& why_not() const { return why_not_; }
  std::vector<int> ports() const { return ports_; }  // all six, including killed ones
  // The nodes that are primaries now, as a live node sees them (CLUSTER NODES; not those flagged
  // fail), by port, ascending.
  std::vector<int> primaries();
  // `redis-cli -h 127.0.0.1 -p PORT ARGS` (ARGS go through /bin/sh), output trimmed. Throws when
  // redis-cli fails (e.g. cannot connect); an error reply is returned as text ("ERR ...").
  std::string cli(int port, const std::string& args);
  int slot_of_key(const std::string& key);   // CLUSTER KEYSLOT
  int owner_of_slot(int slot);               // port of the primary serving SLOT now, -1 if none
  int owner_of_key(const std::string& key);  // owner_of_slot(slot_of_key(key))
  // Moves one slot to the primary on TO_PORT as redis-cli --cluster reshard would: SETSLOT
  // IMPORTING on the target, MIGRATING on the source, MIGRATE the keys in batches of 100, then
  // SETSLOT NODE on the target, the source and the other primaries; then waits (up to 5 s) until
  // every live node sees the new owner. Safe while clients write to the slot (they get ASK, then
  // MOVED). Throws if TO_PORT is not a primary or a step fails.
  void move_slot(int slot, int to_port);
  void kill(int port);  // SIGKILL one node, as in a crash
  // True once every live node says cluster_state:ok, all of them see the same roles and slots,
  // and every live replica is in sync with its primary; false if TIMEOUT passes first.
  bool wait_until_ok(std::chrono::milliseconds timeout);

 private:
  int live_node();  // a node that answers PING (throws if none does)
  bool available_ = false;
  std::string why_not_;
  std::string dir_;
  std::vector<int> ports_;
  std::set<int> killed_;
};

// A primary, one replica and three sentinels monitoring it under the name "tollgate" (quorum 2,
// down after 1 s: a killed primary is replaced in about 2-3 s).
class RedisSentinelServers {
 public:
  static constexpr const char* kMasterName = "tollgate";
  RedisSentinelServers();
  ~RedisSentinelServers();
  RedisSentinelServers(const RedisSentinelServers&) = delete;
  RedisSentinelServers& operator=(const RedisSentinelServers&) = delete;

  bool available() const { return available_; }
  const std::string& why_not() const { return why_not_; }
  int primary_port() const { return primary_; }  // the primary at start
  int replica_port() const { return replica_; }  // the replica at start
  std::vector<int> sentinel_ports() const { return sentinels_; }
  std::string cli(int port, const std::string& args);  // as RedisClusterServers::cli
  // The primary's port as the first live sentinel reports it now (SENTINEL
  // get-master-addr-by-name tollgate); -1 if no sentinel answers.
  int current_primary();
  void kill(int port);  // SIGKILL the primary, the replica or a sentinel

 private:
  bool available_ = false;
  std::string why_not_;
  std::string dir_;
  int primary_ = -1;
  int replica_ = -1;
  std::vector<int> sentinels_;
  std::set<int> killed_;
};

// N free loopback ports a cluster-enabled server can use: each below 55536 (Redis puts the cluster
// bus at port + 10000), with its bus port free too.
std::vector<int> cluster_node_ports(std::size_t n);

}  // namespace tollgate::testing

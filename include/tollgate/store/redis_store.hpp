// Bucket state shared by the fleet in Redis (docs/redis.md, docs/design.md). One EVALSHA per decision (or per
// batch of coalesced decisions of one bucket): an atomic Lua script does resync, decision and update
// on the server with Redis TIME as the clock. Each gateway thread has one hiredis async connection
// per primary (one outside cluster mode), driven by that thread's io_context through a descriptor
// on the connection's fd; requests of a thread are pipelined on it. Which primaries there are, and
// which serves a key, is kept current by a topology watcher (standalone, cluster or sentinel).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tollgate/limiter/clock.hpp"
#include "tollgate/store/bucket_store.hpp"
#include "tollgate/store/key_schema.hpp"
#include "tollgate/store/redis_layout.hpp"

namespace boost::asio {
class io_context;
}

namespace tollgate::store {

class RedisTopology;
namespace redis_detail {
struct Reply;
}

enum class RedisMode : std::uint8_t {
  standalone,  // one server at host:port
  cluster,     // Redis Cluster: the slot map asked of `seeds` (any node), one connection per primary
  sentinel,    // the primary named `master_name`, asked of the sentinels in `seeds` and followed
};

struct RedisOptions {
  RedisMode mode = RedisMode::standalone;
  std::string host = "127.0.0.1";  // standalone
  std::uint16_t port = 6379;
  std::vector<RedisAddress> seeds;  // cluster: seed nodes; sentinel: the sentinels
  std::string master_name;          // sentinel
  std::string sentinel_password;    // sentinel: AUTH for the sentinels (empty: none)
  std::string password;          // empty: no AUTH
  int database = 0;
  std::string key_prefix = "tollgate:";
  std::uint32_t decision_timeout_ms = 50;   // a slower answer counts as a failure
  std::uint32_t connect_timeout_ms = 1000;
  std::uint32_t heartbeat_ms = 1000;         // how often this instance says it is alive (live_instances)
  std::string instance_id;                  // heartbeat identity; empty: host:pid
};

struct RedisStats {
  bool up = false;
  std::uint64_t refunds = 0;        // reservations given back (RefundResult::reservations)
  std::uint64_t incidents = 0;
  unsigned live_instances = 1;
  std::string last_error;
};

// The hiredis library it was built with ("0.14.1"), for tollgate --version.
std::string hiredis_version();

class RedisStore final : public BucketStore {
 public:
  // One connection per context; try_acquire must be called from a thread running one of them.
  RedisStore(RedisOptions options, std::vector<boost::asio::io_context*> contexts, const limiter::Clock& clock);
  ~RedisStore() override;
  void start();  // begins connecting (asynchronously) and heartbeating
  void stop();

  boost::asio::awaitable<StoreDecision> try_acquire(AcquireRequest req) override;
  boost::asio::awaitable<bool> refund(AcquireRequest req, Reservation r) override;
  boost::asio::awaitable<RefundResult> refund_slots(AcquireRequest req, Reservation r) override;
  boost::asio::awaitable<RefundResult> return_unused(AcquireRequest req) override;
  boost::asio::awaitable<AdaptOutcome> throttled(AcquireRequest req, Micros pause_us, Micros jitter_us) override;
  bool shares_tokens() const override { return true; }
  bool shared_by_fleet() const override { return true; }
  boost::asio::awaitable<Micros> last_cut(const AcquireRequest& req) override;
  // One step of shared_token.lua, sent as EVAL with its text (once per token refresh, per gateway).
  boost::asio::awaitable<SharedTokenReply> shared_token(SharedTokenOp op) override;
  // Read over the first thread's connection (no connection of their own), waiting at most
  // connect_timeout_ms; inspect_many reads every probe with one script call. For a thread that runs
  // no store connection (the admin thread): from a request thread they answer nullopt.
  std::optional<BucketSnapshot> inspect(const BucketRef& bucket, std::string_view hash_tag) override;
  bool reset_adaptive(const BucketRef& bucket, std::string_view hash_tag) override;
  std::vector<std::optional<BucketSnapshot>> inspect_many(const std::vector<BucketProbe>& probes) override;
  std::string name() const override { return "redis"; }
  StoreHealth health() const override;
  void publish_metrics(prometheus::Registry& registry) const override;

  RedisStats stats() const;
  // Gateway instances heartbeating in this Redis (this one included once connected), for the
  // `local` failure policy's rate / N.
  unsigned live_instances() const { return live_instances_.load(std::memory_order_relaxed); }
  // Per-client keys in Redis, counted with SCAN over the first thread's connection (called from the
  // admin thread) at most every 10 s; nullopt when Redis cannot be read.
  std::optional<std::uint64_t> client_keys() const;
  const RedisOptions& options() const { return options_; }

  // Whether each primary's connections (one per thread) are all ready, by "host:port".
  std::vector<std::pair<std::string, bool>> nodes_up() const;

  struct Connection;
  struct Link;

 private:
  Link* link_for_current_thread();
  void record_success();
  // A connection to `node` made (+1) or retired (-1); one became ready (+1) or not (-1).
  void count_connection(const RedisAddress& node, int made, int ready);
  void record_failure(const std::string& error);
  // A decision Redis could not make: StoreStatus::unavailable, counted in the incident.
  StoreDecision unavailable(std::string error);
  std::string last_error() const;
  boost::asio::awaitable<redis_detail::Reply> call_routed(Link& l, Connection* c, std::vector<std::string> args,
                                                         const char* script);
  static void read_snapshots(const std::vector<BucketProbe>& probes, const std::vector<std::size_t>& members,
                             const std::vector<std::string>& items, std::vector<std::optional<BucketSnapshot>>& out);

  RedisOptions options_;
  std::vector<boost::asio::io_context*> contexts_;
  std::vector<std::shared_ptr<Link>> links_;  // one per context
  std::unique_ptr<RedisTopology> topology_;

  std::string instance_id_;
  mutable std::mutex incident_mu_;
  std::atomic<bool> up_flag_{false};
  bool up_ = false;
  bool ever_up_ = false;
  std::string last_error_;
  std::int64_t incident_started_ms_ = 0;
  std::uint64_t incident_failures_ = 0;
  std::uint64_t incidents_ = 0;
  std::atomic<std::uint64_t> refunds_{0};
  std::atomic<unsigned> live_instances_{1};
  // Connections of every thread to the current layout's primaries, and those ready now: an
  // incident ends when all are ready.
  std::atomic<int> connections_{0};
  std::atomic<int> connections_ready_{0};
  std::atomic<int> layouts_pending_{0};  // threads yet to apply the latest layout
  struct NodeCount {
    int made = 0, ready = 0;
  };
  mutable std::mutex nodes_mu_;
  std::vector<std::pair<std::string, NodeCount>> nodes_;  // by "host:port", for nodes_up()
  bool announced_ = false;                                // the "connected" line was said
  mutable std::vector<std::string> shown_nodes_;          // tollgate_store_node_up series out
  mutable std::mutex count_mu_;
  mutable std::int64_t counted_at_ms_ = 0;
  mutable std::optional<std::uint64_t> client_keys_;
};

}  // namespace tollgate::store

// Where the Redis store's primaries are, kept current on a thread of its own with blocking hiredis
// calls (none of this is on a request's path):
//   standalone  the configured host:port, once;
//   cluster     CLUSTER SLOTS asked of a known node or a seed, every second and at once when the
//               store asks (a MOVED reply, a lost connection);
//   sentinel    SENTINEL get-master-addr-by-name asked of the first sentinel that answers, every
//               second and at once when the store asks (a lost connection, a READONLY reply), and
//               followed between asks through subscriptions on every sentinel: +selected-slave
//               (a failover begins: no primary is used until it ends, so that nothing granted on
//               the old primary after the replica's promotion is lost), +switch-master (it ended:
//               the new primary) and -failover-abort-* (it did not happen: asked again).
// Each new layout is handed to `on_change` (on the watcher's thread; the store posts it to its
// threads). Included by redis_store.cpp only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tollgate/store/redis_layout.hpp"
#include "tollgate/store/redis_store.hpp"

struct redisContext;

namespace tollgate::store {

class RedisTopology {
 public:
  using Listener = std::function<void(std::shared_ptr<const RedisLayout>)>;
  RedisTopology(const RedisOptions& options, Listener on_change);
  ~RedisTopology();
  RedisTopology(const RedisTopology&) = delete;
  RedisTopology& operator=(const RedisTopology&) = delete;

  void start();
  void stop();
  // Asks again soon (at most every 50 ms): the store saw a sign that the layout changed.
  void refresh();
  std::shared_ptr<const RedisLayout> current() const;

 private:
  void run();
  bool query_to(const RedisAddress& a, const std::string& password, std::string& errors);
  bool ask_cluster();
  bool ask_sentinels();
  // Waits up to `period` for a refresh request or a stop; in sentinel mode reads +switch-master
  // messages meanwhile.
  void wait(std::chrono::milliseconds period);
  void follow_switch(std::chrono::milliseconds slice);
  void on_sentinel_event(const std::string& channel, const std::string& text);
  void subscribe_all();
  void publish(RedisLayout layout, const std::string& why);
  // A blocking connection (and AUTH), within timeout_ms (0: connect_timeout_ms).
  redisContext* connect(const RedisAddress& a, const std::string& password, std::string& error,
                        std::uint32_t timeout_ms = 0) const;
  void warn_once(const std::string& what);

  const RedisOptions& opt_;
  Listener on_change_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool refresh_wanted_ = false;
  bool stopping_ = false;
  std::shared_ptr<const RedisLayout> layout_;
  std::thread thread_;
  redisContext* query_ = nullptr;       // the node (cluster) or sentinel last asked
  RedisAddress query_addr_;
  struct Subscriber {
    RedisAddress sentinel;
    redisContext* c = nullptr;
  };
  std::vector<Subscriber> subscribers_;  // sentinel: one per sentinel that answers
  std::chrono::steady_clock::time_point next_subscribe_{};
  // A failover under way (sentinel): no primary is used until +switch-master, an abort, a primary
  // other than `paused_from_` asked of the sentinels, or `paused_until_`.
  bool paused_ = false;
  RedisAddress paused_from_;
  std::chrono::steady_clock::time_point paused_until_{};
  // The primary a failover left, not believed again for a while (a sentinel may lag behind).
  RedisAddress switched_from_;
  std::chrono::steady_clock::time_point switched_until_{};
  bool failing_ = false;                // a warning is out; said again when it answers
};

}  // namespace tollgate::store

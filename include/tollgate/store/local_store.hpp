// In-process bucket store (the embedded default): sharded maps, a lock held only for the arithmetic,
// idle buckets evicted. Eviction drops only buckets that are full and rested, which by the bucket's definition (docs/design.md) is
// the same as having no state, so it never changes a decision.
// Per-client state (keyed buckets, client quota counters, maxShare trackers) lives apart, in a table
// capped at `max_client_keys` entries and evicted oldest-idle first (per shard). An evicted key comes
// back as new: a full bucket, an empty window, no waiting grants: never more than a full allowance.
#pragma once

#include <array>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tollgate/limiter/clock.hpp"
#include "tollgate/store/bucket_store.hpp"

namespace tollgate::store {

class LocalStore final : public BucketStore {
 public:
  static constexpr std::size_t kDefaultMaxClientKeys = 100'000;
  // max_abandoned: departed callers' slots remembered per bucket (limiter::abandon).
  explicit LocalStore(const limiter::Clock& clock, std::size_t max_client_keys = kDefaultMaxClientKeys,
                      std::size_t max_abandoned = limiter::kMaxAbandoned);

  boost::asio::awaitable<StoreDecision> try_acquire(AcquireRequest req) override;
  bool decide_now(const AcquireRequest& req, StoreDecision& out) override {
    out = decide(req);
    return true;
  }
  boost::asio::awaitable<bool> refund(AcquireRequest req, Reservation r) override;
  boost::asio::awaitable<RefundResult> refund_slots(AcquireRequest req, Reservation r) override;
  boost::asio::awaitable<RefundResult> return_unused(AcquireRequest req) override;
  boost::asio::awaitable<AdaptOutcome> throttled(AcquireRequest req, Micros pause_us, Micros jitter_us) override;
  std::optional<BucketSnapshot> inspect(const BucketRef& bucket, std::string_view hash_tag) override;
  bool reset_adaptive(const BucketRef& bucket, std::string_view hash_tag) override;
  std::string name() const override { return "local"; }
  void publish_metrics(prometheus::Registry& registry) const override;

  // The synchronous operations the coroutines wrap; also what benchmarks, tests and the Redis
  // store's `local` failure policy call.
  StoreDecision decide(const AcquireRequest& req);
  bool give_back(const AcquireRequest& req, const Reservation& r);  // give_back_slots(...).any()
  RefundResult give_back_slots(const AcquireRequest& req, const Reservation& r);
  RefundResult give_back_unused(const AcquireRequest& req);  // return_unused, at once
  AdaptOutcome adapt(const AcquireRequest& req, Micros pause_us, Micros jitter_us);
  std::size_t size() const;         // entries of every kind
  std::size_t client_keys() const;  // entries of the capped per-client table
  std::size_t max_client_keys() const { return per_shard_cap_ * kShards; }

 private:
  enum class Kind : std::uint8_t { bucket, window, share, meter };
  // A rule's three-colour meter (limiter/three_color): its parameters and its counts.
  struct MeterSlot {
    bool two_rate = false;
    limiter::SrtcmParams sr;
    limiter::TrtcmParams tr;
    limiter::SrtcmState srs;
    limiter::TrtcmState trs;
    // Its own kind's counts moved on to `now` at its rates.
    void update(Micros now);
    // Both counts at their sizes: what a missing meter holds.
    bool full() const;
    // The committed count (C).
    double committed() const { return two_rate ? trs.tc : srs.tc; }
    // The rule's new numbers: the counts kept within the new sizes (update first, at the old rates).
    void resize(const MeterRef& ref);
    // Its colour for `permits` (colour-aware with the request's pre-colour), or its wait for a green.
    limiter::TcmDecision mark(const MeterRef& ref, double permits, Micros timeout_us, Micros now);
  };
  struct Entry {
    Kind kind = Kind::bucket;
    // window: first, so that a per-client quota's counts share the cache lines of its key
    limiter::WindowState window;
    limiter::WindowParams window_params;
    limiter::BucketState state;
    BucketParams params;
    limiter::Shape shape;
    std::vector<Micros> holds;  // share: release times of grants still waiting
    // bucket: departed callers' slots behind live ones; allocated on the first one and released when
    // none is left, so that a bucket nobody left costs one pointer
    std::unique_ptr<std::vector<limiter::Slot>> abandoned;
    // bucket of an adaptive rule: its adapted rate and pause (allocated on its first request)
    std::unique_ptr<limiter::AdaptiveState> adaptive;
    // bucket: the end of the last pause applied to it (Adaptive::on; Redis keeps it as field 'f'):
    // refunds never bring a slot back before it, whatever the rule's mode is by then
    Micros pause_floor = 0;
    std::unique_ptr<MeterSlot> meter;  // meter: allocated with the entry
  };
  struct ClientSlot {
    std::string key;
    Entry entry;
  };
  // A key hashed once: the same hash picks its shard and its place in the shard's tables.
  struct Key {
    Key() = default;  // no key (a check the request does not have): nothing hashed
    explicit Key(std::string_view s) : name(s), hash(std::hash<std::string_view>{}(s)) {}
    std::string_view name;
    std::size_t hash = 0;
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    std::size_t operator()(const Key& k) const { return k.hash; }
  };
  struct KeyEqual {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const { return a == b; }
    bool operator()(std::string_view a, const Key& b) const { return a == b.name; }
    bool operator()(const Key& a, std::string_view b) const { return a.name == b; }
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, Entry, StringHash, KeyEqual> map;
    std::size_t sweep_at = 1024;  // next size at which idle entries are swept
    std::list<ClientSlot> lru;    // per-client entries, most recently used first
    // keys point into lru
    std::unordered_map<std::string_view, std::list<ClientSlot>::iterator, StringHash, KeyEqual> clients;
  };
  static constexpr std::size_t kShards = 64;

  static std::size_t shard_index(const Key& key) { return key.hash % kShards; }
  Shard& shard_of(const Key& key) { return shards_[shard_index(key)]; }
  // The bucket entry for `ref` (stored under `key`, ref.name hashed; shared, or in the client
  // table), created full or rescaled to changed params. The shard must be locked.
  Entry& bucket_entry(Shard& shard, const BucketRef& ref, const Key& key, bool client, Micros now);
  // The request's own bucket (under `key`): bucket_entry at the configured rate or, for an adaptive
  // rule, at the rate its adapted state gives now (the arrival counted as demand; `out` told the rate
  // and pause).
  Entry& own_bucket(Shard& shard, const AcquireRequest& req, const Key& key, Micros now, StoreDecision& out);
  // A bucket's adaptive state before its first signal: its seconds on the wall clock's (the clock's phase).
  limiter::AdaptiveState new_adaptive() const {
    limiter::AdaptiveState st;
    st.phase = clock_.second_phase_us();
    return st;
  }
  // The entry under `key` without touching LRU order, or null. The shard must be locked.
  static Entry* find(Shard& shard, const Key& key, bool client);
  static void sweep(Shard& shard, Micros now);
  void trim(Shard& shard) const;  // client table back to its cap, oldest idle first
  // The entry stored under `key`: in the shared map, or (client) in the capped LRU table.
  static Entry& slot(Shard& shard, const Key& key, bool client, Kind kind, bool& created);
  // The quota's window stored under `key` (q.key hashed). The shard must be locked.
  Entry& window_entry(const QuotaRef& q, const Key& key, Micros now);
  // The meter stored under `key` (meter_name), created full, its counts kept within changed sizes.
  // The shard must be locked.
  Entry& meter_entry(Shard& shard, const Key& key, const MeterRef& ref, Micros now);
  StoreDecision decide_all(const AcquireRequest& req);
  // A general decision in progress (the shards locked): every check decided on copies, charged
  // only if all admit.
  struct Pending {
    Entry* a = nullptr;  // the rule's own bucket, and its state as this request would leave it
    limiter::BucketState sa;
    Entry* b = nullptr;  // its channel's
    limiter::BucketState sb;
    limiter::Decision bd;  // the buckets' (granted when there are none)
    Entry* me = nullptr;   // a meter in place of the rule's bucket, and its counts as it would leave them
    MeterSlot ms;
    double meter_left = 0;  // C after the update, before this request takes anything
    std::vector<limiter::WindowState>* rolled = nullptr;  // the quotas' windows as they would be left
    std::vector<Entry*>* windows = nullptr;
    Entry* share = nullptr;  // the caller's maxShare entry, when it was checked
    bool all = true;         // every check admits
    Micros retry = 0;        // when the latest refusing check would admit
    // A check that refuses, with when it would admit: the latest such names the bound.
    bool later(Micros retry_after) const { return all || retry_after > retry; }
  };
  void decide_buckets(const AcquireRequest& req, Pending& p, Micros now, StoreDecision& out) const;
  void decide_meter(const AcquireRequest& req, Pending& p, Micros now, StoreDecision& out) const;
  void decide_quotas(const AcquireRequest& req, const std::vector<Key>& keys, Pending& p, Micros now, StoreDecision& out);
  void decide_share(const AcquireRequest& req, const Key& key, Pending& p, Micros now, StoreDecision& out);
  // The request refused: the buckets' state reported as it stays, nothing charged.
  static void refuse(const Pending& p, Micros now, StoreDecision& out);
  // The request admitted: every check's copy written back.
  static void charge(const AcquireRequest& req, Pending& p, Micros now, StoreDecision& out);
  bool simple(const AcquireRequest& req) const {
    return req.use_bucket && !req.per_client_bucket && req.quotas.empty() && !req.share &&
           req.adaptive == limiter::Adaptive::off && !req.meter;
  }

  const limiter::Clock& clock_;
  std::size_t per_shard_cap_;
  std::size_t max_abandoned_;
  std::array<Shard, kShards> shards_;
};

}  // namespace tollgate::store

#include "tollgate/store/local_store.hpp"

namespace tollgate::store {

namespace {
// A bucket that is full at `now` holds exactly what a missing state holds.
bool rested(const limiter::BucketState& st, const limiter::Shape& shape, Micros now) {
  limiter::BucketState probe = st;
  limiter::resync(probe, shape, now);
  return probe.next_free == now && probe.stored >= shape.max_permits;
}

// Locks one or two shards in index order (no deadlock between a pair and its reverse).
class ShardLocks {
 public:
  ShardLocks(std::mutex& a, std::mutex* b, bool a_first) {
    if (b == nullptr || b == &a) {
      first_ = std::unique_lock(a);
      return;
    }
    first_ = std::unique_lock(a_first ? a : *b);
    second_ = std::unique_lock(a_first ? *b : a);
  }

 private:
  std::unique_lock<std::mutex> first_, second_;
};
}  // namespace

LocalStore::LocalStore(const limiter::Clock& clock) : clock_(clock) {}

std::size_t LocalStore::shard_index(std::string_view key) const { return std::hash<std::string_view>{}(key) % kShards; }

void LocalStore::sweep(Shard& shard, Micros now) {
  std::erase_if(shard.map, [now](const auto& kv) { return rested(kv.second.state, kv.second.shape, now); });
  shard.sweep_at = std::max<std::size_t>(1024, shard.map.size() * 2);
}

LocalStore::Entry& LocalStore::entry(Shard& shard, const BucketRef& ref, Micros now) {
  auto it = shard.map.find(ref.name);
  if (it == shard.map.end()) {
    if (shard.map.size() >= shard.sweep_at) sweep(shard, now);
    const limiter::Shape shape = limiter::shape_of(ref.params);
    return shard.map.emplace(std::string(ref.name), Entry{limiter::full_state(shape, now), ref.params, shape})
        .first->second;
  }
  Entry& e = it->second;
  if (!(e.params == ref.params)) {
    // The rule changed (a new rate): keep the state, rescaled as Guava's setRate does.
    const limiter::Shape shape = limiter::shape_of(ref.params);
    limiter::rescale(e.state, e.shape, shape, now);
    e.params = ref.params;
    e.shape = shape;
  }
  return e;
}

StoreDecision LocalStore::decide(const AcquireRequest& req) {
  StoreDecision out;
  const Micros now = clock_.now_us();
  const std::size_t ia = shard_index(req.bucket.name);
  if (!req.parent) {
    Shard& shard = shards_[ia];
    std::lock_guard lock(shard.mu);
    Entry& e = entry(shard, req.bucket, now);
    out.decision = limiter::try_acquire(e.state, e.shape, e.params.mode, req.permits, req.timeout_us, now);
    out.max_permits = e.shape.max_permits;
    out.reservation = {out.decision.next_free, out.decision.cost_us, out.decision.spent, 0, 0, 0};
    return out;
  }
  const std::size_t ib = shard_index(req.parent->name);
  ShardLocks locks(shards_[ia].mu, &shards_[ib].mu, ia < ib);
  Entry& a = entry(shards_[ia], req.bucket, now);
  Entry& b = entry(shards_[ib], *req.parent, now);
  const limiter::PairDecision pd =
      limiter::try_acquire_pair(a.state, a.shape, b.state, b.shape, a.params.mode, req.permits, req.timeout_us, now);
  out.decision = pd.combined;
  out.parent_bound = pd.bound == 1;
  out.max_permits = pd.bound == 1 ? b.shape.max_permits : a.shape.max_permits;
  out.reservation = {pd.first.next_free, pd.first.cost_us, pd.first.spent,
                     pd.second.next_free, pd.second.cost_us, pd.second.spent};
  return out;
}

bool LocalStore::give_back(const AcquireRequest& req, const Reservation& r) {
  const std::size_t ia = shard_index(req.bucket.name);
  const std::size_t ib = req.parent ? shard_index(req.parent->name) : ia;
  ShardLocks locks(shards_[ia].mu, req.parent ? &shards_[ib].mu : nullptr, ia < ib);
  // Found as they are now: a refund never reconciles parameters (the request's may be older).
  auto refund_in = [](Shard& shard, std::string_view name, Micros release, Micros cost, double spent) {
    auto it = shard.map.find(name);
    return it != shard.map.end() && limiter::refund(it->second.state, it->second.shape, release, cost, spent);
  };
  bool any = refund_in(shards_[ia], req.bucket.name, r.release, r.cost, r.spent);
  if (req.parent) any = refund_in(shards_[ib], req.parent->name, r.parent_release, r.parent_cost, r.parent_spent) || any;
  return any;
}

boost::asio::awaitable<StoreDecision> LocalStore::try_acquire(AcquireRequest req) { co_return decide(req); }

boost::asio::awaitable<bool> LocalStore::refund(AcquireRequest req, Reservation r) { co_return give_back(req, r); }

std::optional<BucketSnapshot> LocalStore::inspect(const BucketRef& ref, std::string_view) {
  const std::string_view bucket = ref.name;
  const BucketParams& params = ref.params;
  BucketSnapshot snap;
  snap.now = clock_.now_us();
  Shard& shard = shards_[shard_index(bucket)];
  std::lock_guard lock(shard.mu);
  auto it = shard.map.find(bucket);
  if (it == shard.map.end()) {
    const limiter::Shape shape = limiter::shape_of(params);
    snap.stored = shape.max_permits;
    snap.next_free = snap.now;
    snap.max_permits = shape.max_permits;
    return snap;
  }
  limiter::BucketState st = it->second.state;
  limiter::resync(st, it->second.shape, snap.now);
  snap.stored = st.stored;
  snap.next_free = st.next_free;
  snap.max_permits = it->second.shape.max_permits;
  snap.tracked = true;
  return snap;
}

std::size_t LocalStore::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.map.size();
  }
  return n;
}

}  // namespace tollgate::store

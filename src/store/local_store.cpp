#include "tollgate/store/local_store.hpp"

namespace tollgate::store {

namespace {
// A bucket that is full at `now` holds exactly what a missing state holds.
bool rested(const limiter::BucketState& st, const limiter::Shape& shape, Micros now) {
  limiter::BucketState probe = st;
  limiter::resync(probe, shape, now);
  return probe.next_free == now && probe.stored >= shape.max_permits;
}
}  // namespace

LocalStore::LocalStore(const limiter::Clock& clock) : clock_(clock) {}

LocalStore::Shard& LocalStore::shard_for(std::string_view key) {
  return shards_[std::hash<std::string_view>{}(key) % kShards];
}

void LocalStore::sweep(Shard& shard, Micros now) {
  std::erase_if(shard.map, [now](const auto& kv) { return rested(kv.second.state, kv.second.shape, now); });
  shard.sweep_at = std::max<std::size_t>(1024, shard.map.size() * 2);
}

StoreDecision LocalStore::decide(const AcquireRequest& req) {
  StoreDecision out;
  Shard& shard = shard_for(req.bucket);
  const Micros now = clock_.now_us();
  std::lock_guard lock(shard.mu);
  auto it = shard.map.find(req.bucket);
  if (it == shard.map.end()) {
    if (shard.map.size() >= shard.sweep_at) sweep(shard, now);
    const limiter::Shape shape = limiter::shape_of(req.params);
    it = shard.map.emplace(std::string(req.bucket), Entry{limiter::full_state(shape, now), req.params, shape}).first;
  } else if (!(it->second.params == req.params)) {
    // The rule changed (a new rate): keep the state, rescaled as Guava's setRate does.
    const limiter::Shape shape = limiter::shape_of(req.params);
    limiter::rescale(it->second.state, it->second.shape, shape, now);
    it->second.params = req.params;
    it->second.shape = shape;
  }
  Entry& e = it->second;
  out.decision = limiter::try_acquire(e.state, e.shape, e.params.mode, req.permits, req.timeout_us, now);
  out.max_permits = e.shape.max_permits;
  return out;
}

boost::asio::awaitable<StoreDecision> LocalStore::try_acquire(AcquireRequest req) { co_return decide(req); }

std::optional<BucketSnapshot> LocalStore::inspect(std::string_view bucket, const BucketParams& params) {
  BucketSnapshot snap;
  snap.now = clock_.now_us();
  Shard& shard = shard_for(bucket);
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

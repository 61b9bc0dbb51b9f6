// In-process bucket store (the embedded default): sharded maps, a lock held only for the arithmetic,
// idle buckets evicted. Eviction drops only buckets that are full and rested, which by DESIGN.md is
// the same as having no state, so it never changes a decision.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tollgate/limiter/clock.hpp"
#include "tollgate/store/bucket_store.hpp"

namespace tollgate::store {

class LocalStore final : public BucketStore {
 public:
  explicit LocalStore(const limiter::Clock& clock);

  boost::asio::awaitable<StoreDecision> try_acquire(AcquireRequest req) override;
  boost::asio::awaitable<bool> refund(AcquireRequest req, Reservation r) override;
  std::optional<BucketSnapshot> inspect(const BucketRef& bucket, std::string_view hash_tag) override;
  std::string name() const override { return "local"; }

  // The synchronous operations the coroutines wrap; also what benchmarks, tests and the Redis
  // store's `local` failure policy call.
  StoreDecision decide(const AcquireRequest& req);
  bool give_back(const AcquireRequest& req, const Reservation& r);
  std::size_t size() const;

 private:
  struct Entry {
    limiter::BucketState state;
    BucketParams params;
    limiter::Shape shape;
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, Entry, StringHash, std::equal_to<>> map;
    std::size_t sweep_at = 1024;  // next size at which idle entries are swept
  };
  static constexpr std::size_t kShards = 64;

  std::size_t shard_index(std::string_view key) const;
  // The entry for `ref`, created full or rescaled to changed params. The shard must be locked.
  Entry& entry(Shard& shard, const BucketRef& ref, Micros now);
  static void sweep(Shard& shard, Micros now);

  const limiter::Clock& clock_;
  std::array<Shard, kShards> shards_;
};

}  // namespace tollgate::store

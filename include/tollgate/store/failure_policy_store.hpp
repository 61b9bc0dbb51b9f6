// What the gateway does when the shared store cannot decide (docs/redis.md, failure policies): a decorator
// around that store, composed in app/. The shared store only reports that it could not decide
// (StoreStatus::unavailable); this store turns each such decision into the configured policy:
//   fail_open    forward unlimited (StoreStatus::unavailable_open)
//   fail_closed  refuse with 503 (StoreStatus::unavailable_closed)
//   local        decide on the fallback store with this instance's share of every limit: rate / N,
//                burst / N, quota limit / N, where N is a fixed divisor or the live instance count.
// It counts the decisions it made, by policy; the shared store logs its incidents.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "tollgate/store/bucket_store.hpp"

namespace tollgate::store {

enum class FailurePolicy { fail_open, fail_closed, local };
const char* failure_policy_name(FailurePolicy p);

// The request as this instance's share of the fleet's limits (the `local` policy), n >= 1.
AcquireRequest local_share(const AcquireRequest& req, double n);

class FailurePolicyStore final : public BucketStore {
 public:
  // `fallback` decides under the `local` policy (it may be null for the other two). With
  // `local_divisor` 0, N is `instances()` (at least 1) at the time of each decision.
  FailurePolicyStore(std::unique_ptr<BucketStore> shared, std::unique_ptr<BucketStore> fallback, FailurePolicy policy,
                     unsigned local_divisor, std::function<unsigned()> instances);

  boost::asio::awaitable<StoreDecision> try_acquire(AcquireRequest req) override;
  boost::asio::awaitable<bool> refund(AcquireRequest req, Reservation r) override;
  boost::asio::awaitable<RefundResult> refund_slots(AcquireRequest req, Reservation r) override;
  // To the shared store (a shared token has no local stand-in: each gateway then fetches its own).
  bool shares_tokens() const override { return shared_->shares_tokens(); }
  bool shared_by_fleet() const override { return shared_->shared_by_fleet(); }
  // The shared store's (0 while it is down: the fallback's buckets are this gateway's own).
  boost::asio::awaitable<Micros> last_cut(const AcquireRequest& req) override { return shared_->last_cut(req); }
  boost::asio::awaitable<SharedTokenReply> shared_token(SharedTokenOp op) override {
    co_return co_await shared_->shared_token(std::move(op));
  }
  boost::asio::awaitable<RefundResult> return_unused(AcquireRequest req) override;
  boost::asio::awaitable<AdaptOutcome> throttled(AcquireRequest req, Micros pause_us, Micros jitter_us) override;
  std::optional<BucketSnapshot> inspect(const BucketRef& bucket, std::string_view hash_tag) override;
  // The shared store's, and the local fallback's too (it may have adapted while the store was down).
  bool reset_adaptive(const BucketRef& bucket, std::string_view hash_tag) override;
  std::vector<std::optional<BucketSnapshot>> inspect_many(const std::vector<BucketProbe>& probes) override {
    return shared_->inspect_many(probes);
  }
  std::string name() const override { return shared_->name(); }
  StoreHealth health() const override {
    StoreHealth h = shared_->health();
    h.failure_policy = failure_policy_name(policy_);
    h.policy_decisions = policy_decisions();
    return h;
  }
  void publish_metrics(prometheus::Registry& registry) const override;

  BucketStore& shared() { return *shared_; }
  FailurePolicy policy() const { return policy_; }
  std::uint64_t policy_decisions() const { return policy_decisions_.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<BucketStore> shared_;
  std::unique_ptr<BucketStore> fallback_;
  FailurePolicy policy_;
  unsigned local_divisor_;
  std::function<unsigned()> instances_;
  std::atomic<std::uint64_t> policy_decisions_{0};
};

}  // namespace tollgate::store

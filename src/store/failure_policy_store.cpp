#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/store/failure_policy_store.hpp"

#include <algorithm>
#include <cmath>

#include "tollgate/store/metric_series.hpp"

namespace tollgate::store {

const char* failure_policy_name(FailurePolicy p) {
  switch (p) {
    case FailurePolicy::fail_open: return "fail_open";
    case FailurePolicy::fail_closed: return "fail_closed";
    case FailurePolicy::local: return "local";
  }
  return "unknown";
}

AcquireRequest local_share(const AcquireRequest& req, double n) {
  auto share = [n](BucketParams p) {
    p.rate /= n;
    if (p.burst) p.burst = std::max(1.0, *p.burst / n);
    return p;
  };
  // A cost one gateway's share of a bucket could never give within the wait window is capped at
  // what it can (at least 1): expensive requests still pass, at the share's pace, rather than
  // being refused for the whole outage.
  auto cap = [&req](double permits, const BucketParams& p) {
    const double most = limiter::shape_of(p).max_permits + p.rate * static_cast<double>(req.timeout_us) / 1e6;
    return std::min(permits, std::max(1.0, std::floor(most)));
  };
  AcquireRequest out = req;
  out.bucket.params = share(req.bucket.params);
  if (req.use_bucket) out.permits = cap(req.permits, out.bucket.params);  // a meter's: below
  if (req.parent) {
    out.parent = BucketRef{req.parent->name, share(req.parent->params)};
    out.parent_permits = cap(req.parent_permits, out.parent->params);
  }
  if (req.meter) {
    // A meter likewise: its rates and sizes shared (a size at least one permit, unless it is 0), and
    // a cost above what the shared meter could ever pass capped there.
    auto size = [n](double v) { return v > 0 ? std::max(1.0, v / n) : 0.0; };
    MeterRef& m = *out.meter;
    m.sr = {m.sr.cir / n, size(m.sr.cbs), size(m.sr.ebs)};
    m.tr = {m.tr.cir / n, size(m.tr.cbs), m.tr.pir / n, size(m.tr.pbs)};
    out.permits = std::min(out.permits, m.two_rate ? m.tr.pbs : std::max(m.sr.cbs, m.sr.ebs));
  }
  // Quotas likewise: limit / N per instance (at least 1), so the fleet stays near its quota.
  for (QuotaRef& q : out.quotas)
    q.params.limit = std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(q.params.limit) / n));
  return out;
}

FailurePolicyStore::FailurePolicyStore(std::unique_ptr<BucketStore> shared, std::unique_ptr<BucketStore> fallback,
                                       FailurePolicy policy, unsigned local_divisor,
                                       std::function<unsigned()> instances)
    : shared_(std::move(shared)),
      fallback_(std::move(fallback)),
      policy_(policy),
      local_divisor_(local_divisor),
      instances_(std::move(instances)) {
  if (policy_ == FailurePolicy::local && !fallback_) policy_ = FailurePolicy::fail_open;  // nothing to decide on
}

boost::asio::awaitable<AdaptOutcome> FailurePolicyStore::throttled(AcquireRequest req, Micros pause_us,
                                                                  Micros jitter_us) {
  AdaptOutcome out = co_await shared_->throttled(req, pause_us, jitter_us);
  // The shared store is down: under the `local` policy the fallback's buckets decide, so they adapt.
  if (!out.ok && policy_ == FailurePolicy::local && fallback_)
    out = co_await fallback_->throttled(std::move(req), pause_us, jitter_us);
  co_return out;
}

boost::asio::awaitable<StoreDecision> FailurePolicyStore::try_acquire(AcquireRequest req) {
  // The request is needed again only by the `local` policy: the others hand it over.
  StoreDecision out;
  if (policy_ == FailurePolicy::local) out = co_await shared_->try_acquire(req);
  else out = co_await shared_->try_acquire(std::move(req));
  if (out.status != StoreStatus::unavailable) co_return std::move(out);
  policy_decisions_.fetch_add(1, std::memory_order_relaxed);
  switch (policy_) {
    case FailurePolicy::fail_open:
      out.status = StoreStatus::unavailable_open;
      co_return std::move(out);
    case FailurePolicy::fail_closed:
      out.status = StoreStatus::unavailable_closed;
      co_return std::move(out);
    case FailurePolicy::local:
      break;
  }
  const unsigned n = local_divisor_ ? local_divisor_ : std::max(1u, instances_ ? instances_() : 1u);
  std::string error = std::move(out.error);
  out = co_await fallback_->try_acquire(local_share(req, n));
  out.degraded = true;
  out.error = std::move(error);
  co_return std::move(out);
}

// Grants the fallback made are not given back: it keeps them only until the shared store answers
// again, and a refund there would find nothing of them.
boost::asio::awaitable<bool> FailurePolicyStore::refund(AcquireRequest req, Reservation r) {
  co_return co_await shared_->refund(std::move(req), r);
}

boost::asio::awaitable<RefundResult> FailurePolicyStore::refund_slots(AcquireRequest req, Reservation r) {
  co_return co_await shared_->refund_slots(std::move(req), r);
}

// As a refund: to the shared store only (a grant of the local fallback is not looked for).
boost::asio::awaitable<RefundResult> FailurePolicyStore::return_unused(AcquireRequest req) {
  co_return co_await shared_->return_unused(std::move(req));
}

bool FailurePolicyStore::reset_adaptive(const BucketRef& bucket, std::string_view hash_tag) {
  if (fallback_) fallback_->reset_adaptive(bucket, hash_tag);
  return shared_->reset_adaptive(bucket, hash_tag);
}

std::optional<BucketSnapshot> FailurePolicyStore::inspect(const BucketRef& bucket, std::string_view hash_tag) {
  return shared_->inspect(bucket, hash_tag);
}

void FailurePolicyStore::publish_metrics(prometheus::Registry& registry) const {
  shared_->publish_metrics(registry);
  advance_to(counter(registry, "tollgate_store_failures_total",
                     "Decisions affected by a store failure (handled by the policy).",
                     {{"policy", failure_policy_name(policy_)}}),
             static_cast<double>(policy_decisions()));
}

}  // namespace tollgate::store

// The BucketStore seam: where bucket state lives (in-process, Redis). The store only executes the
// arithmetic of limiter/; policy (which bucket, how long to wait) stays with the caller.
#pragma once

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::store {

using limiter::BucketParams;
using limiter::Micros;

struct BucketRef {
  std::string_view name;  // a rule's interfaceUrl, or "channel:<channelType>"
  BucketParams params;
};

struct AcquireRequest {
  BucketRef bucket;
  std::optional<BucketRef> parent;  // a channel bucket decided together with `bucket`, all-or-nothing
  std::string_view hash_tag;        // Redis: keys of one request share this tag ("" = the bucket's name)
  double permits = 1.0;
  Micros timeout_us = 0;
};

// What a grant reserved, so that a departed caller can give it back (BucketStore::refund).
struct Reservation {
  Micros release = 0;  // the bucket's next_free right after the grant
  Micros cost = 0;
  double spent = 0;
  Micros parent_release = 0;
  Micros parent_cost = 0;
  double parent_spent = 0;
};

// ok: a decision (from the store, or from a local fallback: see `degraded`). unavailable_*: the
// store failed and the configured policy says forward unlimited (open) or refuse with 503 (closed).
enum class StoreStatus { ok, unavailable_open, unavailable_closed };

struct StoreDecision {
  StoreStatus status = StoreStatus::ok;
  limiter::Decision decision;  // combined over bucket and parent
  double max_permits = 0;      // size of the bucket that decided, for RateLimit headers
  bool parent_bound = false;   // the channel bucket decided the outcome
  Reservation reservation;     // when granted
  bool degraded = false;       // decided by the local fallback while the shared store is down
  std::string error;           // when failed or degraded: what went wrong
};

struct BucketSnapshot {
  double stored = 0;
  Micros next_free = 0;
  Micros now = 0;
  double max_permits = 0;
  bool tracked = false;  // false: no state held (a full, rested bucket)
};

class BucketStore {
 public:
  virtual ~BucketStore() = default;
  virtual boost::asio::awaitable<StoreDecision> try_acquire(AcquireRequest req) = 0;
  // Gives back a grant whose caller left before its slot, if it is still the newest reservation
  // of its bucket(s). Returns whether anything was given back.
  virtual boost::asio::awaitable<bool> refund(AcquireRequest req, Reservation r) = 0;
  // Read-only view of one bucket for the admin API (nullopt: the store cannot answer now).
  virtual std::optional<BucketSnapshot> inspect(const BucketRef& bucket, std::string_view hash_tag) = 0;
  virtual std::string name() const = 0;
  // Store-specific Prometheus lines (health, failures); empty when there is nothing to add.
  virtual std::string metrics_text() const { return {}; }
};

}  // namespace tollgate::store

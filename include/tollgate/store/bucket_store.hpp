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

struct AcquireRequest {
  std::string_view bucket;  // the bucket's name (a rule's interfaceUrl)
  BucketParams params;
  double permits = 1.0;
  Micros timeout_us = 0;
};

enum class StoreStatus { ok, failed };

struct StoreDecision {
  StoreStatus status = StoreStatus::ok;
  limiter::Decision decision;
  double max_permits = 0;   // size of the bucket that decided, for RateLimit headers
  std::string error;        // when failed: what went wrong
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
  // Read-only view of one bucket for the admin API.
  virtual std::optional<BucketSnapshot> inspect(std::string_view bucket, const BucketParams& params) = 0;
  virtual std::string name() const = 0;
};

}  // namespace tollgate::store

// The Clock seam: now in microseconds. The limiter never reads a clock; stores and the proxy do.
#pragma once

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Micros now_us() const = 0;
};

// CLOCK_MONOTONIC in microseconds: the same time base in every process on one machine.
class SteadyClock final : public Clock {
 public:
  Micros now_us() const override;
};

Micros steady_now_us();

}  // namespace tollgate::limiter

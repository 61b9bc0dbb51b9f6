// The Clock seam: now in microseconds. The limiter never reads a clock; stores and the proxy do.
#pragma once

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::limiter {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Micros now_us() const = 0;
  // Where this clock's whole seconds fall against the wall clock's: (now_us() + second_phase_us())
  // is a whole second when the wall clock's is (a fixed-window supplier counts per calendar
  // second). 0 for a clock whose seconds are the wall clock's, or that has none (a manual clock).
  virtual Micros second_phase_us() const { return 0; }
};

// CLOCK_MONOTONIC in microseconds: the same time base in every process on one machine.
class SteadyClock final : public Clock {
 public:
  Micros now_us() const override;
  Micros second_phase_us() const override;
};

Micros steady_now_us();
// The wall clock, in microseconds since the epoch.
Micros wall_now_us();

}  // namespace tollgate::limiter

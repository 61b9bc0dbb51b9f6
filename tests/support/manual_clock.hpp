// A clock that moves only when a test moves it.
#pragma once

#include <atomic>

#include "tollgate/limiter/clock.hpp"

namespace tollgate::testing {

class ManualClock final : public limiter::Clock {
 public:
  explicit ManualClock(limiter::Micros start = 1'000'000) : now_(start) {}
  limiter::Micros now_us() const override { return now_.load(); }
  void advance(limiter::Micros us) { now_ += us; }
  void set(limiter::Micros us) { now_ = us; }

 private:
  std::atomic<limiter::Micros> now_;
};

}  // namespace tollgate::testing

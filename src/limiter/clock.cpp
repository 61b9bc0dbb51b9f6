#include "tollgate/limiter/clock.hpp"

#include <chrono>

namespace tollgate::limiter {

Micros steady_now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

Micros SteadyClock::now_us() const { return steady_now_us(); }

}  // namespace tollgate::limiter

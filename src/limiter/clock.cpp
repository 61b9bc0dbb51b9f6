#include "tollgate/limiter/clock.hpp"

#include <chrono>

namespace tollgate::limiter {

Micros steady_now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

Micros wall_now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

Micros SteadyClock::now_us() const { return steady_now_us(); }

Micros SteadyClock::second_phase_us() const {
  using namespace std::chrono;
  const Micros wall = wall_now_us();
  const Micros steady = steady_now_us();
  const Micros phase = (wall - steady) % 1'000'000;
  return phase < 0 ? phase + 1'000'000 : phase;
}

}  // namespace tollgate::limiter

#include "tollgate/limiter/window_phase.hpp"

#include <algorithm>

namespace tollgate::limiter {

namespace {
Micros within_second(Micros t) {
  const Micros m = t % WindowPhase::kWindowUs;
  return m < 0 ? m + WindowPhase::kWindowUs : m;
}
}  // namespace

void WindowPhase::note_refused(Micros sent) {
  if (refused_ == kNone || sent > refused_) refused_ = sent;
}

bool WindowPhase::note_admitted(Micros sent) {
  if (refused_ == kNone || sent <= refused_) return false;  // sent before the refusal: its window was open
  const Micros gap = sent - refused_;
  const Micros from = within_second(refused_);
  refused_ = kNone;
  if (gap >= kWindowUs) return false;
  if (width_ > 0) {
    // The two arcs' overlap: the new one starts inside the held one, or the held one inside it.
    if (const Micros d = within_second(from - start_); d < width_) {
      width_ = std::min(gap, width_ - d);
      start_ = from;
      return true;
    }
    if (const Micros d = within_second(start_ - from); d < gap) {
      width_ = std::min(width_, gap - d);
      return true;
    }
  }
  start_ = from;  // the first arc, or one that misses the held one
  width_ = gap;
  return true;
}

Micros WindowPhase::phase() const { return learned() ? within_second(start_ + (width_ + 1) / 2) : 0; }

Micros WindowPhase::next_after(Micros t) const {
  // A refusal inside the arc: the boundary is after it (within the rest of the arc) or before it
  // (then the window ends a second later). A pause too short costs a refusal or two and narrows
  // the arc; one too long loses a window: the middle of the rest.
  if (const Micros d = within_second(t - start_); learned() && d < width_) return t + (width_ - d + 1) / 2;
  return t + kWindowUs - within_second(t - phase());
}

}  // namespace tollgate::limiter

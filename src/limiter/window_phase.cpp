#include "tollgate/limiter/window_phase.hpp"

#include <algorithm>

namespace tollgate::limiter {

Micros WindowPhase::within_second(Micros t) {
  const Micros m = t % kWindowUs;
  return m < 0 ? m + kWindowUs : m;
}

bool WindowPhase::note_refused(Micros sent) {
  bool taught = false;
  if (refused_ != kNone && sent > refused_ && sent - refused_ < kWindowUs) {
    // Two refusals less than a second apart, nothing admitted between: one window refused both,
    // so it began at or before the first and the next begins after the second, within a second of
    // the first: an arc too (a pause that ended before the window turned says where it will).
    const Arc next{within_second(sent), refused_ + kWindowUs - sent};
    taught = merge(arc_, next.start, next.width);
    if (taught) pair_ = next;
  }
  if (refused_ == kNone || sent > refused_) refused_ = sent;
  return taught;
}

bool WindowPhase::note_admitted(Micros sent) {
  if (refused_ == kNone || sent <= refused_) return false;  // sent before the refusal: its window was open
  const Micros gap = sent - refused_;
  const Micros from = within_second(refused_);
  refused_ = kNone;
  if (!merge(arc_, from, gap)) return false;
  pair_ = {from, gap};
  return true;
}

bool WindowPhase::merge(Arc& held, Micros from, Micros gap) {
  if (gap <= 0 || gap >= kWindowUs) return false;
  from = within_second(from);
  if (held.width > 0) {
    // The two arcs' overlap: the new one starts inside the held one, or the held one inside it.
    if (const Micros d = within_second(from - held.start); d < held.width) {
      held = {from, std::min(gap, held.width - d)};
      return true;
    }
    if (const Micros d = within_second(held.start - from); d < gap) {
      held.width = std::min(held.width, gap - d);
      return true;
    }
  }
  held = {from, gap};  // the first arc, or one that misses the held one
  return true;
}

WindowPhase::Arc WindowPhase::share(Arc& held, Micros now, Arc told) {
  if (told.width > 0) merge(held, now + told.start, told.width);
  return held.width > 0 ? relative(held, now) : Arc{};
}

Micros WindowPhase::phase() const { return learned() ? middle(arc_) : 0; }

Micros WindowPhase::next_after(Micros t) const {
  // A refusal inside the arc: the boundary is after it (within the rest of the arc) or before it
  // (then the window ends a second later). A pause too short costs a refusal or two and narrows
  // the arc; one too long loses a window: the middle of the rest.
  if (const Micros d = within_second(t - arc_.start); learned() && d < arc_.width)
    return t + (arc_.width - d + 1) / 2;
  return t + kWindowUs - within_second(t - phase());
}

}  // namespace tollgate::limiter

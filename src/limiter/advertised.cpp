// The advertised allowance: include/tollgate/limiter/advertised.hpp says what and why. Every step
// is mirrored in src/store/lua/adaptive_lib.lua (a_advert_*), in the same order, so that both
// stores compute the same doubles.
#include "tollgate/limiter/advertised.hpp"

#include <algorithm>

namespace tollgate::limiter {

namespace {

void roll(Advertised& a, Micros now) {
  if (a.reset == 0 || now < a.reset) return;
  // Nothing said of the next window, or nothing heard for long: the advertisement lapses.
  if (!(a.limit > 0) || a.window <= 0 || now - a.reset >= kAdvertForgetUs) {
    a.reset = 0;
    a.left = 0;
    a.seq = 0;
    a.ahead = 0;
    return;
  }
  const Micros k = (now - a.reset) / a.window + 1;
  // The permits granted into the new window (their slots at or after the reset) are its own.
  a.seq = k == 1 ? a.granted - a.ahead : a.granted;
  a.ahead = 0;
  a.left = a.limit;
  a.reset += k * a.window;
}

}  // namespace

void note_advert(Advertised& a, Micros now, const AdvertReport& r) {
  if (!(r.left >= 0) || r.reset_in < 0) return;
  roll(a, now);
  // A count the store no longer has (it forgot the bucket since) is taken as its count now.
  const double seq = std::min(r.seq, a.granted);
  const Micros reset = now + r.reset_in;
  if (a.reset != 0) {
    if (seq < a.seq) return;  // older than what is known
    const double known = a.left - (seq - a.seq);  // what was left as of that grant, as known
    if (r.left <= known && reset > a.reset) {
      // The same window, its end rounded later: the earlier end stands.
      a.left = r.left;
      a.seq = seq;
      if (r.limit > 0) a.limit = r.limit;
      if (r.window > 0) a.window = r.window;
      return;
    }
  }
  if (reset > a.reset) a.ahead = 0;  // a later end: the grants counted ahead of the old one may fall before it
  a.reset = reset;
  a.left = r.left;
  a.seq = seq;
  a.limit = r.limit;
  a.window = r.window;
}

AdvertLimit advert_limit(Advertised& a, Micros now, double permits, Micros from) {
  AdvertLimit out;
  roll(a, now);
  if (a.reset == 0) return out;
  const double left = a.left - (a.granted - a.seq - a.ahead);
  if (from < a.reset && left >= permits) {
    out.rate = left / (static_cast<double>(a.reset - from) / 1e6);
    return out;
  }
  if (!(a.limit > 0) || a.window <= 0) {
    out.closed_until = a.reset;
    return out;
  }
  out.rate = a.limit / (static_cast<double>(a.window) / 1e6);
  out.closed_until = a.ahead + permits <= a.limit ? a.reset : a.reset + a.window;
  return out;
}

void advert_granted(Advertised& a, double permits, Micros slot) {
  a.granted += permits;
  if (a.reset != 0 && slot >= a.reset) a.ahead += permits;
}

bool advert_live(const Advertised& a, Micros now) {
  return a.reset != 0 && (now < a.reset || (a.limit > 0 && a.window > 0 && now - a.reset < kAdvertForgetUs));
}

}  // namespace tollgate::limiter

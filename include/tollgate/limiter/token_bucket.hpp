// The token bucket (docs/design.md, "The bucket arithmetic"): pure arithmetic on a state struct.
// No I/O, no clock reads, no locks. Times are whole microseconds on the caller's clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace tollgate::limiter {

using Micros = std::int64_t;
inline constexpr Micros kInfinite = std::numeric_limits<Micros>::max();

// pay_now: the request waits until its own last permit exists (the gateway's rule).
// pay_later: Guava's RateLimiter: the request waits only for the previous reservation.
enum class Mode { pay_now, pay_later };

// What an operator configures for one bucket.
struct BucketParams {
  double rate = 1.0;                 // permits generated per second, > 0
  std::optional<double> burst;       // SmoothBursty maxPermits; unset = one second of permits
  Micros warmup_us = 0;              // > 0 selects SmoothWarmingUp (bucket size follows Guava)
  double cold_factor = 3.0;          // SmoothWarmingUp: cold interval = cold_factor * interval
  Mode mode = Mode::pay_now;

  bool operator==(const BucketParams&) const = default;
};

// The numbers derived from BucketParams, in microseconds and permits.
struct Shape {
  double interval_us = 0;       // stable interval between fresh permits
  double max_permits = 0;
  double cool_down_us = 0;      // time to generate one stored permit
  bool warm = false;            // SmoothWarmingUp
  double threshold = 0;         // warm-up: stored permits below this cost interval_us each
  double cold_interval_us = 0;  // warm-up: cost of the permit at max_permits
  double slope = 0;             // warm-up: d(cost)/d(permit) above threshold
};

// Throws std::invalid_argument for rate <= 0, negative burst, bad warm-up.
Shape shape_of(const BucketParams& p);

struct BucketState {
  double stored = 0;   // stored permits, 0..max_permits, fractions kept
  Micros next_free = 0;
};

// A missing state is a full, rested bucket: stored = max, next_free = now.
inline BucketState full_state(const Shape& s, Micros now) { return {s.max_permits, now}; }
inline BucketState empty_state(Micros now) { return {0.0, now}; }

struct Decision {
  bool granted = false;
  Micros wait_us = 0;         // granted: how long the caller holds the request
  Micros retry_after_us = 0;  // rejected: earliest moment (from now) the same request would fit
  double remaining = 0;       // stored permits after the decision
  Micros next_free = 0;       // the bucket's next free slot after the decision
  // What a grant took, so that it can be given back (refund, abandon) when its caller leaves.
  Micros cost_us = 0;         // added to next_free
  double spent = 0;           // stored permits taken
};

// Step 1 of the algorithm: credit the time since next_free as stored permits.
void resync(BucketState& st, const Shape& s, Micros now);

// Cost in whole microseconds of taking `spend` permits out of `stored` (0 unless warm-up).
Micros stored_permits_to_wait_time(const Shape& s, double stored, double spend);

// try_acquire as docs/design.md gives it. On rejection `st` is left unchanged.
// `reserve` (priority classes, docs/priority.md): permits this request must leave in the bucket for
// the classes above its own. It is decided as if it took permits + reserve (the slot where the
// reserve would still be there after it), held until that slot, and charged only its `permits`.
// 0 is today's decision exactly. Only for SmoothBursty shapes (config refuses warm-up with classes).
Decision try_acquire(BucketState& st, const Shape& s, Mode mode, double permits, Micros timeout_us,
                     Micros now, double reserve = 0.0);

// Two buckets decided together (an interface bucket and its channel bucket): granted only if both
// grant, and then both are charged; otherwise neither changes. Each takes its own permits (a
// rule's cost and channelCost) and keeps its own reserve. The wait is the later of the two
// slots; a rejection's retry_after is the larger of the rejecting buckets'. `bound` tells which
// bucket decided the outcome: 0 the first, 1 the second.
struct PairDecision {
  Decision first;
  Decision second;
  Decision combined;
  int bound = 0;
};
struct PairAsk {
  double permits_a = 1.0, permits_b = 1.0;
  double reserve_a = 0.0, reserve_b = 0.0;
};
PairDecision try_acquire_pair(BucketState& a, const Shape& sa, BucketState& b, const Shape& sb, Mode mode,
                              const PairAsk& ask, Micros timeout_us, Micros now);

// A grant whose request reached no upstream (no endpoint could take it, nothing was sent): its
// `permits` come back as stored permits, never above max_permits. Unlike refund() it does not
// need the grant to be the newest, nor its slot to be ahead: the permits were taken and not used.
// No resync first: the permits credited later for the time since next_free are capped at the
// same maximum. Returns whether anything came back (false when the bucket was full).
bool restore(BucketState& st, const Shape& s, double permits);

// Gives a grant back if it is still the bucket's newest reservation (next_free == its release);
// returns whether it did. Used when a held request's client leaves before its slot.
bool refund(BucketState& st, const Shape& s, Micros release, Micros cost_us, double spent);

// One grant as it can be given back: the bucket's next_free right after it (its release, us), what
// it added to next_free (us) and the stored permits it took (Decision::next_free, cost_us, spent).
struct Slot {
  Micros release = 0;
  Micros cost_us = 0;
  double spent = 0;
};

// At most this many abandoned slots are remembered per bucket (24 bytes each, 384 KiB at most;
// more than the held requests of a bucket at 270 permits/s with the longest wait window, 60 s).
// Beyond it the one with the earliest release is forgotten: its slot stays taken as a live one's
// would, so a give-back stops there. The bucket never admits more for it, it only gives back less.
inline constexpr std::size_t kMaxAbandoned = 16384;

struct GiveBack {
  std::uint32_t returned = 0;  // reservations given back now: this one and the abandoned ones it unblocked
  bool remembered = false;     // this one waits in `abandoned` for the live ones after it
};

// A held request's caller left before its slot `r`. `abandoned` holds this bucket's earlier abandoned
// slots that a live reservation still followed (sorted by release; at one release those that took no
// time after those that did, then in the order they were abandoned), and nothing else touches it.
//  1. Slots already released (release <= now) are not refundable: they are forgotten.
//  2. r released, or not behind next_free (a state that no longer holds it): nothing happens.
//  3. r.release < next_free: a live reservation follows r; r is remembered (at most max_abandoned).
//  4. r.release == next_free: r is the newest. It is given back as refund() does (next_free -= cost,
//     stored = min(max, stored + spent)), and so is every remembered slot whose release is then the
//     new next_free, newest first, until a live (or released, or forgotten) one is at the tail.
//     Remembered zero-cost slots at r's release were granted after r: they go back before it.
// Once every caller of a run of held grants has left, the bucket is as if they had never been granted.
GiveBack abandon(BucketState& st, const Shape& s, std::vector<Slot>& abandoned, const Slot& r, Micros now,
                 std::size_t max_abandoned = kMaxAbandoned);

// Guava's setRate: resync with the old shape, then rescale stored permits to the new maximum.
void rescale(BucketState& st, const Shape& old_shape, const Shape& new_shape, Micros now);

// Saturating helpers (exposed for the stores and tests).
Micros saturating_add(Micros a, Micros b);
Micros truncate_micros(double us);  // toward zero, saturating at the int64 range

// A bucket object over the functions above, for the simulator and for tests.
class TokenBucket {
 public:
  enum class Initial { full, empty };
  TokenBucket(const BucketParams& params, Micros now, Initial initial = Initial::full);

  Decision try_acquire(double permits, Micros timeout_us, Micros now);
  Decision acquire(double permits, Micros now) { return try_acquire(permits, kInfinite, now); }
  // Changes the rate the way Guava does; an unset burst follows the rate.
  void set_rate(double rate, Micros now);

  const BucketParams& params() const { return params_; }
  const Shape& shape() const { return shape_; }
  const BucketState& state() const { return state_; }

 private:
  BucketParams params_;
  Shape shape_;
  BucketState state_;
};

}  // namespace tollgate::limiter

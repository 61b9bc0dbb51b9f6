// What a request asks of a bucket store and what it answers: plain data, no Asio, so that the
// request-path helpers (proxy/throttle) and the fuzz targets can use it without coroutines.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/limiter/adaptive_rate.hpp"
#include "tollgate/limiter/three_color.hpp"
#include "tollgate/limiter/token_bucket.hpp"
#include "tollgate/limiter/window.hpp"

namespace tollgate::store {

using limiter::BucketParams;
using limiter::Micros;

struct BucketRef {
  std::string_view name;  // a rule's interfaceUrl, or "channel:<channelType>"
  BucketParams params;
};

// A window quota of the request, counted under `key`: "q:<quotaId>:<client key>", or
// "q:<quotaId>:" for one counter shared by every caller.
struct QuotaRef {
  std::string key;
  limiter::WindowParams params;
  bool shared = true;  // no client key: kept with the shared buckets, never evicted
};

// maxShare: the caller's grants that are still waiting for their slot are tracked under `key`
// ("s:<configId>:<client key>"); with `max_held` of them waiting, only an immediate permit is given.
struct ShareRef {
  std::string key;
  std::int64_t max_held = 1;
};

// A three-colour marker in place of the rule's token bucket (limiter/three_color): its state is
// kept under meter_name(name). The request's `permits` are its cost.
struct MeterRef {
  std::string_view name;  // the rule's bucket name
  bool two_rate = false;  // trTCM (RFC 2698); else srTCM (RFC 2697)
  limiter::SrtcmParams sr{};
  limiter::TrtcmParams tr{};
  limiter::Color pre = limiter::Color::green;  // colour-aware: the request's class; blind: green
  bool wait_green = false;                     // "yellow": "wait": held in the window for a green
};

// Everything one request must pass, decided as one atomic step: either every check admits and
// every one is charged, or nothing is charged anywhere.
struct AcquireRequest {
  BucketRef bucket;
  std::optional<BucketRef> parent;  // a channel bucket decided together with `bucket`, all-or-nothing
  std::string_view hash_tag;        // Redis: keys of one request share this tag ("" = the bucket's name)
  double permits = 1.0;              // taken from `bucket` (a rule's cost)
  Micros timeout_us = 0;
  bool use_bucket = true;           // false: the rule has quotas only (parent, if any, still applies)
  bool per_client_bucket = false;   // bucket.name is a client key ("c:<configId>:<client>"): evictable
  std::vector<QuotaRef> quotas{};
  std::optional<ShareRef> share{};
  // The bucket's rate follows the upstream's throttling (limiter/adaptive_rate). On: the
  // bucket decides at min(bucket.params.rate, the adapted rate) and waits out a pause; shadow: the
  // adapted state follows the signals and is reported, the bucket decides at its configured rate.
  limiter::Adaptive adaptive = limiter::Adaptive::off;
  // An adaptive request's caller (limiter::caller_id of its client address): a throttle cuts the
  // shared rate only with evidence that more than one caller is throttled, or that it is the only one.
  std::uint64_t caller = 0;
  // An adaptive request also reports the supplier's answers other than throttles that this
  // gateway saw for the bucket since its last report: what the supplier admitted, the estimate
  // of its allowance (limiter::note_admitted). Not a new arrival when `again` (a request asking
  // again after a pause voided its slot).
  double admitted = 0;
  bool again = false;
  // (Last, so that the fields above keep their places in positional initialisers.)
  double parent_permits = 1.0;       // taken from `parent` (the rule's channelCost)
  // Priority classes (docs/priority.md): the share of each bucket's burst this request must leave
  // for the classes above its own (0: the highest class, or no classes). Shares, not permits, so
  // that every store sizes them from the shape it decides with (an adapted or a rescaled one).
  double reserve_share = 0.0;
  double parent_reserve_share = 0.0;
  std::optional<MeterRef> meter{};  // the rule's meter (use_bucket is then false)
  // Of `admitted`, those heard before the current second of the wall clock: counted in the store's
  // previous second (limiter::note_admitted's `before`).
  double admitted_before = 0;
  // An adaptive request also carries the newest allowance its gateway read in the supplier's
  // fields since its last report (limiter/advertised.hpp), taken in before it is decided.
  std::optional<limiter::AdvertReport> advert{};
  // An adaptive request (a decision or a throttle report) carries the pair of where the supplier's
  // windows start its gateway learned since its last report, relative to its now
  // (limiter::WindowPhase::share; width 0: none).
  limiter::WindowPhase::Arc window_pair{};
};

// Which check decided a combined outcome (the binding one: the rejection furthest from passing).
enum class Bound : std::uint8_t { bucket, parent, share, quota };

// What a grant reserved, so that a departed caller can give it back (BucketStore::refund).
struct Reservation {
  Micros release = 0;  // the bucket's next_free right after the grant
  Micros cost = 0;
  double spent = 0;
  Micros parent_release = 0;
  Micros parent_cost = 0;
  double parent_spent = 0;
  Micros share_release = 0;  // maxShare: the waiting grant recorded for the caller (0: none)
};

// What giving a departed caller's reservation back did, per bucket of the request: how many
// reservations came back (its own and every earlier abandoned one that no live reservation follows
// any more), and whether its own had to be remembered for later because a live one follows it.
struct RefundResult {
  std::uint32_t bucket = 0;  // in the request's own bucket
  std::uint32_t parent = 0;  // in its channel bucket
  bool remembered = false;   // kept in at least one bucket, to come back with the ones after it
  bool any() const { return bucket + parent > 0; }
  // Reservations given back, counting a request that holds slots in two buckets once.
  std::uint32_t reservations() const { return bucket > parent ? bucket : parent; }
};

// ok: a decision (from the store, or from a local fallback: see `degraded`). unavailable: the store
// could not decide and no failure policy has looked at it yet (FailurePolicyStore turns it into one
// of the others; a bare store's is forwarded, like fail_open). unavailable_*: the store failed and
// the configured policy says forward unlimited (open) or refuse with 503 (closed).
enum class StoreStatus { ok, unavailable, unavailable_open, unavailable_closed };

struct StoreDecision {
  StoreStatus status = StoreStatus::ok;
  limiter::Decision decision;  // combined over bucket and parent
  double max_permits = 0;      // size of the bucket that decided, for RateLimit headers
  bool parent_bound = false;   // the channel bucket decided the outcome
  Bound bound = Bound::bucket;
  std::size_t bound_quota = 0;  // index into the request's quotas when bound == Bound::quota
  std::vector<limiter::WindowDecision> quotas{};  // one per request quota, in order
  Reservation reservation;     // when granted
  bool degraded = false;       // decided by the local fallback while the shared store is down
  std::string error;           // when failed or degraded: what went wrong
  // An adaptive request: the rate the bucket's adapted state gives now (0: not adaptive), and how
  // long the bucket's pause still runs from the decision (0: none).
  double effective_rate = 0;
  Micros paused_us = 0;
  // ...and when its last cut was, on the store's clock (0: none): a cut voids the slots granted
  // before it, and their holders ask again when they wake (a value, not an age: gateways compare
  // them exactly).
  Micros last_cut_us = 0;
  // ...and the bucket's count of granted permits right after this grant (every gateway's, in a
  // shared store): an answer's advertised fields are as of it (limiter/advertised.hpp).
  double grant_seq = 0;
  // Adaptive buckets: where the supplier's windows start as the fleet learned them, relative to the
  // store's now (limiter::WindowPhase::share; width 0: not learned).
  limiter::WindowPhase::Arc windows{};
  // A metered request: its colour (green, or yellow: forwarded marked as excess; red is a
  // rejection) and the meter's counts after the decision (C; srTCM E or trTCM P).
  limiter::Color color = limiter::Color::green;
  double meter_committed = 0;
  double meter_excess = 0;
};

// What a throttle signal from the upstream did to an adaptive bucket (BucketStore::throttled).
struct AdaptOutcome {
  bool ok = false;              // the store applied it (false: it could not, see error)
  limiter::ThrottleResult result;  // cut / paused, from the store's clock
  Micros pause_left_us = 0;     // the pause still to run, from the store's now
  double effective_rate = 0;    // after the signal
  Micros last_cut_us = 0;       // the bucket's last cut, on the store's clock (StoreDecision's)
  // Where the supplier's windows start as the fleet learned them, relative to the store's now
  // (limiter::WindowPhase::share; width 0: not learned).
  limiter::WindowPhase::Arc windows{};
  std::string error;
};

struct BucketSnapshot {
  double stored = 0;
  Micros next_free = 0;
  Micros now = 0;
  double max_permits = 0;
  bool tracked = false;  // false: no state held (a full, rested bucket)
  std::size_t abandoned = 0;  // slots of departed callers waiting for the live ones after them
};

}  // namespace tollgate::store

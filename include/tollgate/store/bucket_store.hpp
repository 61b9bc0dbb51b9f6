// The BucketStore seam: where bucket state lives (in-process, Redis). The store only executes the
// arithmetic of limiter/; policy (which bucket, how long to wait) stays with the caller.
#pragma once

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tollgate/store/decision.hpp"

namespace prometheus {
class Registry;
}

namespace tollgate::store {

// One bucket to read for the admin API: the bucket and the hash tag its requests use.
struct BucketProbe {
  BucketRef bucket;
  std::string_view hash_tag;
};

// How the store is doing, for an operator's eyes (the console, GET /admin/overview).
struct StoreHealth {
  std::string name;             // "local", "redis"
  bool shared = false;          // the fleet shares its buckets
  bool up = true;
  std::uint64_t incidents = 0;  // outages since start
  unsigned live_instances = 1;  // gateway instances heartbeating in the store
  std::string last_error;
  std::string failure_policy;   // what decides while it is down ("" when it cannot go down)
  std::uint64_t policy_decisions = 0;
  std::vector<std::pair<std::string, bool>> nodes;  // Redis primaries and whether they are ready
};

// A credential the fleet shares (an upstream's OAuth2 token, proxy/upstream_auth), kept by a
// shared store in one key tagged "auth:<name>" (src/store/lua/shared_token.lua says each step).
struct SharedTokenOp {
  enum Kind : std::uint8_t { get, put, fail } kind = get;
  std::string name;    // the credential's: its upstream's name and a fingerprint of its settings
  std::string holder;  // who asks (one gateway's credential), for the lease
  std::string token;   // put: the new token; get: one a supplier refused ("" none)
  std::int64_t lease_ms = 0;   // get: how long a lease taken now lasts
  std::int64_t before_ms = 0;  // get: a token this close to its end is due
  std::int64_t ttl_ms = 0;     // put: the token's time left
  std::int64_t hold_ms = 0;    // put, fail: how much longer the lease is kept (the token rate)
};
struct SharedTokenReply {
  bool answered = false;  // false: the store does not share tokens, or could not answer now
  std::string token;      // get: the fleet's token ("" none)
  std::int64_t ttl_ms = 0;       // its time left
  std::int64_t lifetime_ms = 0;  // its whole lifetime
  bool due = false;     // get: none, or within before_ms of its end: the next is wanted
  bool leased = false;  // get: this caller holds the lease: it asks the token endpoint, then puts
  std::int64_t failed_ms = 0;  // get: the last token request failed, and stands this much longer
  bool stored = false;  // put, fail: done (false: the caller no longer held the lease)
};

class BucketStore {
 public:
  virtual ~BucketStore() = default;
  virtual boost::asio::awaitable<StoreDecision> try_acquire(AcquireRequest req) = 0;
  // The same decision, for a store that makes it without waiting (the in-process one): into `out`,
  // returning true, with no coroutine frame and no copy of the request. False: nothing decided,
  // the caller awaits try_acquire.
  virtual bool decide_now(const AcquireRequest& req, StoreDecision& out) {
    (void)req, (void)out;
    return false;
  }
  // Gives back a grant whose caller left before its slot (see refund_slots). Returns whether
  // anything was given back now.
  virtual boost::asio::awaitable<bool> refund(AcquireRequest req, Reservation r) = 0;
  // The same, saying what came back: in each bucket, the grant if it is the newest reservation,
  // together with every earlier abandoned one that is then at the tail; otherwise the grant is
  // remembered and comes back when the reservations after it are gone too (limiter::abandon).
  // A store that cannot say more answers with its refund().
  virtual boost::asio::awaitable<RefundResult> refund_slots(AcquireRequest req, Reservation r) {
    RefundResult out;
    if (co_await refund(std::move(req), r)) out.bucket = 1;
    co_return out;
  }
  // A granted request reached no upstream (every endpoint failed to connect, nothing was sent):
  // its permits come back to its bucket and its channel bucket as stored permits, never above
  // the burst, and not while an adaptive pause is on (limiter::restore). Window quotas keep
  // their count. A store that cannot give back says nothing came back.
  virtual boost::asio::awaitable<RefundResult> return_unused(AcquireRequest req) {
    (void)req;
    co_return RefundResult{};
  }
  // The upstream throttled a request of `req`'s adaptive bucket: cut its rate, pause it
  // for `pause_us` (Retry-After, RateLimit t; 0: none) plus `jitter_us`, once per debounce window
  // whoever reports it. With Adaptive::on a pause also empties the bucket until it ends.
  virtual boost::asio::awaitable<AdaptOutcome> throttled(AcquireRequest req, Micros pause_us, Micros jitter_us) {
    (void)req, (void)pause_us, (void)jitter_us;
    AdaptOutcome out;
    out.error = name() + " store does not adapt rates";
    co_return out;
  }
  // Whether other gateways decide on the same buckets (a store shared by a fleet): a cut one of
  // them made reaches this gateway's held requests only with its next decision for the bucket,
  // unless they ask (last_cut).
  virtual bool shared_by_fleet() const { return false; }
  // The time of an adaptive bucket's last cut, on the store's clock as its decisions report it
  // (StoreDecision::last_cut_us; 0: none, or the store cannot say now). For a request held on a
  // slot, about to go: a later cut than the one it was granted knowing of voided its slot. `req`
  // must outlive the call.
  virtual boost::asio::awaitable<Micros> last_cut(const AcquireRequest& req) {
    (void)req;
    co_return 0;
  }
  // Forgets what an adaptive bucket learned (its cuts, pause and the supplier's advertised
  // allowance): an operator's reset after a supplier restored its allowance early. Blocking, for
  // the admin API's thread, bounded like inspect(). Returns whether the store did it (false: it
  // cannot now, or keeps no adaptive state).
  virtual bool reset_adaptive(const BucketRef& bucket, std::string_view hash_tag) {
    (void)bucket, (void)hash_tag;
    return false;
  }
  // Read-only view of one bucket for the admin API (nullopt: the store cannot answer now).
  virtual std::optional<BucketSnapshot> inspect(const BucketRef& bucket, std::string_view hash_tag) = 0;
  // Several buckets at once (one /metrics scrape's debt gauges), one answer per probe in order. A
  // remote store answers in one round trip; this default asks inspect() for each and stops at the
  // first that cannot answer, so that one store timeout bounds the whole read.
  virtual std::vector<std::optional<BucketSnapshot>> inspect_many(const std::vector<BucketProbe>& probes) {
    std::vector<std::optional<BucketSnapshot>> out;
    out.reserve(probes.size());
    for (const BucketProbe& p : probes) {
      out.push_back(inspect(p.bucket, p.hash_tag));
      if (!out.back()) break;
    }
    out.resize(probes.size());
    return out;
  }
  // Whether shared_token() keeps one token for a fleet of gateways (a shared store).
  virtual bool shares_tokens() const { return false; }
  virtual boost::asio::awaitable<SharedTokenReply> shared_token(SharedTokenOp op) {
    (void)op;
    co_return SharedTokenReply{};
  }
  virtual std::string name() const = 0;
  virtual StoreHealth health() const {
    StoreHealth h;
    h.name = name();
    return h;
  }
  // Sets the store's own series (health, failures, client keys) in the gateway's registry, made on
  // the first call: called by each /metrics scrape, as some are counted only then.
  virtual void publish_metrics(prometheus::Registry& registry) const { (void)registry; }
};

}  // namespace tollgate::store

// Request outcome counters and histograms: every decision the proxy takes is counted under a
// name, globally and per bucket (label values come from the rules, so they are bounded).
// Every series the gateway exposes lives in one prometheus::Registry, owned here: the proxy's are
// made below, the store and the admin API add theirs, and /metrics is that registry serialized by
// prometheus-cpp (AdminApi). A request never looks a series up by its labels: the global ones are
// made here, a bucket's and a policy's once per rule (RuleViews), an upstream's once at start.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "tollgate/limiter/advertised.hpp"
#include "tollgate/limiter/three_color.hpp"
#include "tollgate/limiter/window_phase.hpp"
#include "tollgate/proxy/deadline.hpp"

namespace tollgate::proxy {

enum class Outcome : int {
  forwarded,    // a rule matched and granted a permit at once
  delayed,      // a rule matched and the request was held for its slot, then forwarded
  rejected,     // a rule matched and the slot was beyond the wait window (or a hold cap was reached): 429
  bypassed,     // the global switch is off: forwarded, nothing counted against a bucket
  unmatched,    // no rule governs the path: forwarded unlimited
  store_error,  // the bucket store failed: handled per its failure policy
  shadow_rejected,  // shadow mode: would have been 429, forwarded with a header saying so
  count_
};
const char* outcome_name(Outcome o);
inline constexpr std::size_t kOutcomes = static_cast<std::size_t>(Outcome::count_);

// unresolved: the upstream had no address yet (503 upstream_unresolved).
// deadline: the caller's own budget ran out before the response head (not the upstream's fault).
// auth: no supplier credential could be had (502 upstream_auth_failed, proxy/upstream_auth).
enum class UpstreamError : int { connect, reset, timeout, unresolved, deadline, auth, count_ };
const char* upstream_error_name(UpstreamError e);
inline constexpr std::size_t kUpstreamErrors = static_cast<std::size_t>(UpstreamError::count_);

// The bounds, in seconds, of every *_seconds histogram.
const prometheus::Histogram::BucketBoundaries& seconds_bounds();

// A histogram in seconds, fed with microseconds (what the proxy's clocks give).
class SecondsHistogram {
 public:
  explicit SecondsHistogram(prometheus::Histogram& h) : h_(&h) {}
  void observe_us(std::int64_t us) const { h_->Observe(us > 0 ? static_cast<double>(us) / 1e6 : 0.0); }
  const prometheus::Histogram& histogram() const { return *h_; }

 private:
  prometheus::Histogram* h_;
};

// What an adaptive bucket did last, for /admin/rules and the console.
struct AdaptiveEvent {
  std::string cause;          // "429", "503", "ratelimit_r0" ("" none yet)
  double from = 0, to = 0;    // the rate being sent, and the rate after the cut
  std::int64_t at_ms = 0;     // wall clock (Unix ms)
  std::int64_t pause_ms = 0;  // the pause it began (0: none)
};

// An adaptive bucket's series, made on its first adaptive decision.
struct AdaptiveSeries {
  prometheus::Gauge& effective_rate;      // the rate it decides at now (permits/s)
  prometheus::Counter& cuts;              // throttle episodes that cut the rate
  prometheus::Counter& pauses;            // ... and those that paused it (Retry-After, RateLimit t)
  prometheus::Counter& paused_rejections; // held requests whose slot a cut voided: 429 when they woke
  prometheus::Counter& unconfirmed;       // throttles that cut nothing: one caller's among others' successes
};

// What an adaptive bucket's supplier advertises in its rate-limit fields (limiter/advertised.hpp),
// as this gateway last read it: made on the first answer that carried such fields.
struct SupplierSeries {
  prometheus::Gauge& remaining;  // tollgate_supplier_remaining: left in its window, as last advertised
  prometheus::Gauge& limit;      // tollgate_supplier_limit: its allowance per window (0: not said)
  prometheus::Counter& ignored;  // tollgate_supplier_fields_ignored_total: fields malformed or absurd
};

// One priority class of a bucket (docs/priority.md): its requests by outcome, as
// tollgate_priority_requests_total{bucket,class,outcome}. The outcomes a classed request can have
// (forwarded, delayed, rejected, shadow_rejected, store_error) are made with the class; a request
// the switch lets by (bypassed) or no rule governs (unmatched) has no class.
struct ClassSeries {
  std::array<prometheus::Counter*, kOutcomes> outcomes{};
  void count(Outcome o) const {
    if (prometheus::Counter* c = outcomes[static_cast<std::size_t>(o)]) c->Increment();
  }
  double total(Outcome o) const {
    const prometheus::Counter* c = outcomes[static_cast<std::size_t>(o)];
    return c ? c->Value() : 0.0;
  }
};

// One bucket's series, shared by every worker.
class BucketMetrics {
 public:
  BucketMetrics(prometheus::Registry& registry, std::string name);
  BucketMetrics(const BucketMetrics&) = delete;
  BucketMetrics& operator=(const BucketMetrics&) = delete;

  void count(Outcome o) {
    prometheus::Counter* c = outcomes_[static_cast<std::size_t>(o)].load(std::memory_order_acquire);
    (c ? *c : first_count(o)).Increment();
  }
  // The outcome's count so far (0 before its first): for readers such as the console's history.
  double total(Outcome o) const {
    const prometheus::Counter* c = outcomes_[static_cast<std::size_t>(o)].load(std::memory_order_acquire);
    return c ? c->Value() : 0.0;
  }

  prometheus::Gauge& held;               // requests waiting on it right now (also read by the hold cap)
  prometheus::Counter& cap_rejections;   // 429s because too many requests already wait
  SecondsHistogram wait;                 // time held before forwarding (0 for forwarded)
  LatencyEstimate upstream_latency;      // its requests' upstream latency, last minute (deadlines)

  // Throttle signals from its upstream (429s and the like), adaptive or not: made on the first.
  prometheus::Counter& upstream_throttled();
  double upstream_throttled_total() const;
  // The adaptive series: made on the first call. `adaptive_seen` says whether that happened.
  AdaptiveSeries& adaptive();
  const AdaptiveSeries* adaptive_seen() const { return adaptive_.load(std::memory_order_acquire); }
  // The bucket's pause as heard from the store (steady clock, us), for /admin/rules. Only ever
  // raised (raise_pause): a store's pauses never shrink, and a decision made before a pause whose
  // answer lands after it must not erase it.
  std::atomic<std::int64_t> pause_until_us{0};
  void raise_pause(std::int64_t until) {
    std::int64_t seen = pause_until_us.load(std::memory_order_relaxed);
    while (until > seen && !pause_until_us.compare_exchange_weak(seen, until, std::memory_order_relaxed)) {
    }
  }
  // The bucket's last cut as the store last told it (the store's own clock, us; 0: none): a cut
  // voids the slots granted before it, and held requests granted knowing of an earlier one ask
  // again when they wake. Set by every adaptive decision and throttle, not only raised: a store
  // that forgot the bucket (Redis expired its hash, the in-process store swept it) or a fallback
  // store on another clock (the `local` failure policy) must bring it back with it. A decision
  // made before a cut whose answer lands after it can hide that cut from holders waking until the
  // next decision.
  std::atomic<std::int64_t> last_cut_us{0};
  // Adaptive buckets: the supplier's answers other than throttles that this gateway saw since it
  // last told the store (each decision for the bucket takes them along): what the supplier admits,
  // and how many of them it heard before the current second (they belong to the store's previous
  // second: a fixed-window supplier's allowance is read per window, and a second's last answers are
  // told with the next second's first decision). The seconds are the supplier's windows once this
  // gateway learned where they start, else the wall clock's, as the store's.
  struct Admitted {
    double total = 0;
    double before = 0;  // of total, heard in an earlier second of the wall clock
  };
  void note_admitted() { note_admitted_at(window_second()); }
  void note_admitted_at(std::uint64_t sec);
  Admitted take_admitted() { return take_admitted_at(window_second()); }
  Admitted take_admitted_at(std::uint64_t sec);
  // Admissions taken for a report the store did not take: told with the next one.
  void give_back_admitted(Admitted a);
  void give_back_admitted_at(Admitted a, std::uint64_t sec);
  void note_event(AdaptiveEvent e);
  AdaptiveEvent last_event() const;
  // Adaptive buckets: the newest allowance the supplier advertised in an answer this gateway read,
  // told with the next decision for the bucket. `seq` is the store's grant count the answered
  // request was given (StoreDecision::grant_seq), `reset_at_us` the window's end on the steady
  // clock; a report of a later grant replaces one of an earlier (of the same, the smaller left).
  void note_advert(double seq, double left, std::int64_t reset_at_us, double limit, std::int64_t window_us);
  // The report to send with a decision now, if any came since the last; taken. (The steady clock
  // is read only when there is one.)
  std::optional<limiter::AdvertReport> take_advert();
  // An operator reset what the bucket learned (POST /admin/rules/<bucket>/adaptive/reset): the
  // report not yet told, the pause and the last cut heard of are forgotten.
  void forget_adaptive();
  // Adaptive buckets: where the supplier's one-second windows start (limiter/window_phase.hpp),
  // learned from this gateway's refusals and the admissions after them, by the wall-clock time
  // each was sent. An admission costs one relaxed load unless a refusal waits for it.
  void note_refused_sent(std::int64_t sent_wall_us);
  void note_admitted_sent(std::int64_t sent_wall_us) {
    if (phase_waiting_.load(std::memory_order_relaxed)) admitted_after_refusal(sent_wall_us);
  }
  // From `now_wall_us` to the start of the supplier's window after the one a request sent at
  // `sent_wall_us` was in (the wall clock's whole seconds until a boundary is learned; 0: it began
  // already), and where in the second they start (-1: not learned).
  std::int64_t until_window_us(std::int64_t sent_wall_us, std::int64_t now_wall_us) const;
  std::int64_t window_phase_us() const;
  // The fleet learns them together: the pair this gateway learned since its last report to the
  // store, relative to now (taken; one relaxed load when there is none), and the fleet's arc from
  // the store's reply, adopted (two relaxed loads when it is the one adopted already).
  limiter::WindowPhase::Arc take_window_pair();
  void adopt_windows(limiter::WindowPhase::Arc fleet);
  // The supplier's series: made on the first call. `supplier_seen` says whether that happened.
  SupplierSeries& supplier();
  const SupplierSeries* supplier_seen() const { return supplier_.load(std::memory_order_acquire); }
  // A meter's colours (tollgate_meter_requests_total{bucket,color}), made on the first of each.
  void count_color(limiter::Color c) {
    prometheus::Counter* x = colors_[static_cast<std::size_t>(c)].load(std::memory_order_acquire);
    (x ? *x : first_color(c)).Increment();
  }
  double color_total(limiter::Color c) const {
    const prometheus::Counter* x = colors_[static_cast<std::size_t>(c)].load(std::memory_order_acquire);
    return x ? x->Value() : 0.0;
  }
  // A priority class's series (made on first use; class names come from the rules, so bounded).
  // Callers keep the reference (RuleViews): a lookup takes a lock.
  const ClassSeries& priority_class(std::string_view name);
  // The classes seen so far, in name order, for readers (the admin API).
  void each_class(const std::function<void(const std::string&, const ClassSeries&)>& fn) const;

 private:
  // /metrics lists only the outcomes a bucket saw: an outcome's series is made by its first count.
  prometheus::Counter& first_count(Outcome o);
  prometheus::Counter& first_color(limiter::Color c);
  std::array<std::atomic<prometheus::Counter*>, 3> colors_{};

  prometheus::Registry& registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  const std::string name_;
  std::array<std::atomic<prometheus::Counter*>, kOutcomes> outcomes_{};
  std::once_flag throttled_once_, adaptive_once_;
  std::atomic<prometheus::Counter*> throttled_{nullptr};
  std::atomic<AdaptiveSeries*> adaptive_{nullptr};
  // The wall clock's second, or the supplier's window once learned (its start: window_start_us_),
  // as the store counts them (limiter::AdaptiveState::windows).
  std::uint64_t window_second() const;
  static std::int64_t window_start(const limiter::WindowPhase& w);
  std::atomic<std::int64_t> window_start_us_{0};
  std::atomic<bool> pair_pending_{false};
  std::atomic<std::int64_t> adopted_start_{-1}, adopted_width_{0};  // the fleet's arc, on the wall clock
  // The second (its low 22 bits), the admissions heard in it and those heard before it: 22 + 21 + 21 bits.
  std::atomic<std::uint64_t> admitted_pending_{0};
  std::unique_ptr<AdaptiveSeries> adaptive_owned_;
  mutable std::mutex event_mu_;
  AdaptiveEvent event_;
  struct PendingAdvert {
    double seq = 0, left = 0, limit = 0;
    std::int64_t reset_at_us = 0, window_us = 0;
  };
  void admitted_after_refusal(std::int64_t sent_wall_us);
  std::atomic<bool> phase_waiting_{false};  // a lock-free look before the lock
  mutable std::mutex phase_mu_;
  limiter::WindowPhase phase_;
  std::atomic<bool> advert_pending_{false};  // a lock-free look before the lock
  std::mutex advert_mu_;
  std::optional<PendingAdvert> advert_;
  std::once_flag supplier_once_;
  std::unique_ptr<SupplierSeries> supplier_owned_;
  std::atomic<SupplierSeries*> supplier_{nullptr};
  mutable std::mutex class_mu_;
  std::map<std::string, std::unique_ptr<ClassSeries>, std::less<>> classes_;
};

// One policy of a rule (its bucket, its channel's, a quota "<bucket>#q<id>", its maxShare
// "<bucket>#maxShare"): how often its check passed or failed, and how often it bound a 429.
struct PolicyMetrics {
  prometheus::Counter* passed = nullptr;  // quotas only: a bucket is never checked on its own
  prometheus::Counter* failed = nullptr;
  prometheus::Counter* bound = nullptr;   // 429s it decided (the failed check furthest from passing)
};

struct UpstreamMetrics {
  void count(UpstreamError e) { errors[static_cast<std::size_t>(e)]->Increment(); }
  std::array<prometheus::Counter*, kUpstreamErrors> errors{};
  SecondsHistogram latency;  // request sent -> response header received
  prometheus::Counter* dns_failures = nullptr;  // resolutions that failed or came back empty
  prometheus::Counter* failovers = nullptr;     // requests sent to another endpoint after a connect failure
  prometheus::Gauge* unresolved = nullptr;      // 1 while the upstream has no address at all
  prometheus::Counter* warm_opened = nullptr;   // connections opened ahead of requests (min_idle_conns)
  prometheus::Counter* self_refused = nullptr;  // resolved addresses left out: the gateway's own listener
};

// An upstream's OAuth2 token refreshes (proxy/upstream_auth), by result, and its token's time to live.
struct AuthMetrics {
  static constexpr const char* kResults[] = {"ok", "rejected", "invalid", "failed"};
  std::array<prometheus::Counter*, 4> refresh{};  // by kResults
  prometheus::Gauge* ttl_seconds = nullptr;
  prometheus::Counter* unconfirmed_401 = nullptr;  // 401s passed to their caller, the token kept
};

// One endpoint's series: up (1 in use, 0 ejected) and how often it was ejected.
struct EndpointSeries {
  prometheus::Gauge* up = nullptr;
  prometheus::Counter* ejections = nullptr;
};

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Every family /metrics shows. Declared first: the series below live in it.
  prometheus::Registry registry;

  void count(Outcome o) { outcomes_[static_cast<std::size_t>(o)]->Increment(); }
  void count(UpstreamError e) { upstream_errors_[static_cast<std::size_t>(e)]->Increment(); }

  prometheus::Counter& bad_requests;         // answered 4xx by the gateway itself (400/404/408/413/431)
  prometheus::Gauge& held;                   // requests waiting on a timer right now
  prometheus::Gauge& connections;            // open client connections
  prometheus::Counter& connections_refused;  // over proxy.max_connections
  prometheus::Counter& connections_refused_per_client;  // over proxy.max_connections_per_client
  prometheus::Counter& refunds;              // reservations given back by departed clients
  prometheus::Counter& abandoned;            // held requests whose client left before the slot
  prometheus::Counter& store_degraded;       // decisions made by the local fallback (store down)
  // Pooled upstream connections closed instead of reused: bytes or a close arrived while idle
  // (an unsolicited response, a surplus body, an upstream keep-alive timeout) or past the idle limit.
  prometheus::Counter& upstream_conns_discarded;
  prometheus::Counter& upstream_retries;     // requests sent again after a reused connection failed
  prometheus::Counter& permits_returned;     // granted requests no endpoint could take: permits given back
  prometheus::Counter& access_log_dropped;   // access-log lines dropped: the writer's queue was full
  prometheus::Counter& loops_detected;       // requests whose Via named this gateway already: 508

  // Per-bucket, per-policy and per-upstream series, made on first use and kept (names come from
  // the rules and the config). A lookup takes a lock: callers keep the reference (RuleViews,
  // the route table), never look it up per request.
  BucketMetrics& bucket(std::string_view name);
  UpstreamMetrics& upstream(std::string_view name);
  // The series of an upstream with an oauth2 credential (made on first use, kept by name).
  AuthMetrics& auth(std::string_view upstream);
  // An endpoint's series (made on first use); remove_endpoint drops its `up` gauge when the
  // address leaves the upstream's set (its ejection count stays). Counted: when a reloaded table
  // holds the same endpoint in a new set, the gauge goes only when the last holder lets go.
  EndpointSeries endpoint(std::string_view upstream, std::string_view endpoint);
  void remove_endpoint(const EndpointSeries& s);
  // `quota`: the policy is checked on its own, so it has pass/fail series too.
  PolicyMetrics& policy(std::string_view rule, std::string_view policy, bool quota);

  // Readers' walks over the series made so far (the console's history and overview), under the
  // same lock as the lookups; `fn` must not call back into Metrics.
  void each_upstream(const std::function<void(const std::string&, const UpstreamMetrics&)>& fn);
  void each_policy(const std::function<void(std::string_view rule, std::string_view policy, const PolicyMetrics&)>& fn);

  // Prometheus text exposition of the whole registry: the one renderer of /metrics.
  std::string render() const;

 private:
  std::array<prometheus::Counter*, kOutcomes> outcomes_{};
  std::array<prometheus::Counter*, kUpstreamErrors> upstream_errors_{};

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<BucketMetrics>, std::less<>> buckets_;
  std::map<std::string, std::unique_ptr<UpstreamMetrics>, std::less<>> upstreams_;
  std::map<std::string, std::unique_ptr<AuthMetrics>, std::less<>> auth_;
  std::map<const prometheus::Gauge*, int> endpoint_holders_;  // endpoint() calls not yet removed
  std::map<std::string, std::unique_ptr<PolicyMetrics>, std::less<>> policies_;
};

}  // namespace tollgate::proxy

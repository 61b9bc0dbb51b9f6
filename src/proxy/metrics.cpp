#include "tollgate/proxy/metrics.hpp"

#include "tollgate/limiter/clock.hpp"

#include <algorithm>
#include <chrono>

#include <prometheus/text_serializer.h>

namespace tollgate::proxy {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::forwarded: return "forwarded";
    case Outcome::delayed: return "delayed";
    case Outcome::rejected: return "rejected";
    case Outcome::bypassed: return "bypassed";
    case Outcome::unmatched: return "unmatched";
    case Outcome::store_error: return "store_error";
    case Outcome::shadow_rejected: return "shadow_rejected";
    case Outcome::count_: break;
  }
  return "unknown";
}

const char* upstream_error_name(UpstreamError e) {
  switch (e) {
    case UpstreamError::connect: return "connect";
    case UpstreamError::reset: return "reset";
    case UpstreamError::timeout: return "timeout";
    case UpstreamError::unresolved: return "unresolved";
    case UpstreamError::deadline: return "deadline";
    case UpstreamError::auth: return "auth";
    case UpstreamError::count_: break;
  }
  return "unknown";
}

const prometheus::Histogram::BucketBoundaries& seconds_bounds() {
  static const prometheus::Histogram::BucketBoundaries bounds{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                              0.5,   1,     2.5,  5,     10,  30,  60};
  return bounds;
}

namespace {
// The families, by name. Registering a name again returns the family already there (Merge), so
// each helper is also the lookup.
prometheus::Family<prometheus::Counter>& counters(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Gauge>& gauges(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Histogram>& histograms(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

prometheus::Family<prometheus::Counter>& bucket_requests(prometheus::Registry& r) {
  return counters(r, "tollgate_bucket_requests_total", "Requests by bucket and outcome.");
}
prometheus::Family<prometheus::Counter>& policy_checks(prometheus::Registry& r) {
  return counters(r, "tollgate_policy_checks_total", "Quota checks by rule, policy and result.");
}
prometheus::Family<prometheus::Counter>& policy_rejections(prometheus::Registry& r) {
  return counters(r, "tollgate_policy_rejections_total", "429s by the rule and policy that bound them.");
}
}  // namespace

BucketMetrics::BucketMetrics(prometheus::Registry& r, std::string name)
    : held(gauges(r, "tollgate_bucket_held_requests", "Requests waiting on a bucket right now.")
               .Add({{"bucket", name}})),
      cap_rejections(counters(r, "tollgate_bucket_cap_rejections_total",
                              "429s because a hold cap (global or per bucket) was reached.")
                         .Add({{"bucket", name}})),
      wait(histograms(r, "tollgate_bucket_wait_seconds", "Time requests were held before being forwarded.")
               .Add({{"bucket", name}}, seconds_bounds())),
      registry_(r),
      requests_(bucket_requests(r)),
      name_(std::move(name)) {}

prometheus::Counter& BucketMetrics::upstream_throttled() {
  std::call_once(throttled_once_, [this] {
    throttled_.store(&counters(registry_, "tollgate_upstream_throttled_total",
                               "Throttle signals from the upstream (429; 503 with Retry-After or RateLimit; "
                               "RateLimit r=0) by bucket.")
                          .Add({{"bucket", name_}}),
                     std::memory_order_release);
  });
  return *throttled_.load(std::memory_order_acquire);
}

double BucketMetrics::upstream_throttled_total() const {
  const prometheus::Counter* c = throttled_.load(std::memory_order_acquire);
  return c ? c->Value() : 0.0;
}

AdaptiveSeries& BucketMetrics::adaptive() {
  std::call_once(adaptive_once_, [this] {
    const prometheus::Labels l{{"bucket", name_}};
    adaptive_owned_.reset(new AdaptiveSeries{
        gauges(registry_, "tollgate_bucket_effective_rate",
               "Adaptive buckets: the rate decided at now, min(rateLimit, adapted) (permits/s).")
            .Add(l),
        counters(registry_, "tollgate_adaptive_cuts_total", "Adaptive buckets: throttle episodes that cut the rate.")
            .Add(l),
        counters(registry_, "tollgate_adaptive_pauses_total",
                 "Adaptive buckets: throttle episodes that paused the bucket (Retry-After, RateLimit t).")
            .Add(l),
        counters(registry_, "tollgate_adaptive_paused_rejections_total",
                 "Adaptive buckets: held requests whose slot a cut voided (and its pause, if any), answered 429 "
                 "when they woke and asked again.")
            .Add(l),
        counters(registry_, "tollgate_adaptive_unconfirmed_total",
                 "Adaptive buckets: upstream throttles that cut nothing, one caller's own among other callers' "
                 "successes (no evidence that the interface is throttled).")
            .Add(l)});
    adaptive_.store(adaptive_owned_.get(), std::memory_order_release);
  });
  return *adaptive_.load(std::memory_order_acquire);
}

SupplierSeries& BucketMetrics::supplier() {
  std::call_once(supplier_once_, [this] {
    const prometheus::Labels l{{"bucket", name_}};
    supplier_owned_.reset(new SupplierSeries{
        gauges(registry_, "tollgate_supplier_remaining",
               "Adaptive buckets: what the supplier's rate-limit fields last said is left of its window.")
            .Add(l),
        gauges(registry_, "tollgate_supplier_limit",
               "Adaptive buckets: the supplier's advertised allowance per window (0: it did not say).")
            .Add(l),
        counters(registry_, "tollgate_supplier_fields_ignored_total",
                 "Adaptive buckets: answers whose rate-limit fields were malformed or absurd, and ignored.")
            .Add(l)});
    supplier_.store(supplier_owned_.get(), std::memory_order_release);
  });
  return *supplier_.load(std::memory_order_acquire);
}

void BucketMetrics::note_advert(double seq, double left, std::int64_t reset_at_us, double limit,
                                std::int64_t window_us) {
  std::lock_guard lock(advert_mu_);
  if (advert_ && (seq < advert_->seq || (seq == advert_->seq && left >= advert_->left))) return;
  advert_ = PendingAdvert{seq, left, limit, reset_at_us, window_us};
  advert_pending_.store(true, std::memory_order_release);
}

void BucketMetrics::forget_adaptive() {
  {
    std::lock_guard lock(advert_mu_);
    advert_.reset();
    advert_pending_.store(false, std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(phase_mu_);
    phase_ = limiter::WindowPhase{};
    phase_waiting_.store(false, std::memory_order_relaxed);
    window_start_us_.store(0, std::memory_order_relaxed);
    pair_pending_.store(false, std::memory_order_relaxed);
    adopted_start_.store(-1, std::memory_order_relaxed);
    adopted_width_.store(0, std::memory_order_relaxed);
  }
  pause_until_us.store(0, std::memory_order_relaxed);
  last_cut_us.store(0, std::memory_order_relaxed);
}

void BucketMetrics::note_refused_sent(std::int64_t sent_wall_us) {
  std::lock_guard lock(phase_mu_);
  const bool taught = phase_.note_refused(sent_wall_us);
  phase_waiting_.store(true, std::memory_order_relaxed);
  if (taught) {
    pair_pending_.store(true, std::memory_order_relaxed);
    window_start_us_.store(window_start(phase_), std::memory_order_relaxed);
  }
}

void BucketMetrics::admitted_after_refusal(std::int64_t sent_wall_us) {
  std::lock_guard lock(phase_mu_);
  if (phase_.note_admitted(sent_wall_us)) pair_pending_.store(true, std::memory_order_relaxed);
  phase_waiting_.store(phase_.waiting(), std::memory_order_relaxed);
  window_start_us_.store(window_start(phase_), std::memory_order_relaxed);
}

std::int64_t BucketMetrics::until_window_us(std::int64_t sent_wall_us, std::int64_t now_wall_us) const {
  std::lock_guard lock(phase_mu_);
  // As if the refusal were noted (it is once the store believed it): a refusal soon after the last
  // one narrows where the next window starts before the pause is set.
  limiter::WindowPhase w = phase_;
  w.note_refused(sent_wall_us);
  return std::max<std::int64_t>(0, w.next_after(sent_wall_us) - now_wall_us);
}

limiter::WindowPhase::Arc BucketMetrics::take_window_pair() {
  if (!pair_pending_.load(std::memory_order_relaxed)) return {};
  std::lock_guard lock(phase_mu_);
  pair_pending_.store(false, std::memory_order_relaxed);
  const limiter::WindowPhase::Arc pair = phase_.take_pair();
  return pair.width > 0 ? limiter::WindowPhase::relative(pair, limiter::wall_now_us()) : pair;
}

void BucketMetrics::adopt_windows(limiter::WindowPhase::Arc fleet) {
  using limiter::WindowPhase;
  if (fleet.width <= 0 || fleet.width >= WindowPhase::kWindowUs) return;  // none, or not an arc
  const WindowPhase::Arc arc = WindowPhase::absolute(fleet, limiter::wall_now_us());
  // The same arc as adopted before (told relative to a now a moment off: within 2 ms): nothing new.
  const std::int64_t drift = WindowPhase::within_second(arc.start - adopted_start_.load(std::memory_order_relaxed) + 2'000);
  if (arc.width == adopted_width_.load(std::memory_order_relaxed) && drift <= 4'000) return;
  std::lock_guard lock(phase_mu_);
  adopted_start_.store(arc.start, std::memory_order_relaxed);
  adopted_width_.store(arc.width, std::memory_order_relaxed);
  phase_.adopt(arc);
  window_start_us_.store(window_start(phase_), std::memory_order_relaxed);
}

std::int64_t BucketMetrics::window_phase_us() const {
  std::lock_guard lock(phase_mu_);
  return phase_.learned() ? phase_.phase() : -1;
}

std::optional<limiter::AdvertReport> BucketMetrics::take_advert() {
  if (!advert_pending_.load(std::memory_order_acquire)) return std::nullopt;
  const std::int64_t now_us = limiter::steady_now_us();
  std::lock_guard lock(advert_mu_);
  advert_pending_.store(false, std::memory_order_relaxed);
  if (!advert_) return std::nullopt;
  const PendingAdvert a = *advert_;
  advert_.reset();
  return limiter::AdvertReport{a.seq, a.left, std::max<std::int64_t>(0, a.reset_at_us - now_us), a.limit, a.window_us};
}

namespace {
// admitted_pending_'s fields: the wall second's low 22 bits, the admissions heard in it and those
// heard before it (21 bits each, saturating).
constexpr std::uint64_t kCountBits = 21, kCountMask = (std::uint64_t{1} << kCountBits) - 1;
constexpr std::uint64_t kSecondMask = (std::uint64_t{1} << 22) - 1;
struct Pending {
  std::uint64_t sec, cur, before;
};
Pending unpack(std::uint64_t v) { return {v >> (2 * kCountBits), (v >> kCountBits) & kCountMask, v & kCountMask}; }
std::uint64_t pack(std::uint64_t sec, std::uint64_t cur, std::uint64_t before) {
  return (sec & kSecondMask) << (2 * kCountBits) | std::min(cur, kCountMask) << kCountBits | std::min(before, kCountMask);
}
// `p` as of second `sec`: what was heard in another second is earlier.
Pending at_second(Pending p, std::uint64_t sec) {
  if (p.sec != (sec & kSecondMask)) return {sec & kSecondMask, 0, p.before + p.cur};
  return p;
}
}  // namespace

// Where the windows start, as a move of the wall clock's seconds by less than half a second either
// way (the store's seconds are moved so too: limiter's second_shift), so that a second keeps its
// number when the windows are learned.
std::int64_t BucketMetrics::window_start(const limiter::WindowPhase& w) {
  return w.learned() ? limiter::WindowPhase::nearest(w.phase()) : 0;
}

std::uint64_t BucketMetrics::window_second() const {
  const std::int64_t t = limiter::wall_now_us() - window_start_us_.load(std::memory_order_relaxed);
  return static_cast<std::uint64_t>(t / 1'000'000);
}

void BucketMetrics::note_admitted_at(std::uint64_t sec) {
  std::uint64_t old = admitted_pending_.load(std::memory_order_relaxed);
  for (;;) {
    const Pending p = at_second(unpack(old), sec);
    if (admitted_pending_.compare_exchange_weak(old, pack(sec, p.cur + 1, p.before), std::memory_order_relaxed)) return;
  }
}

BucketMetrics::Admitted BucketMetrics::take_admitted_at(std::uint64_t sec) {
  Admitted out;
  if (const Pending p = unpack(admitted_pending_.load(std::memory_order_relaxed)); p.cur + p.before == 0)
    return out;  // nothing heard: no write
  const Pending p = at_second(unpack(admitted_pending_.exchange(pack(sec, 0, 0), std::memory_order_relaxed)), sec);
  out.total = static_cast<double>(p.cur + p.before);
  out.before = static_cast<double>(p.before);
  return out;
}

void BucketMetrics::give_back_admitted(Admitted a) { give_back_admitted_at(a, window_second()); }

void BucketMetrics::give_back_admitted_at(Admitted a, std::uint64_t sec) {
  if (!(a.total > 0)) return;
  const std::uint64_t total = static_cast<std::uint64_t>(a.total), before = static_cast<std::uint64_t>(a.before);
  std::uint64_t old = admitted_pending_.load(std::memory_order_relaxed);
  for (;;) {
    // Those of this second go back to it, while it lasts; the others, and all of them once another
    // second began, are earlier ones.
    const Pending was = unpack(old);
    const Pending p = at_second(was, sec);
    const bool same = was.sec == p.sec;
    const std::uint64_t cur = p.cur + (same ? total - before : 0), earlier = p.before + (same ? before : total);
    if (admitted_pending_.compare_exchange_weak(old, pack(sec, cur, earlier), std::memory_order_relaxed)) return;
  }
}

void BucketMetrics::note_event(AdaptiveEvent e) {
  std::lock_guard lock(event_mu_);
  event_ = std::move(e);
}

AdaptiveEvent BucketMetrics::last_event() const {
  std::lock_guard lock(event_mu_);
  return event_;
}

const ClassSeries& BucketMetrics::priority_class(std::string_view name) {
  std::lock_guard lock(class_mu_);
  auto it = classes_.find(name);
  if (it != classes_.end()) return *it->second;
  auto& family = counters(registry_, "tollgate_priority_requests_total",
                          "Requests of a bucket's priority classes, by bucket, class and outcome.");
  auto series = std::make_unique<ClassSeries>();
  for (const Outcome o : {Outcome::forwarded, Outcome::delayed, Outcome::rejected, Outcome::shadow_rejected,
                          Outcome::store_error})
    series->outcomes[static_cast<std::size_t>(o)] =
        &family.Add({{"bucket", name_}, {"class", std::string(name)}, {"outcome", outcome_name(o)}});
  return *classes_.emplace(std::string(name), std::move(series)).first->second;
}

void BucketMetrics::each_class(const std::function<void(const std::string&, const ClassSeries&)>& fn) const {
  std::lock_guard lock(class_mu_);
  for (const auto& [name, series] : classes_) fn(name, *series);
}

prometheus::Counter& BucketMetrics::first_color(limiter::Color c) {
  prometheus::Counter& x = counters(registry_, "tollgate_meter_requests_total",
                                    "Requests of a three-colour meter (algorithm srtcm or trtcm), by bucket and colour.")
                               .Add({{"bucket", name_}, {"color", std::string(limiter::color_name(c))}});
  colors_[static_cast<std::size_t>(c)].store(&x, std::memory_order_release);
  return x;
}

prometheus::Counter& BucketMetrics::first_count(Outcome o) {
  // Family::Add returns the series already there for the same labels: workers racing here get
  // the same one.
  prometheus::Counter& c = requests_.Add({{"bucket", name_}, {"outcome", outcome_name(o)}});
  outcomes_[static_cast<std::size_t>(o)].store(&c, std::memory_order_release);
  return c;
}

Metrics::Metrics()
    : bad_requests(counters(registry, "tollgate_bad_requests_total",
                            "Requests the gateway answered itself with a 4xx.")
                       .Add({})),
      held(gauges(registry, "tollgate_held_requests", "Requests waiting for their permit right now.").Add({})),
      connections(gauges(registry, "tollgate_connections", "Open client connections.").Add({})),
      connections_refused(counters(registry, "tollgate_connections_refused_total",
                                   "Connections closed at once because proxy.max_connections were open.")
                              .Add({})),
      connections_refused_per_client(
          counters(registry, "tollgate_connections_refused_per_client_total",
                   "Connections closed at once because their address held proxy.max_connections_per_client.")
              .Add({})),
      refunds(counters(registry, "tollgate_refunds_total",
                       "Reservations given back because the client left before its slot.")
                  .Add({})),
      abandoned(counters(registry, "tollgate_abandoned_total",
                         "Held requests whose client left before their slot (never forwarded).")
                    .Add({})),
      store_degraded(counters(registry, "tollgate_store_degraded_total",
                              "Decisions made by the local fallback while the shared store was down.")
                         .Add({})),
      upstream_conns_discarded(counters(registry, "tollgate_upstream_conns_discarded_total",
                                        "Idle pooled upstream connections closed instead of reused "
                                        "(data or a close arrived while idle, or idle too long).")
                                   .Add({})),
      upstream_retries(counters(registry, "tollgate_upstream_retries_total",
                                "Requests sent again on a fresh connection after a reused one failed "
                                "before any response byte (idempotent methods, or nothing written).")
                           .Add({})),
      permits_returned(counters(registry, "tollgate_permits_returned_total",
                                "Granted requests that no upstream endpoint could take (nothing sent): their "
                                "permits given back to their buckets (up to the burst).")
                           .Add({})),
      access_log_dropped(counters(registry, "tollgate_access_log_dropped_total",
                                  "Access-log lines dropped because the writer's queue was full (a slow disk or "
                                  "a full stdout pipe).")
                             .Add({})),
      loops_detected(counters(registry, "tollgate_loops_detected_total",
                              "Requests answered 508 loop_detected: their Via already named this gateway "
                              "(proxy.via_pseudonym), so they came round a forwarding loop.")
                         .Add({})) {
  auto& requests = counters(registry, "tollgate_requests_total", "Requests by throttling outcome.");
  for (std::size_t i = 0; i < kOutcomes; ++i)
    outcomes_[i] = &requests.Add({{"outcome", outcome_name(static_cast<Outcome>(i))}});
  auto& errors = counters(registry, "tollgate_upstream_errors_total", "Upstream failures by kind.");
  for (std::size_t i = 0; i < kUpstreamErrors; ++i)
    upstream_errors_[i] = &errors.Add({{"kind", upstream_error_name(static_cast<UpstreamError>(i))}});
}

BucketMetrics& Metrics::bucket(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = buckets_.find(name);
  if (it == buckets_.end())
    it = buckets_.emplace(std::string(name), std::make_unique<BucketMetrics>(registry, std::string(name))).first;
  return *it->second;
}

AuthMetrics& Metrics::auth(std::string_view upstream) {
  std::lock_guard lock(mu_);
  auto it = auth_.find(upstream);
  if (it == auth_.end()) {
    const std::string n(upstream);
    auto a = std::make_unique<AuthMetrics>();
    auto& refresh = counters(registry, "tollgate_upstream_auth_refresh_total",
                             "OAuth2 token requests by upstream and result: ok, rejected (the token endpoint answered "
                             "an error), invalid (no usable token in its answer), failed (not reached, or no whole answer).");
    for (std::size_t i = 0; i < a->refresh.size(); ++i)
      a->refresh[i] = &refresh.Add({{"upstream", n}, {"result", AuthMetrics::kResults[i]}});
    a->ttl_seconds = &gauges(registry, "tollgate_upstream_auth_token_ttl_seconds",
                             "Seconds until the upstream's current OAuth2 token expires (0: none held).")
                          .Add({{"upstream", n}});
    a->unconfirmed_401 = &counters(registry, "tollgate_upstream_auth_unconfirmed_401_total",
                                   "The supplier's 401s to an OAuth2 token passed to their caller with the token kept: "
                                   "one caller's own among other callers' successes.")
                              .Add({{"upstream", n}});
    it = auth_.emplace(n, std::move(a)).first;
  }
  return *it->second;
}

UpstreamMetrics& Metrics::upstream(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = upstreams_.find(name);
  if (it == upstreams_.end()) {
    const std::string n(name);
    auto& latency = histograms(registry, "tollgate_upstream_response_seconds",
                               "Request sent to response header received, by upstream.")
                        .Add({{"upstream", n}}, seconds_bounds());
    auto u = std::make_unique<UpstreamMetrics>(UpstreamMetrics{{}, SecondsHistogram(latency)});
    auto& failures = counters(registry, "tollgate_upstream_failures_total", "Upstream failures by upstream and kind.");
    for (std::size_t i = 0; i < kUpstreamErrors; ++i)
      u->errors[i] = &failures.Add({{"upstream", n}, {"kind", upstream_error_name(static_cast<UpstreamError>(i))}});
    u->dns_failures = &counters(registry, "tollgate_upstream_dns_failures_total",
                                "Resolutions of an upstream's names that failed or came back empty (the last good set was kept).")
                           .Add({{"upstream", n}});
    u->failovers = &counters(registry, "tollgate_upstream_failovers_total",
                             "Requests sent to another endpoint after a connect or TLS handshake failure, on the same permit.")
                        .Add({{"upstream", n}});
    u->warm_opened = &counters(registry, "tollgate_upstream_warm_connections_opened_total",
                               "Connections opened (and handshaken) ahead of requests to keep min_idle_conns per worker.")
                          .Add({{"upstream", n}});
    u->self_refused = &counters(registry, "tollgate_upstream_self_endpoints_refused_total",
                                "Resolved addresses of an upstream left out of its endpoints because they are the "
                                "gateway's own proxy listener (a request sent there would come back to it).")
                           .Add({{"upstream", n}});
    u->unresolved = &gauges(registry, "tollgate_upstream_unresolved",
                            "1 while the upstream has no address (its names do not resolve yet): its requests get 503.")
                         .Add({{"upstream", n}});
    it = upstreams_.emplace(n, std::move(u)).first;
  }
  return *it->second;
}

namespace {
constexpr const char* kEndpointUpHelp = "1 while an upstream's endpoint takes requests, 0 while it is ejected.";
constexpr const char* kEjectionsHelp = "Ejections of an endpoint after consecutive failures.";
}

EndpointSeries Metrics::endpoint(std::string_view upstream, std::string_view endpoint) {
  std::lock_guard lock(mu_);
  const std::map<std::string, std::string> labels{{"upstream", std::string(upstream)}, {"endpoint", std::string(endpoint)}};
  EndpointSeries s;
  s.up = &gauges(registry, "tollgate_upstream_endpoint_up", kEndpointUpHelp).Add(labels);
  s.ejections = &counters(registry, "tollgate_upstream_ejections_total", kEjectionsHelp).Add(labels);
  ++endpoint_holders_[s.up];
  return s;
}

void Metrics::remove_endpoint(const EndpointSeries& s) {
  std::lock_guard lock(mu_);
  if (!s.up) return;
  auto it = endpoint_holders_.find(s.up);
  if (it != endpoint_holders_.end() && --it->second > 0) return;
  if (it != endpoint_holders_.end()) endpoint_holders_.erase(it);
  // Both series go with the endpoint: a name whose answers keep changing leaves no series behind
  // for each address it ever gave (/metrics stays bounded whatever DNS says).
  gauges(registry, "tollgate_upstream_endpoint_up", kEndpointUpHelp).Remove(s.up);
  if (s.ejections)
    counters(registry, "tollgate_upstream_ejections_total", kEjectionsHelp).Remove(s.ejections);
}

PolicyMetrics& Metrics::policy(std::string_view rule, std::string_view policy, bool quota) {
  // Keyed "<rule>\x1f<policy>": neither a bucket name nor a policy name holds a control character.
  std::string key;
  key.reserve(rule.size() + 1 + policy.size());
  key.append(rule).append(1, '\x1f').append(policy);
  std::lock_guard lock(mu_);
  auto& p = policies_[key];
  if (!p) {
    p = std::make_unique<PolicyMetrics>();
    p->bound = &policy_rejections(registry).Add({{"rule", std::string(rule)}, {"policy", std::string(policy)}});
  }
  if (quota && p->passed == nullptr) {
    auto& checks = policy_checks(registry);
    p->passed = &checks.Add({{"rule", std::string(rule)}, {"policy", std::string(policy)}, {"result", "passed"}});
    p->failed = &checks.Add({{"rule", std::string(rule)}, {"policy", std::string(policy)}, {"result", "failed"}});
  }
  return *p;
}

void Metrics::each_upstream(const std::function<void(const std::string&, const UpstreamMetrics&)>& fn) {
  std::lock_guard lock(mu_);
  for (const auto& [name, u] : upstreams_) fn(name, *u);
}

void Metrics::each_policy(
    const std::function<void(std::string_view rule, std::string_view policy, const PolicyMetrics&)>& fn) {
  std::lock_guard lock(mu_);
  for (const auto& [key, p] : policies_) {
    const auto sep = key.find('\x1f');
    fn(std::string_view(key).substr(0, sep), std::string_view(key).substr(sep + 1), *p);
  }
}

std::string Metrics::render() const { return prometheus::TextSerializer().Serialize(registry.Collect()); }

}  // namespace tollgate::proxy

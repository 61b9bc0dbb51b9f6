#include "tollgate/proxy/request_policy.hpp"

#include "tollgate/config/rule.hpp"
#include "tollgate/store/key_schema.hpp"
#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {

namespace {

using Kind = config::KeySpec::Kind;

// The client key a spec derives, into `key`; the client's address is resolved once, on first need.
// Returns the reason when the request cannot be keyed.
class KeyDeriver {
 public:
  // `fold_case`: the rule matches any case of its path, so a path in a key is lower-cased too
  // (/SEARCH and /search are one interface, and so one client's key on it).
  KeyDeriver(const RequestFacts& facts, const PolicySettings& settings, bool fold_case)
      : facts_(facts), settings_(settings), fold_case_(fold_case) {}

  std::optional<std::string> derive(const config::KeySpec& spec, std::string& key) {
    if ((spec.kind == Kind::client_ip || spec.kind == Kind::client_ip_path) && !address_) {
      const TrustedProxies& trusted = *settings_.trusted;
      const std::string xff = trusted.empty() ? std::string() : facts_.headers.joined("X-Forwarded-For");
      address_ = client_address(facts_.peer, xff, trusted);
    }
    std::optional<std::string_view> header;
    if (spec.kind == Kind::header) header = facts_.headers.find(spec.header);
    std::string_view path = facts_.match_path;
    if (fold_case_ && spec.kind == Kind::client_ip_path) {
      if (!folded_) {
        folded_.emplace(path);
        for (char& c : *folded_)
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      path = *folded_;
    }
    switch (client_key(spec, address_ ? std::string_view(*address_) : std::string_view(), path, header,
                       settings_.missing_key, key)) {
      case KeyResult::ok: return std::nullopt;
      case KeyResult::missing: return "header " + spec.header + " is required (it keys a rate limit)";
      case KeyResult::too_long:
        return "header " + spec.header + " is longer than " + std::to_string(kMaxHeaderKey) + " bytes";
    }
    return std::nullopt;
  }

 private:
  const RequestFacts& facts_;
  const PolicySettings& settings_;
  const bool fold_case_;
  std::optional<std::string> address_;
  std::optional<std::string> folded_;  // the path lower-cased, on first need
};

bool needs_client_key(const config::Rule& rule, const config::Rule* channel) {
  return !rule.quotas.empty() || rule.key_by.kind != Kind::none || rule.max_share ||
         (channel && !channel->quotas.empty());
}

// Per-client parts of a request's checks: keyed bucket, quotas, maxShare.
std::optional<std::string> add_client_checks(const RequestFacts& facts, const PolicySettings& settings, Plan& plan) {
  const config::Rule& rule = *plan.rule;
  KeyDeriver keys(facts, settings, rule.match_case == config::MatchCase::insensitive);
  std::string key;
  if (rule.has_bucket && rule.key_by.kind != Kind::none) {
    if (auto bad = keys.derive(rule.key_by, key)) return bad;
    plan.keyed_bucket = store::keyed_bucket_name(rule.config_id, key);
    plan.request.bucket.name = plan.keyed_bucket;
    plan.request.per_client_bucket = true;
  }
  for (const config::Rule* r : {&rule, plan.channel}) {
    if (r == nullptr) continue;
    for (const config::Quota& q : r->quotas) {
      if (auto bad = keys.derive(q.key_by, key)) return bad;
      plan.request.quotas.push_back({store::quota_key(q.quota_id, key), q.params(), q.key_by.kind == Kind::none});
    }
  }
  if (rule.has_bucket && rule.max_share) {
    if (auto bad = keys.derive(rule.share_key, key)) return bad;
    plan.request.share = store::ShareRef{store::share_key(rule.config_id, key), rule.max_held_per_client};
  }
  return std::nullopt;
}

std::string millis_up(std::int64_t us) { return std::to_string((us + 999) / 1000); }

}  // namespace

std::size_t priority_class_of(const config::Priority& p, const RequestFacts& facts, const PolicySettings& settings) {
  if (p.by == config::Priority::By::method) return p.class_of(facts.method);
  // A caller may not promote itself: the header counts only from a trusted proxy.
  if (settings.trusted == nullptr || !settings.trusted->contains(facts.peer)) return p.default_class;
  const std::optional<std::string_view> v = facts.headers.find(p.header);
  if (!v) return p.default_class;
  std::string_view t = *v;
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  return p.class_of(t);
}

namespace {
// The rule's priority class (and its channel's) and its meter, into the request.
void add_classes_and_meter(const RequestFacts& facts, const config::Rule& rule, const PolicySettings& settings,
                           Plan& out) {
  store::AcquireRequest& req = out.request;
  if (rule.priority) {
    out.priority = &*rule.priority;
    out.priority_class = priority_class_of(*rule.priority, facts, settings);
    req.reserve_share = rule.priority->keep[out.priority_class];
  }
  if (rule.meter) {
    // Colour-aware with classes: the highest class is pre-coloured green, the others yellow.
    const config::Meter& m = *rule.meter;
    req.meter = store::MeterRef{rule.bucket, m.two_rate, m.sr, m.tr,
                                out.priority && out.priority_class > 0 ? limiter::Color::yellow : limiter::Color::green,
                                m.wait_green};
    req.reserve_share = 0;
  }
  if (req.parent && out.channel->priority) {
    const std::size_t c = priority_class_of(*out.channel->priority, facts, settings);
    req.parent_reserve_share = out.channel->priority->keep[c];
    if (!out.priority) {
      out.priority = &*out.channel->priority;
      out.priority_class = c;
    }
  }
}

// The wait a request with a time budget may be given: what its budget leaves once the upstream has
// answered (its p90). False: too late even for that (and not the probe that measures it again).
bool fit_budget(const RequestFacts& facts, const config::Rule& rule, const RuleViews& rules,
                const PolicySettings& settings, Plan& out) {
  store::AcquireRequest& req = out.request;
  LatencyEstimate& estimate = rules.metrics_of(rule).upstream_latency;
  const std::optional<std::int64_t> measured = estimate.p90_us(facts.now_us);
  out.latency_us = measured.value_or(settings.default_latency_us);
  const std::int64_t room = facts.budget->us - out.latency_us;
  if (room < 0 && !(measured && estimate.take_probe(facts.now_us))) return false;
  if (room < 0) {
    // A probe: the measured p90 says it cannot make it, but only answers can say whether that is
    // still true. It takes an immediate permit or none, and its deadline stays its own.
    req.timeout_us = 0;
    out.deadline_bound = true;
    out.probe = true;
  } else if (room < req.timeout_us) {
    req.timeout_us = room;
    out.deadline_bound = true;
  }
  return true;
}

// What an adaptive bucket's decision takes along: this gateway's count of the supplier's
// admissions, its advertised allowance, the window pair, and who asked.
void add_adaptive_evidence(const RequestFacts& facts, const config::Rule& rule, const RuleViews& rules,
                           const PolicySettings& settings, store::AcquireRequest& req) {
  const BucketMetrics::Admitted heard = rules.metrics_of(rule).take_admitted();
  req.admitted = heard.total;
  req.admitted_before = heard.before;
  req.advert = rules.metrics_of(rule).take_advert();
  req.window_pair = rules.metrics_of(rule).take_window_pair();
  // Who asked: a throttle cuts the shared rate only when it is not one caller's alone.
  if (settings.trusted && !settings.trusted->empty())
    req.caller = limiter::caller_id(client_address(facts.peer, facts.headers.joined("X-Forwarded-For"), *settings.trusted));
  else
    req.caller = limiter::caller_id(facts.peer);
}
}  // namespace

void plan_request(const RequestFacts& facts, const RuleViews* rules, config::SwitchMode global,
                  const PolicySettings& settings, Plan& out) {
  if (global == config::SwitchMode::off) {
    out.step = Step::bypass;
    out.outcome = Outcome::bypassed;
    return;
  }
  const config::Snapshot* snapshot = rules ? &rules->snapshot() : nullptr;
  out.rule = snapshot ? snapshot->match(facts.match_path) : nullptr;
  if (out.rule == nullptr) {
    out.step = Step::unmatched;
    out.outcome = Outcome::unmatched;
    return;
  }
  const config::Rule& rule = *out.rule;
  out.view = &rules->of(rule);
  if ((global == config::SwitchMode::shadow ? global : rule.mode) == config::SwitchMode::off) {
    out.step = Step::bypass;  // this rule is switched off by itself
    out.outcome = Outcome::bypassed;
    return;
  }
  out.shadow = global == config::SwitchMode::shadow || rule.mode == config::SwitchMode::shadow;
  out.channel = snapshot->channel_of(rule);
  // Too many requests already wait (globally or on this bucket): only an immediate permit will
  // do, so nothing is reserved for a request that could not be held.
  out.capped = facts.held >= static_cast<std::int64_t>(settings.max_held) ||
               rules->metrics_of(rule).held.Value() >= static_cast<double>(settings.max_held_per_bucket);
  store::AcquireRequest& req = out.request;
  req.bucket = {rule.bucket, rule.params};
  if (out.channel && out.channel->has_bucket) req.parent = store::BucketRef{out.channel->bucket, out.channel->params};
  req.hash_tag = out.channel ? std::string_view(out.channel->channel_type) : std::string_view(rule.bucket);
  req.permits = rule.cost;
  req.parent_permits = rule.channel_cost;
  add_classes_and_meter(facts, rule, settings, out);
  req.timeout_us = out.capped ? 0 : rule.timeout_us();
  req.use_bucket = rule.has_bucket;
  req.adaptive = rule.has_bucket ? rule.adaptive : limiter::Adaptive::off;
  if (facts.budget && settings.deadlines && !out.shadow && !fit_budget(facts, rule, *rules, settings, out)) {
    out.step = Step::too_late;
    out.outcome = Outcome::rejected;
    return;
  }
  if (needs_client_key(rule, out.channel)) {
    if (auto bad = add_client_checks(facts, settings, out)) {
      out.step = Step::bad_key;
      out.detail = std::move(*bad);
      return;
    }
  }
  if (!req.use_bucket && !req.parent && req.quotas.empty() && !req.meter) {
    out.step = Step::forward;  // a quota-only rule whose quotas are all disabled: nothing to decide
    out.outcome = Outcome::forwarded;
    return;
  }
  if (req.adaptive != limiter::Adaptive::off) {
    // Only a request the store decides takes this gateway's count of the supplier's admissions
    // along (a plan that ends before the store would lose it).
    add_adaptive_evidence(facts, rule, *rules, settings, req);
  }
  out.step = Step::decide;
}

Verdict too_late_verdict(const Plan& plan, const Budget& budget) {
  Verdict v;
  v.action = Action::reject;
  v.outcome = Outcome::rejected;
  v.retry_after_s = 1;
  v.bound = "deadline";
  v.body = deadline_body(*plan.rule, budget.us, plan.latency_us);
  return v;
}

Verdict verdict_for(const Plan& plan, const store::StoreDecision& sd) {
  Verdict v;
  const config::Rule& rule = *plan.rule;
  const config::Rule* channel = plan.channel;
  if (sd.status == store::StoreStatus::unavailable_open || sd.status == store::StoreStatus::unavailable ||
      (plan.shadow && sd.status == store::StoreStatus::unavailable_closed)) {
    v.outcome = Outcome::store_error;  // policy fail_open (or shadow mode): forward unlimited
    return v;
  }
  if (sd.status == store::StoreStatus::unavailable_closed) {
    v.action = Action::unavailable;  // policy fail_closed: refuse
    v.outcome = Outcome::store_error;
    v.retry_after_s = 1;
    v.body = problem_body(503, "The rate limiter cannot decide: its shared store is unavailable", "limiter_unavailable",
                          "the shared rate-limit store is unavailable and the policy is fail_closed", kReducedCapacity);
    return v;
  }
  const limiter::Decision& d = sd.decision;
  if (plan.shadow) {
    // Decided and counted, never enforced: the upstream is told what would have happened.
    if (!d.granted) {
      v.outcome = Outcome::shadow_rejected;
      const bool by_bucket = sd.bound == store::Bound::bucket || sd.bound == store::Bound::parent;
      v.shadow_header = std::string(by_bucket ? "would-reject; bucket=" : "would-reject; policy=") +
                        sf_string(bound_policy(rule, channel, sd)) + "; retry-after-ms=" + millis_up(d.retry_after_us);
    } else if (d.wait_us > 0) {
      v.shadow_header = "would-delay; bucket=" + sf_string((sd.parent_bound && channel ? channel : &rule)->bucket) +
                        "; wait-ms=" + millis_up(d.wait_us);
    }
    return v;
  }
  v.policy_header = plan.view->policies;
  v.limit_header = ratelimit_header(rule, channel, sd);
  if (!d.granted) {
    v.action = Action::reject;
    v.outcome = Outcome::rejected;
    v.retry_after_s = ceil_seconds(d.retry_after_us);
    // A meter's red is its own, never the hold cap's (the cap only turns a held green yellow).
    v.cap_rejection = plan.capped && (sd.bound == store::Bound::bucket || sd.bound == store::Bound::parent) &&
                      !(plan.request.meter && sd.bound == store::Bound::bucket);
    v.bound = bound_policy(rule, channel, sd);
    v.body = rejection_body(rule, channel, sd, plan.deadline_bound ? plan.request.timeout_us : -1);
    return v;
  }
  if (plan.request.meter && sd.color == limiter::Color::yellow) v.color = "yellow";  // excess: the supplier may treat it so
  v.counts_wait = true;
  v.wait_us = d.wait_us;
  if (d.wait_us > 0) {
    v.action = Action::hold;
    v.outcome = Outcome::delayed;
  }
  return v;
}

}  // namespace tollgate::proxy

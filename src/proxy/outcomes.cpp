#include "outcomes.hpp"

namespace tollgate::proxy {

void OutcomeCounter::outcome(Outcome o, BucketMetrics* bm) {
  metrics_.count(o);
  if (bm) bm->count(o);
  rec_.outcome = outcome_name(o);
}

void OutcomeCounter::planned(const Plan& plan) {
  // A rule switched off by itself is counted on its bucket too; the global switch and "no rule" not.
  outcome(plan.outcome, plan.rule ? &bucket(plan) : nullptr);
  count_class(plan, plan.outcome);  // a deadline's 429 (too_late) of a classed request
}

void OutcomeCounter::decided(const Plan& plan, const store::StoreDecision& sd, const Verdict& v) {
  const config::Rule& rule = *plan.rule;
  BucketMetrics& bm = bucket(plan);
  if (sd.status == store::StoreStatus::ok) {
    if (sd.degraded) metrics_.store_degraded.Increment();
    // A meter's colour counts when it stood: the request was admitted, or the meter refused it
    // (a colour the channel bucket or a quota overruled took nothing from the meter).
    if (plan.request.meter && (sd.decision.granted || sd.color == limiter::Color::red)) {
      bm.count_color(sd.color);
      rec_.color = limiter::color_name(sd.color);
    }
    for (std::size_t i = 0; i < sd.quotas.size(); ++i) {
      const PolicyMetrics& pm = rules_->quota_metrics(rule, plan.channel, i);
      (sd.quotas[i].admitted ? pm.passed : pm.failed)->Increment();
    }
  }
  if (v.action == Action::reject) {
    if (v.cap_rejection) bm.cap_rejections.Increment();
    rules_->bound_metrics(rule, plan.channel, sd).bound->Increment();
    rec_.status = 429;
  } else if (v.action == Action::unavailable) {
    rec_.status = 503;
  }
  if (v.counts_wait) {
    bm.wait.observe_us(v.wait_us);
    rec_.wait_ms = static_cast<double>(v.wait_us) / 1e3;
  }
  outcome(v.outcome, &bm);
  count_class(plan, v.outcome);
}

void OutcomeCounter::count_class(const Plan& plan, Outcome o) {
  if (plan.priority == nullptr) return;
  rules_->class_metrics(*plan.rule, plan.channel, *plan.priority, plan.priority_class).count(o);
}

void OutcomeCounter::client_gone(std::uint32_t refunded) {
  metrics_.abandoned.Increment();
  metrics_.refunds.Increment(refunded);
  rec_.outcome = "client_gone";
}

}  // namespace tollgate::proxy

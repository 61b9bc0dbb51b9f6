#include "outcomes.hpp"

#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {

void OutcomeCounter::outcome(Outcome o, BucketMetrics* bm) {
  metrics_.count(o);
  if (bm) bm->outcomes[static_cast<int>(o)].fetch_add(1, std::memory_order_relaxed);
  rec_.outcome = outcome_name(o);
}

void OutcomeCounter::planned(const Plan& plan) {
  // A rule switched off by itself is counted on its bucket too; the global switch and "no rule" not.
  outcome(plan.outcome, plan.rule ? &bucket(plan) : nullptr);
}

void OutcomeCounter::decided(const Plan& plan, const store::StoreDecision& sd, const Verdict& v) {
  const config::Rule& rule = *plan.rule;
  BucketMetrics& bm = bucket(plan);
  if (sd.status == store::StoreStatus::ok) {
    if (sd.degraded) metrics_.store_degraded.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t i = 0; i < sd.quotas.size(); ++i) {
      PolicyMetrics& pm = metrics_.policy(quota_owner(rule, plan.channel, i).bucket, quota_at(rule, plan.channel, i).name);
      (sd.quotas[i].admitted ? pm.passed : pm.failed).fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (v.action == Action::reject) {
    if (v.cap_rejection) bm.cap_rejections.fetch_add(1, std::memory_order_relaxed);
    metrics_.policy(bound_owner(rule, plan.channel, sd).bucket, v.bound).bound.fetch_add(1, std::memory_order_relaxed);
    rec_.status = 429;
  } else if (v.action == Action::unavailable) {
    rec_.status = 503;
  }
  if (v.counts_wait) {
    bm.wait.observe_us(v.wait_us);
    rec_.wait_ms = static_cast<double>(v.wait_us) / 1e3;
  }
  outcome(v.outcome, &bm);
}

void OutcomeCounter::client_gone(std::uint32_t refunded) {
  metrics_.abandoned.fetch_add(1, std::memory_order_relaxed);
  metrics_.refunds.fetch_add(refunded, std::memory_order_relaxed);
  rec_.outcome = "client_gone";
}

}  // namespace tollgate::proxy

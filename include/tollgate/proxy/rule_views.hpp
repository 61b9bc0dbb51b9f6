// What the proxy derives from a snapshot once, rather than per request: for each rule, the
// RateLimit-Policy value a request it governs is told and its metric series (its bucket's, its
// policies'). A worker keeps the views of the snapshot it last saw and builds new ones when the
// snapshot changes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/store/decision.hpp"

namespace tollgate::proxy {

struct RuleView {
  std::string policies;                      // RateLimit-Policy: the rule's items, then its channel's
  // The series below are made on first use (as /metrics lists only buckets and policies that saw
  // traffic), then one pointer away.
  mutable BucketMetrics* metrics = nullptr;  // the rule's bucket
  mutable std::vector<PolicyMetrics*> quotas;  // by quota index: the rule's quotas, then its channel's
  mutable PolicyMetrics* bound[3] = {};      // by store::Bound: bucket, parent, share
  mutable std::vector<const ClassSeries*> classes;  // by priority class index (the rule's or its channel's)
};

class RuleViews {
 public:
  RuleViews(std::shared_ptr<const config::Snapshot> snapshot, Metrics& metrics);
  const config::Snapshot& snapshot() const { return *snapshot_; }
  const RuleView& of(const config::Rule& rule) const {
    return views_[static_cast<std::size_t>(&rule - snapshot_->rules.data())];
  }
  // The rule's bucket series. Views are used by one thread.
  BucketMetrics& metrics_of(const config::Rule& rule) const {
    const RuleView& v = of(rule);
    if (v.metrics == nullptr) v.metrics = &metrics_.bucket(rule.bucket);
    return *v.metrics;
  }
  // The series of the rule's quota `i` (quota_at), and of the policy that bound a decision.
  // `channel` is the rule's channel in this snapshot (or null).
  PolicyMetrics& quota_metrics(const config::Rule& rule, const config::Rule* channel, std::size_t i) const;
  // The series of the plan's priority class (plan.priority set): on the bucket whose classes they are.
  const ClassSeries& class_metrics(const config::Rule& rule, const config::Rule* channel, const config::Priority& p,
                                   std::size_t index) const;
  PolicyMetrics& bound_metrics(const config::Rule& rule, const config::Rule* channel,
                               const store::StoreDecision& sd) const;

 private:
  std::shared_ptr<const config::Snapshot> snapshot_;
  Metrics& metrics_;
  std::vector<RuleView> views_;  // by index in snapshot().rules
};

}  // namespace tollgate::proxy

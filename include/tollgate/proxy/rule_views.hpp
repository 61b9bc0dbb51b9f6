// What the proxy derives from a snapshot once, rather than per request: for each rule, the
// RateLimit-Policy value a request it governs is told and its bucket's metric series. A worker
// keeps the views of the snapshot it last saw and builds new ones when the snapshot changes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/proxy/metrics.hpp"

namespace tollgate::proxy {

struct RuleView {
  std::string policies;                      // RateLimit-Policy: the rule's items, then its channel's
  mutable BucketMetrics* metrics = nullptr;  // the series of the rule's bucket, made on first use
};

class RuleViews {
 public:
  RuleViews(std::shared_ptr<const config::Snapshot> snapshot, Metrics& metrics);
  const config::Snapshot& snapshot() const { return *snapshot_; }
  const RuleView& of(const config::Rule& rule) const {
    return views_[static_cast<std::size_t>(&rule - snapshot_->rules.data())];
  }
  // The rule's bucket series: created on first use (as /metrics lists only buckets that saw
  // traffic), then one pointer away. Views are used by one thread.
  BucketMetrics& metrics_of(const config::Rule& rule) const {
    const RuleView& v = of(rule);
    if (v.metrics == nullptr) v.metrics = &metrics_.bucket(rule.bucket);
    return *v.metrics;
  }

 private:
  std::shared_ptr<const config::Snapshot> snapshot_;
  Metrics& metrics_;
  std::vector<RuleView> views_;  // by index in snapshot().rules
};

}  // namespace tollgate::proxy

#include "tollgate/proxy/rule_views.hpp"

#include <type_traits>

#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {

RuleViews::RuleViews(std::shared_ptr<const config::Snapshot> snapshot, Metrics& metrics) : snapshot_(std::move(snapshot)), metrics_(metrics) {
  views_.reserve(snapshot_->rules.size());
  for (const config::Rule& r : snapshot_->rules) {
    const config::Rule* channel = r.enabled ? snapshot_->channel_of(r) : nullptr;
    RuleView v;
    v.policies = request_policies(r, channel);
    views_.push_back(std::move(v));
  }
}

PolicyMetrics& RuleViews::quota_metrics(const config::Rule& rule, const config::Rule* channel, std::size_t i) const {
  const RuleView& v = of(rule);
  if (i >= v.quotas.size()) v.quotas.resize(i + 1, nullptr);
  if (v.quotas[i] == nullptr)
    v.quotas[i] = &metrics_.policy(quota_owner(rule, channel, i).bucket, quota_at(rule, channel, i).name, true);
  return *v.quotas[i];
}

PolicyMetrics& RuleViews::bound_metrics(const config::Rule& rule, const config::Rule* channel,
                                        const store::StoreDecision& sd) const {
  if (sd.bound == store::Bound::quota) return quota_metrics(rule, channel, sd.bound_quota);
  static_assert(static_cast<std::size_t>(store::Bound::quota) == std::extent_v<decltype(RuleView::bound)>);
  PolicyMetrics*& p = of(rule).bound[static_cast<std::size_t>(sd.bound)];
  if (p == nullptr) p = &metrics_.policy(bound_owner(rule, channel, sd).bucket, bound_policy(rule, channel, sd), false);
  return *p;
}

const ClassSeries& RuleViews::class_metrics(const config::Rule& rule, const config::Rule* channel,
                                            const config::Priority& p, std::size_t index) const {
  const RuleView& v = of(rule);
  if (v.classes.empty()) v.classes.assign(p.classes.size(), nullptr);
  if (v.classes[index] == nullptr) {
    const bool own = rule.priority && &*rule.priority == &p;
    const std::string& bucket = own || channel == nullptr ? rule.bucket : channel->bucket;
    v.classes[index] = &metrics_.bucket(bucket).priority_class(p.classes[index]);
  }
  return *v.classes[index];
}

}  // namespace tollgate::proxy

#include "tollgate/proxy/rule_views.hpp"

#include "tollgate/proxy/rate_headers.hpp"

namespace tollgate::proxy {

RuleViews::RuleViews(std::shared_ptr<const config::Snapshot> snapshot, Metrics& metrics) : snapshot_(std::move(snapshot)), metrics_(metrics) {
  views_.reserve(snapshot_->rules.size());
  for (const config::Rule& r : snapshot_->rules) {
    const config::Rule* channel = r.enabled ? snapshot_->channel_of(r) : nullptr;
    views_.push_back({request_policies(r, channel), nullptr});
  }
}

}  // namespace tollgate::proxy

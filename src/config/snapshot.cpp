#include "tollgate/config/snapshot.hpp"

#include "tollgate/limiter/clock.hpp"

#include <algorithm>

namespace tollgate::config {

const Rule* Snapshot::match(std::string_view path) const {
  const std::size_t i = index.match(path);
  return i == SuffixIndex::npos ? nullptr : &rules[i];
}

const Rule* Snapshot::channel_of(const Rule& rule) const {
  if (channels.empty() || rule.channel || rule.channel_type.empty()) return nullptr;
  auto it = channels.find(rule.channel_type);
  return it == channels.end() ? nullptr : &rules[it->second];
}

const Rule* Snapshot::find_bucket(std::string_view url) const {
  const Rule* disabled = nullptr;  // an enabled row wins over disabled ones with the same URL
  for (const Rule& r : rules) {
    if (r.bucket != url) continue;
    if (r.enabled) return &r;
    if (disabled == nullptr) disabled = &r;
  }
  return disabled;
}

void keep_last_good(ValidatedRules& next, const Snapshot& prev) {
  auto by_id = [](auto& rules, std::int64_t id) {
    return std::find_if(rules.begin(), rules.end(), [id](const Rule& r) { return r.config_id == id; });
  };
  for (RejectedRow& bad : next.rejected) {
    if (!bad.config_id) continue;
    auto old = by_id(prev.rules, *bad.config_id);
    if (old == prev.rules.end()) continue;
    auto now = by_id(next.rules, *bad.config_id);
    if (!bad.quota_id) {  // a rule row
      if (now != next.rules.end()) continue;  // another row with this configId passed
      const bool taken = old->enabled && std::any_of(next.rules.begin(), next.rules.end(), [&](const Rule& r) {
                           return r.enabled && r.bucket == old->bucket;
                         });
      if (taken) continue;  // its URL belongs to another enabled row now
      next.rules.push_back(*old);
      bad.kept_previous = true;
      continue;
    }
    if (now == next.rules.end()) continue;  // a quota row: its rule must still be there
    const std::int64_t qid = *bad.quota_id;
    auto has = [qid](const Quota& q) { return q.quota_id == qid; };
    if (std::any_of(now->quotas.begin(), now->quotas.end(), has)) continue;
    auto oq = std::find_if(old->quotas.begin(), old->quotas.end(), has);
    if (oq == old->quotas.end()) continue;
    Quota q = *oq;
    name_quota(q, now->bucket);
    now->policy_header += (now->policy_header.empty() ? "" : ", ") + q.policy;
    now->quotas.push_back(std::move(q));
    bad.kept_previous = true;
  }
}

std::shared_ptr<const Snapshot> make_snapshot(ValidatedRules validated, std::uint64_t version, std::string source) {
  auto s = std::make_shared<Snapshot>();
  s->rules = std::move(validated.rules);
  s->rejected = std::move(validated.rejected);
  for (std::size_t i = 0; i < s->rules.size(); ++i) {
    const Rule& r = s->rules[i];
    if (!r.enabled) continue;
    if (r.channel) s->channels.emplace(r.channel_type, i);
    else s->index.add(r.interface_url, i);
  }
  for (Rule& r : s->rules) {
    r.all_policies = r.policy_header;
    if (const Rule* c = r.enabled ? s->channel_of(r) : nullptr; c && !c->policy_header.empty())
      r.all_policies += (r.all_policies.empty() ? "" : ", ") + c->policy_header;
  }
  s->version = version;
  s->loaded_at_us = limiter::steady_now_us();
  s->source = std::move(source);
  return s;
}

}  // namespace tollgate::config

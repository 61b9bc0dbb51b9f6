#include "tollgate/config/snapshot.hpp"

#include "tollgate/limiter/clock.hpp"

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
  // The duplicates are settled again with the kept versions in their rows' places, so a kept
  // version holds its URL against later rows exactly as it did before the bad edit.
  next = settle_rows(std::move(next.checked), &prev.rules);
}

std::shared_ptr<const Snapshot> make_snapshot(ValidatedRules validated, std::uint64_t version, std::string source) {
  auto s = std::make_shared<Snapshot>();
  s->rules = std::move(validated.rules);
  s->rejected = std::move(validated.rejected);
  for (std::size_t i = 0; i < s->rules.size(); ++i) {
    const Rule& r = s->rules[i];
    if (!r.enabled) continue;
    if (r.channel) s->channels.emplace(r.channel_type, i);
    else s->index.add(r.interface_url, i, r.match_case == MatchCase::insensitive);
  }
  s->version = version;
  s->loaded_at_us = limiter::steady_now_us();
  s->source = std::move(source);
  return s;
}

}  // namespace tollgate::config

#include "tollgate/proxy/refusals.hpp"

#include <algorithm>

namespace tollgate::proxy {

std::string key_shape(std::string_view client_key) {
  if (client_key.empty()) return {};
  // Whole UTF-8 sequences only: the cut never splits a character.
  std::size_t cut = 0;
  for (int chars = 0; cut < client_key.size() && chars < 3; ++chars) {
    ++cut;
    while (cut < client_key.size() && (static_cast<unsigned char>(client_key[cut]) & 0xC0) == 0x80) ++cut;
  }
  std::string out(client_key.substr(0, cut));
  if (cut < client_key.size()) out += "\xE2\x80\xA6";  // U+2026
  out.push_back('(');
  out.append(std::to_string(client_key.size()));
  out.push_back(')');
  return out;
}

namespace {
// The client part of a per-client store name ("c:<id>:<key>", "q:<id>:<key>", "s:<id>:<key>").
std::string_view client_part(std::string_view name) {
  const auto first = name.find(':');
  if (first == std::string_view::npos) return {};
  const auto second = name.find(':', first + 1);
  return second == std::string_view::npos ? std::string_view() : name.substr(second + 1);
}
}  // namespace

Refusal refusal_of(const Plan& plan, const Verdict& verdict, std::string_view path, int status, std::int64_t at_ms) {
  Refusal r;
  r.at_ms = at_ms;
  r.status = status;
  r.path.assign(path.substr(0, RefusalLog::kMaxPath));
  r.retry_after_s = verdict.retry_after_s;
  if (plan.rule == nullptr) return r;
  const config::Rule& rule = *plan.rule;
  r.bucket = rule.bucket;
  r.policy = verdict.bound;
  // The first per-client check the request carried: its keyed bucket, a keyed quota, its maxShare.
  if (!plan.keyed_bucket.empty()) {
    r.key_by = rule.key_by.text();
    r.key_shape = key_shape(client_part(plan.keyed_bucket));
    return r;
  }
  const auto& quotas = plan.request.quotas;
  for (std::size_t i = 0; i < quotas.size(); ++i) {
    if (quotas[i].shared) continue;
    const config::Quota* q = i < rule.quotas.size() ? &rule.quotas[i]
                             : plan.channel && i - rule.quotas.size() < plan.channel->quotas.size()
                                 ? &plan.channel->quotas[i - rule.quotas.size()]
                                 : nullptr;
    if (q) r.key_by = q->key_by.text();
    r.key_shape = key_shape(client_part(quotas[i].key));
    return r;
  }
  if (plan.request.share) {
    r.key_by = rule.share_key.text();
    r.key_shape = key_shape(client_part(plan.request.share->key));
  }
  return r;
}

RefusalLog::RefusalLog(std::size_t capacity) : ring_(std::max<std::size_t>(capacity, 1)) {}

void RefusalLog::record(Refusal r) {
  total_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  ring_[written_ % ring_.size()] = std::move(r);
  ++written_;
}

std::vector<Refusal> RefusalLog::recent(std::size_t limit) const {
  std::lock_guard lock(mu_);
  const std::size_t n = std::min<std::uint64_t>({limit, written_, ring_.size()});
  std::vector<Refusal> out;
  out.reserve(n);
  for (std::size_t i = 1; i <= n; ++i) out.push_back(ring_[(written_ - i) % ring_.size()]);
  return out;
}

std::uint64_t RefusalLog::total() const { return total_.load(std::memory_order_relaxed); }

}  // namespace tollgate::proxy

// libFuzzer: rule rows, as the file and the MySQL source hand them to validation. Whatever the rows
// hold, every row that is accepted (or kept from the previous load) must give header strings that
// are one line of visible ASCII and well-formed structured fields, and rejections must be one log
// line each. Two loads run per input: the first is the snapshot in force, the second is checked
// against it (keep_last_good), so kept versions and duplicates are exercised too.
//
// Input: JSON text "[rows...]" or "[rows...]\n===\n[rows...]" (readable seeds), or any other bytes,
// read as a compact description of rows with arbitrary strings (see read_rows).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/proxy/throttle.hpp"

using namespace tollgate;
using config::RawQuota;
using config::RawRow;
using config::Rule;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

bool visible(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

// RFC 8941 sf-string at s[i]; on success i is past it and `out` holds its value.
bool sf_string_at(std::string_view s, std::size_t& i, std::string& out) {
  if (i >= s.size() || s[i] != '"') return false;
  for (++i; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') {
      ++i;
      return true;
    }
    if (c == '\\') {
      if (++i >= s.size() || (s[i] != '"' && s[i] != '\\')) return false;
      out.push_back(s[i]);
      continue;
    }
    if (c < 0x20 || c > 0x7e) return false;
    out.push_back(static_cast<char>(c));
  }
  return false;
}

// An sf-integer (at most 15 digits) or sf-decimal (at most 12 integer and 3 fraction digits).
bool sf_number_at(std::string_view s, std::size_t& i) {
  if (i < s.size() && s[i] == '-') ++i;
  std::size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (digits == 0 || digits > 15) return false;
  if (i < s.size() && s[i] == '.') {
    if (digits > 12) return false;
    std::size_t frac = 0;
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) ++frac;
    return frac >= 1 && frac <= 3;
  }
  return true;
}

// An sf-list whose items are sf-strings with numeric parameters, as RateLimit-Policy and RateLimit
// are made here; the strings' values are collected in `names`.
bool sf_list(std::string_view s, std::vector<std::string>& names) {
  std::size_t i = 0;
  for (;;) {
    std::string name;
    if (!sf_string_at(s, i, name)) return false;
    names.push_back(std::move(name));
    while (i < s.size() && s[i] == ';') {
      ++i;
      const std::size_t key = i;
      while (i < s.size() && ((s[i] >= 'a' && s[i] <= 'z') || (i > key && s[i] >= '0' && s[i] <= '9'))) ++i;
      if (i == key || i >= s.size() || s[i] != '=') return false;
      ++i;
      if (!sf_number_at(s, i)) return false;
    }
    if (i == s.size()) return true;
    if (s.substr(i, 2) != ", ") return false;
    i += 2;
  }
}

// A header value (a RateLimit-Policy or RateLimit field) that must be an sf-list of the names given.
void check_field(const std::string& value, const std::vector<std::string>& expected_names) {
  require(visible(value));
  std::vector<std::string> names;
  require(sf_list(value, names));
  require(names == expected_names);
}

// The quoted name in X-Tollgate-Shadow (bucket="<name>") is written as is: it must need no escape.
void check_plain_quoted(const std::string& name) {
  require(visible(name));
  require(name.find_first_of("\"\\") == std::string::npos);
}

void check_rule(const config::Snapshot& snap, const Rule& r) {
  require(visible(r.bucket) && visible(r.channel_type) && visible(r.interface_url));
  if (r.channel) require(config::check_channel_type(r.channel_type).empty());
  else require(config::check_interface_url(r.interface_url).empty());
  if (!r.channel_type.empty()) require(config::check_channel_type(r.channel_type).empty());
  require(config::check_interface_no(r.interface_no).empty());
  if (r.key_by.kind == config::KeySpec::Kind::header) require(!r.key_by.header.empty() && visible(r.key_by.header));

  std::vector<std::string> own;
  if (r.has_bucket) own.push_back(r.bucket);
  for (const config::Quota& q : r.quotas) {
    require(q.name == r.bucket + "#q" + std::to_string(q.quota_id));
    if (q.key_by.kind == config::KeySpec::Kind::header) require(!q.key_by.header.empty() && visible(q.key_by.header));
    own.push_back(q.name);
  }
  if (const std::string p = proxy::rule_policies(r); !p.empty()) check_field(p, own);
  else require(own.empty());
  const Rule* channel = r.enabled ? snap.channel_of(r) : nullptr;
  std::vector<std::string> all = own;
  if (channel) {
    if (channel->has_bucket) all.push_back(channel->bucket);
    for (const config::Quota& q : channel->quotas) all.push_back(q.name);
  }
  if (const std::string p = proxy::request_policies(r, channel); !p.empty()) check_field(p, all);

  // RateLimit and the problem body for each check that can bind a request of this rule.
  store::StoreDecision sd;
  sd.decision.granted = false;
  sd.decision.remaining = 0;
  sd.decision.retry_after_us = 1'500'000;
  sd.max_permits = limiter::shape_of(r.params).max_permits;
  const std::size_t nq = r.quotas.size() + (channel ? channel->quotas.size() : 0);
  sd.quotas.resize(nq);
  for (std::size_t i = 0; i < nq; ++i) sd.quotas[i].remaining = static_cast<double>(proxy::quota_at(r, channel, i).limit);
  std::vector<store::Bound> bounds = {store::Bound::bucket, store::Bound::share};
  if (channel) bounds.push_back(store::Bound::parent);
  for (store::Bound b : bounds) {
    sd.bound = b;
    const std::string policy = proxy::bound_policy(r, channel, sd);
    check_plain_quoted(policy);
    check_field(proxy::ratelimit_header(r, channel, sd), {policy});
    require(nlohmann::json::accept(proxy::rejection_body(r, channel, sd)));
  }
  sd.bound = store::Bound::quota;
  for (std::size_t i = 0; i < nq; ++i) {
    sd.bound_quota = i;
    const std::string policy = proxy::bound_policy(r, channel, sd);
    check_plain_quoted(policy);
    check_field(proxy::ratelimit_header(r, channel, sd), {policy});
    require(nlohmann::json::accept(proxy::rejection_body(r, channel, sd)));
  }
  // Admitted: the policy closest to its limit, with every permit of the bucket left.
  sd.decision.granted = true;
  sd.decision.remaining = sd.max_permits;
  const std::string admitted = proxy::ratelimit_header(r, channel, sd);
  if (!admitted.empty()) {
    std::vector<std::string> names;
    require(visible(admitted) && sf_list(admitted, names) && names.size() == 1);
  }
}

void check_load(const config::ValidatedRules& v, const config::Snapshot& snap) {
  for (const config::RejectedRow& bad : v.rejected) require(visible(bad.message()));
  std::map<std::string, int> enabled;
  for (const Rule& r : snap.rules) {
    if (r.enabled && ++enabled[r.bucket] > 1) __builtin_trap();  // one enabled row per URL or channel
    check_rule(snap, r);
  }
}

// Strings: mostly from a few meaningful values, so that rows collide, sometimes arbitrary bytes.
std::optional<std::string> pick(FuzzedDataProvider& in, std::initializer_list<const char*> usual, std::size_t max_len) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return std::nullopt;
    case 1: return in.ConsumeRandomLengthString(max_len);
    default: {
      const auto i = in.ConsumeIntegralInRange<std::size_t>(0, usual.size() - 1);
      return std::string(usual.begin()[i]);
    }
  }
}

std::optional<double> number(FuzzedDataProvider& in, std::initializer_list<double> usual) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return std::nullopt;
    case 1: return in.ConsumeFloatingPoint<double>();
    default: return usual.begin()[in.ConsumeIntegralInRange<std::size_t>(0, usual.size() - 1)];
  }
}

std::vector<RawRow> read_rows(FuzzedDataProvider& in, const char* table) {
  std::vector<RawRow> rows(in.ConsumeIntegralInRange<std::size_t>(0, 6));
  std::int64_t next_quota = 1;
  for (RawRow& r : rows) {
    if (in.ConsumeIntegralInRange<int>(0, 15) != 0) r.config_id = in.ConsumeIntegralInRange<std::int64_t>(1, 6);
    r.origin = std::string(table) + "[configId=" + (r.config_id ? std::to_string(*r.config_id) : "?") + "]";
    r.channel_type = pick(in, {"IBE+", "", "Z\r\nX-Inj: 1", "a\"b", "ABCDEFGHIJKLMNOPQRSTUVWXY"}, 40);
    r.interface_no = pick(in, {"S01", "P01", "S\n1"}, 120);
    r.interface_url = pick(in, {"/pricing", "/a", "/x/a", "/pricing\r\nX: 1", "/a\"b", "/%2F"}, 160);
    r.rate_limit = number(in, {10, 1000, 0, -1, 0.5});
    r.cache = number(in, {0, 0.5, 61});
    if (in.ConsumeBool()) r.status = in.ConsumeIntegralInRange<std::int64_t>(0, 2);
    r.burst = number(in, {1, 5, 1e9, 1e300});
    r.warmup_seconds = number(in, {0, 1, 3600});
    r.scope = pick(in, {"interface", "channel"}, 12);
    r.mode = pick(in, {"enforce", "shadow", "off"}, 12);
    r.key_by = pick(in, {"none", "client_ip", "client_ip_path", "header:X-Key", "header:X\r\n"}, 80);
    r.max_share = number(in, {0.5, 1, 2});
    const auto quotas = in.ConsumeIntegralInRange<int>(0, 3);
    for (int q = 0; q < quotas; ++q) {
      RawQuota rq;
      rq.quota_id = in.ConsumeBool() ? next_quota++ : in.ConsumeIntegralInRange<std::int64_t>(1, 4);
      rq.config_id = r.config_id;
      rq.origin = "t_ratelimite_quota[quotaId=" + std::to_string(*rq.quota_id) + "]";
      if (in.ConsumeBool()) rq.period_seconds = in.ConsumeIntegralInRange<std::int64_t>(-1, 100'000);
      if (in.ConsumeBool()) rq.limit_count = in.ConsumeIntegralInRange<std::int64_t>(-1, 2'000'000'000);
      rq.algorithm = pick(in, {"fixed", "sliding"}, 10);
      rq.key_by = pick(in, {"none", "client_ip", "header:X-Api-Key"}, 80);
      if (in.ConsumeBool()) rq.status = in.ConsumeIntegralInRange<std::int64_t>(0, 1);
      r.quotas.push_back(std::move(rq));
    }
  }
  return rows;
}

void run(const std::vector<RawRow>& first, const std::vector<RawRow>& second) {
  const config::ValidatedRules a = config::validate_rows(first);
  const auto in_force = config::make_snapshot(a, 1, "fuzz");
  check_load(a, *in_force);
  config::ValidatedRules b = config::validate_rows(second);
  config::keep_last_good(b, *in_force);
  const config::ValidatedRules kept = b;
  const auto next = config::make_snapshot(std::move(b), 2, "fuzz");
  check_load(kept, *next);
  // A row said to keep its last valid version does: the version in force before is in force now.
  for (const config::RejectedRow& bad : kept.rejected) {
    if (!bad.kept_previous || bad.quota_id) continue;
    const Rule* before = nullptr;
    for (const Rule& r : in_force->rules)
      if (r.config_id == *bad.config_id) before = &r;
    require(before != nullptr);
    bool found = false;
    for (const Rule& r : next->rules) found = found || (r.config_id == before->config_id && r.bucket == before->bucket);
    require(found);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 0 && data[0] == '[') {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::size_t sep = text.find("\n===\n");
    try {
      const auto first = config::parse_rule_rows(text.substr(0, sep), "rules");
      const auto second =
          sep == std::string::npos ? first : config::parse_rule_rows(text.substr(sep + 5), "rules");
      run(first, second);
    } catch (const config::ConfigError&) {
    }
    return 0;
  }
  FuzzedDataProvider in(data, size);
  const std::vector<RawRow> first = read_rows(in, "t_ratelimite_conf");
  const std::vector<RawRow> second = read_rows(in, "t_ratelimite_conf");
  run(first, second);
  return 0;
}

// Every name a bucket store keeps state under, built here and nowhere else:
//   bucket            a rule's interfaceUrl, or "channel:<channelType>"
//   keyed bucket      "c:<configId>:<client key>"   (a rule with keyBy; evictable)
//   quota counter     "q:<quotaId>:<client key>"    ("q:<quotaId>:" when shared by every caller)
//   maxShare set      "s:<configId>:<client key>"
//   abandoned slots   "a:<bucket>"                  (limiter::abandon)
//   adapted rate      "r:<bucket>"                  (limiter/adaptive_rate)
//   meter             "m:<bucket>"                  (limiter/three_color)
// In Redis each is stored as <prefix>{<hash tag>}<name>: the keys of one request share the tag (the
// channel type, or the rule's bucket), hence one Redis Cluster slot; a name equal to its tag is
// stored as <prefix>{<name>}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tollgate::store {

namespace key_detail {

inline std::string join(std::string_view kind, std::int64_t id, std::string_view client_key) {
  std::string out(kind);
  out += std::to_string(id);
  out.push_back(':');
  out.append(client_key);
  return out;
}

// A glob matching nothing but `text` itself.
inline std::string glob_escape(std::string_view text) {
  std::string out;
  for (char ch : text) {
    if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out;
}

}  // namespace key_detail

inline std::string keyed_bucket_name(std::int64_t config_id, std::string_view client_key) {
  return key_detail::join("c:", config_id, client_key);
}
inline std::string quota_key(std::int64_t quota_id, std::string_view client_key) {
  return key_detail::join("q:", quota_id, client_key);
}
inline std::string share_key(std::int64_t config_id, std::string_view client_key) {
  return key_detail::join("s:", config_id, client_key);
}
// "a:" begins no other name: interface URLs start with '/', the others with "channel:", "c:", "q:", "s:".
inline std::string abandoned_name(std::string_view bucket) { return "a:" + std::string(bucket); }

// "r:" likewise begins no other name.
inline std::string adaptive_name(std::string_view bucket) { return "r:" + std::string(bucket); }

// A rule's three-colour meter: "m:<bucket>" (its own name, so that a rule that changes algorithm
// starts afresh rather than reading a bucket's state as a meter's).
inline std::string meter_name(std::string_view bucket) { return "m:" + std::string(bucket); }

// <prefix>{<tag>}<name>, or <prefix>{<name>} when tag is empty or equal to the name.
inline std::string redis_key(const std::string& prefix, std::string_view tag, std::string_view name) {
  if (tag.empty() || tag == name) return prefix + "{" + std::string(name) + "}";
  return prefix + "{" + std::string(tag) + "}" + std::string(name);
}

// The same key written into `out` (cleared first): no allocation once `out` has grown to fit.
inline void append_redis_key(std::string& out, const std::string& prefix, std::string_view tag, std::string_view name) {
  out.assign(prefix);
  out.push_back('{');
  if (tag.empty() || tag == name) {
    out.append(name);
    out.push_back('}');
    return;
  }
  out.append(tag);
  out.push_back('}');
  out.append(name);
}

// A bucket's set of abandoned slots, in the bucket's slot (tag "" means the bucket's name).
inline std::string abandoned_key(const std::string& prefix, std::string_view tag, std::string_view name) {
  return redis_key(prefix, tag.empty() ? name : tag, abandoned_name(name));
}

// A bucket's adapted-rate hash, in the bucket's slot.
inline std::string adaptive_key(const std::string& prefix, std::string_view tag, std::string_view name) {
  return redis_key(prefix, tag.empty() ? name : tag, adaptive_name(name));
}

// A SCAN pattern for every per-client key (keyed bucket, client quota, maxShare set) under `prefix`
// and no shared one: a shared quota ("q:<quotaId>:") has nothing after its last ':', hence the "?*".
inline std::string client_keys_pattern(std::string_view prefix) {
  return key_detail::glob_escape(prefix) + "{*}[cqs]:*:?*";
}

}  // namespace tollgate::store

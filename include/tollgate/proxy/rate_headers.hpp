// The RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers, structured fields) of the
// rules, made here on the proxy side (config knows no HTTP): once per snapshot (RuleViews), never
// per request. The per-request RateLimit field is throttle.hpp's ratelimit_header.
#pragma once

#include <string>
#include <string_view>

#include "tollgate/config/rule.hpp"

namespace tollgate::proxy {

// An RFC 8941 sf-string: quoted, '"' and '\' escaped with a backslash. Only 0x20-0x7E may appear
// in one; any other byte is written as '?' so that a header stays one well-formed line whatever it
// is given (validated rule names never contain such bytes).
std::string sf_string(std::string_view s);
// The same, appended to `out`.
void append_sf_string(std::string& out, std::string_view s);

// A bucket's item: "<bucket>";q=<rate>;w=1;burst=<max permits>
std::string ratelimit_policy(std::string_view bucket, double rate, double max_permits);
// A quota's item: "<bucket>#q<id>";q=<limit>;w=<period seconds>
std::string quota_policy(const config::Quota& q);
// A rule's own items: its bucket's (if it has one), then its quotas' in order.
std::string rule_policies(const config::Rule& rule);
// What a request the rule governs is told: the rule's items, then its channel's (`channel` may be null).
std::string request_policies(const config::Rule& rule, const config::Rule* channel);

}  // namespace tollgate::proxy

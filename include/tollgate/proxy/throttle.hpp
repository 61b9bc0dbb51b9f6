// The throttling step of the request path as plain functions: which rule governs a request and what
// a rejection says. No sockets here, so all of it is unit-testable.
#pragma once

#include <string>
#include <string_view>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/limiter/token_bucket.hpp"
#include "tollgate/store/decision.hpp"

namespace tollgate::proxy {

// The path of a request target, without query or fragment.
std::string_view path_of(std::string_view target);

// Whole seconds, rounded up (Retry-After); at least 1 for any positive wait.
long long ceil_seconds(limiter::Micros us);

// draft-ietf-httpapi-ratelimit-headers (structured fields; RateLimit-Policy is made once per rule,
// config::ratelimit_policy): RateLimit of one bucket: "<bucket>";r=<whole permits left>;t=<seconds
// until the request would be admitted>
std::string ratelimit_header(const config::Rule& rule, const limiter::Decision& d);

// A request's checks are its rule's (bucket, quotas, maxShare) and its channel's (bucket, quotas);
// the store answers quotas in that order: the rule's first, then the channel's. `channel` may be null.
const config::Quota& quota_at(const config::Rule& rule, const config::Rule* channel, std::size_t i);
// The rule a quota (by the same index) or a decision's binding policy belongs to.
const config::Rule& quota_owner(const config::Rule& rule, const config::Rule* channel, std::size_t i);
const config::Rule& bound_owner(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd);

// The name of the policy that bound a decision: a bucket, "channel:<type>", "<bucket>#q<id>" or
// "<bucket>#maxShare".
std::string bound_policy(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd);

// RateLimit for a request with several policies: when rejected, the one that bound; when admitted,
// the one closest to its limit (smallest remaining share of its quota).
std::string ratelimit_header(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd);

// Problem details (RFC 9457, application/problem+json) with the problem types of the IETF
// RateLimit header fields draft: a 429 is "quota-exceeded" naming the policy that bound it in
// "violated-policies"; the limiter's own 503 (fail_closed) is "temporary-reduced-capacity".
inline constexpr std::string_view kQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded";
inline constexpr std::string_view kReducedCapacity =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

// The body of a 429: type, title, status, detail, violated-policies, and as extension members what
// clients read before (error "rate_limited", policy, bucket, configId, retry_after_ms, kind and the
// bound policy's terms).
// `deadline_wait_us` >= 0: the request's own deadline had cut the wait it could be given to that
// (a member "deadline_wait_ms" says so).
std::string rejection_body(const config::Rule& rule, const config::Rule* channel, const store::StoreDecision& sd,
                           std::int64_t deadline_wait_us = -1);

// The body of an answer the gateway gives itself (4xx, 502, 503, 504): type (`type`, or
// about:blank), title, status, detail, and the extension member error = `code`.
// The 429 of a request whose time budget is shorter than the interface's upstream latency.
std::string deadline_body(const config::Rule& rule, std::int64_t budget_us, std::int64_t latency_us);

std::string problem_body(int status, std::string_view title, std::string_view code, std::string_view detail,
                         std::string_view type = "about:blank");

// The admin API's plain JSON error: {"error":code,"detail":detail}
std::string error_body(std::string_view code, std::string_view detail);

}  // namespace tollgate::proxy

// The throttling step of the request path as plain functions: which rule governs a request and what
// a rejection says. No sockets here, so all of it is unit-testable.
#pragma once

#include <string>
#include <string_view>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::proxy {

// The path of a request target, without query or fragment.
std::string_view path_of(std::string_view target);

// Whole seconds, rounded up (Retry-After); at least 1 for any positive wait.
long long ceil_seconds(limiter::Micros us);

// draft-ietf-httpapi-ratelimit-headers (structured fields):
//   RateLimit-Policy: "<bucket>";q=<rateLimit>;w=1;burst=<maxPermits>
//   RateLimit: "<bucket>";r=<whole permits left>;t=<seconds until the next permit is free>
std::string ratelimit_policy_header(const config::Rule& rule, double max_permits);
std::string ratelimit_header(const config::Rule& rule, const limiter::Decision& d);

// JSON body of a 429: {"error":"rate_limited","bucket":...,"retry_after_ms":...,...}
std::string rejection_body(const config::Rule& rule, const limiter::Decision& d);

// JSON body of an error the gateway answers itself: {"error":code,"detail":detail}
std::string error_body(std::string_view code, std::string_view detail);

}  // namespace tollgate::proxy

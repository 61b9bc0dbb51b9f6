// Internal to the proxy: the one writer of the answers the gateway gives itself (4xx, 429, 502,
// 503, 504): an application/problem+json body (RFC 9457) and the few fields each needs, head and
// body in one write. Each names its request (proxy/request_id): X-Request-Id, and the body's
// member "request_id".
#pragma once

#include <string>
#include <string_view>

#include "timed_socket.hpp"

namespace tollgate::proxy {

struct OwnAnswer {
  int status = 200;
  std::string body;                  // problem details (problem_body, rejection_body)
  std::string_view request_id;       // non-empty: X-Request-Id (set with set_request_id)
  long long retry_after_s = 0;       // > 0: Retry-After
  std::string_view allow;            // non-empty: Allow (405)
  std::string_view policy_header;    // non-empty: RateLimit-Policy and RateLimit (429)
  std::string_view limit_header;
};

// Writes `a` within `timeout`; returns whether the connection can serve another request (written,
// and `keep`). Pass a named OwnAnswer: g++ 12 mishandles temporaries bound into coroutine frames.
net::awaitable<bool> send_answer(TimedSocket& stream, unsigned version, bool keep, const OwnAnswer& a,
                                 milliseconds timeout);

// The answer names request `id`: X-Request-Id, and the member "request_id" added to its body.
void set_request_id(OwnAnswer& a, std::string_view id);

// The common case: problem details of `status` (about:blank, its reason phrase as the title) with
// error = code, `detail` and request_id = `request_id`.
OwnAnswer error_answer(int status, std::string_view code, std::string_view detail, std::string_view request_id);

}  // namespace tollgate::proxy

// Internal to the proxy: the upstream side of a request. Takes a pooled keep-alive connection (or
// opens one), sends the request, reads the final response head and relays the response to the
// client without buffering its body; answers 502/504 itself when the upstream fails first.
#pragma once

#include <string>
#include <string_view>

#include "proxy_context.hpp"
#include "tollgate/proxy/access_log.hpp"

namespace tollgate::proxy {

// The headers a forwarded request's response gains (empty policy_header: none).
struct RateLimitFields {
  std::string_view policy_header;
  std::string_view limit_header;
};

// Returns whether the client connection stays open.
net::awaitable<bool> forward(ProxyContext& px, Worker& w, TimedSocket& client,
                             http::request<http::string_body> req, const std::string& client_ip, std::size_t upstream,
                             RateLimitFields fields, AccessRecord& rec);

}  // namespace tollgate::proxy

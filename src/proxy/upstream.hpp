// Internal to the proxy: the upstream side of a request. Takes a pooled keep-alive connection (or
// opens one), sends the request, reads the final response head and relays the response to the
// client without buffering its body; answers 502/504 itself when the upstream fails first.
#pragma once

#include <string>
#include <string_view>

#include "proxy_context.hpp"
#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/upstream_signal.hpp"

namespace tollgate::proxy {

// What goes upstream: the client's request as parsed, with the gateway's changes.
struct UpstreamRequest {
  const http1::RequestHead& head;
  std::string_view target;     // normalised (proxy/request_target)
  std::string_view body;       // as read (a chunked body decoded): sent with a Content-Length
  std::string_view shadow;     // X-Tollgate-Shadow ("" none)
  std::string_view request_id; // X-Request-Id (proxy/request_id), sent instead of the client's
  std::string_view client_ip;  // the socket peer: appended to X-Forwarded-For
  // The caller's deadline (proxy/deadline): caps the wait for the response head, and the
  // grpc-timeout / Request-Timeout sent on say what is left of it. Null: none.
  const Budget* budget = nullptr;
  std::chrono::steady_clock::time_point deadline{};
  LatencyEstimate* latency = nullptr;  // the rule's estimate, fed with this response's latency
  ThrottleSignal* signal = nullptr;    // set when the response is a throttle signal (proxy/upstream_signal)
  bool client_tls = false;             // came in over TLS: X-Forwarded-Proto https
  // The permit it was granted: when no endpoint could take it (every connect or handshake
  // failed, nothing was sent), it is given back (BucketStore::return_unused) before the caller
  // is answered, so that the caller's next request finds it. Null: none to give back.
  const store::AcquireRequest* permit = nullptr;
  // The X-Real-IP and Forwarded fields, with their CRLFs (client_key.hpp: hop_fields): the
  // client's own are never sent as they came.
  std::string_view hop_fields;
  std::string_view color;  // X-Tollgate-Color (a meter's yellow; "" none): only the gateway sets it
};

// The fields a forwarded request's response gains: RateLimit-Policy and RateLimit (empty
// policy_header: none), and X-Request-Id (in place of any the upstream sent; "" none).
struct RateLimitFields {
  std::string_view policy_header;
  std::string_view limit_header;
  std::string_view request_id;
};

// Keeps upstreams.<name>.min_idle_conns connections to the upstream open (and handshaken) in the
// worker's `pool` ahead of requests, replacing them before they grow stale; runs until the worker
// drains or the pool retires. Nothing to do when min_idle_conns is 0.
net::awaitable<void> keep_warm(ProxyContext& px, Worker& w, Upstream up, std::shared_ptr<Pool> pool);

// The upstream's names do not resolve yet (the gateway started anyway): 503 upstream_unresolved,
// counted (kind "unresolved"). Returns whether the client connection stays open.
net::awaitable<bool> answer_unresolved(ProxyContext& px, TimedSocket& client, unsigned version, bool keep, Upstream& up,
                                       AccessRecord& rec);

// Sends the request to `route` (of `table`, the one the request started on) and relays the
// answer. Returns whether the client connection stays open.
net::awaitable<bool> forward(ProxyContext& px, Worker& w, WorkerTable& table, TimedSocket& client,
                             const UpstreamRequest& req, const Route& route, const RateLimitFields& fields,
                             AccessRecord& rec);

// A request the gateway makes itself (an OAuth2 token request, proxy/upstream_auth) to upstream
// `index` of `table`: `line` (the request line with its CRLF), `fields` (each with its CRLF; the
// Host and Content-Length are added) and `body`, sent to its endpoints in turn until one answers;
// the response read whole, its body up to `max_body` bytes. Everything by `by`.
struct Exchange {
  bool complete = false;  // a whole response came: status and body are set
  int status = 0;
  std::string body;
  std::string why;  // when not complete: what failed
};
net::awaitable<Exchange> exchange(ProxyContext& px, Worker& w, WorkerTable& table, std::size_t index,
                                  std::string_view line, std::string_view fields, std::string_view body, Deadline by,
                                  std::size_t max_body);

}  // namespace tollgate::proxy

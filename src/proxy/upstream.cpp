#include "upstream.hpp"

#include <array>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/string.hpp>
#include <cstdio>
#include <ctime>
#include <optional>
#include <sys/socket.h>

#include <openssl/ssl.h>

#include "responses.hpp"
#include "tls_io.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/log_line.hpp"
#include "tollgate/proxy/request_id.hpp"
#include "tollgate/proxy/request_target.hpp"
#include "tollgate/proxy/upstream_signal.hpp"

namespace tollgate::proxy {

namespace {

using http1::Name;

// Who sent the request, for the evidence rule of a 401 (UpstreamAuth::confirm_401): the address
// X-Real-IP carries (the client as proxy.trusted_proxies find it).
std::uint64_t caller_of(const UpstreamRequest& req) {
  constexpr std::string_view kName = "X-Real-IP: ";
  std::string_view ip = req.hop_fields;
  if (ip.starts_with(kName)) ip = ip.substr(kName.size(), ip.find("\r\n") - kName.size());
  else ip = req.client_ip;
  return limiter::caller_id(ip);
}

// What the upstream's answer says about its limit (the session reports it to the store after
// answering): a throttle; else, for an adaptive rule, the allowance its fields advertise. A
// RateLimit field with r=0 on an answer that is no refusal is a throttle only for a rule that does
// not read the advertised allowance (for one that does, it says the window is used up). Called
// only when there is something to read (has_signal): out of line, the common case costs no call.
[[gnu::noinline]] void read_signal(const config::RateFieldsConfig& fields, const http1::ResponseHead& res,
                                   ThrottleSignal& sig) {
  const int status = res.status;
  const bool want = sig.want_advert;
  const http1::Field* date = res.find(Name::date);
  if (status == 429 || status == 503 || (!want && res.has(Name::ratelimit))) {
    std::string limits;
    for (const http1::Field& f : res.all()) {
      if (f.id != Name::ratelimit) continue;
      if (!limits.empty()) limits.append(", ", 2);
      limits.append(f.value);
    }
    const http1::Field* retry = res.find(Name::retry_after);
    sig = classify_response(status, retry ? std::optional(retry->value) : std::nullopt,
                            date ? std::optional(date->value) : std::nullopt, limits);
    sig.want_advert = want;
  }
  if (!want || sig.throttled) return;
  // Fields on an answer a cache kept (Age) say what was left then, not now: not believed.
  thread_local std::vector<HeaderView> views;
  views.clear();
  for (const http1::Field& f : res.all()) {
    if (beast::iequals(f.name, "Age")) return;
    views.push_back({f.name, f.value});
  }
  sig.read_at_us = limiter::steady_now_us();
  sig.advert_read = read_advert(fields, views, date ? std::optional(date->value) : std::nullopt,
                                static_cast<std::int64_t>(std::time(nullptr)), sig.advert);
}

// Whether the answer may say something of the upstream's limit (read_signal): a refusal, a
// RateLimit field, or any answer for a rule that reads the advertised allowance.
inline bool has_signal(const http1::ResponseHead& res, const ThrottleSignal& sig) {
  return sig.want_advert || res.status == 429 || res.status == 503 || res.has(Name::ratelimit);
}

constexpr std::uint64_t kBufferedBodyMax = 1024 * 1024;  // larger or unknown-length bodies stream
constexpr std::size_t kMaxResponseHead = 64 * 1024;
// Interim (1xx) responses accepted before the final one; more is an upstream failure.
constexpr int kMaxInterimResponses = 8;

// True when nothing has arrived on an idle connection since its last response ended: no byte (an
// unsolicited response, the surplus of a short Content-Length, a body sent to a HEAD) and no
// close or error (the upstream's keep-alive timeout). Such bytes answer no request, so the
// connection is closed instead of reused: reading them as the next request's response would hand
// one client another's answer. One non-blocking peek, only when a connection is taken for reuse.
// Over TLS the records that arrived are processed first: a TLS 1.3 session ticket is no
// response, but a close_notify or application data is.
bool quiet(TimedSocket& s) {
  if (SSL* ssl = s.tls()) return tls_quiet(ssl);
  char c;
  const ssize_t n = ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// A close with close_notify (eof) or without it (a TLS truncation) end a stream alike here.
bool closed(const beast::error_code& ec) { return ec == net::error::eof || ec == net::ssl::error::stream_truncated; }

// Whether two field names are one to a CGI, PHP-FPM or WSGI server, which reads both as the
// variable HTTP_<NAME> with '-' made '_': ASCII case-insensitive, '_' and '-' alike.
bool same_field_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto fold = [](char c) { return c == '_' ? '-' : c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (fold(a[i]) != fold(b[i])) return false;
  }
  return true;
}

// A field whose name holds '_' in a request that has one (http1 marks it: RequestHead::
// underscore_names), by proxy.underscores_in_headers: dropped (drop; reject answered 400 before
// this), or with `allow` dropped only when it reads as a field the gateway sets, removes or reads
// itself ("X_Forwarded_For", "Request_Timeout"): those a caller never sets under another spelling.
[[gnu::cold, gnu::noinline]] bool underscore_dropped(std::string_view name, config::UnderscoreHeaders mode) {
  if (name.find('_') == std::string_view::npos) return false;
  if (mode != config::UnderscoreHeaders::allow) return true;
  char folded[64];
  if (name.size() > sizeof folded) return false;  // longer than any name the gateway knows
  for (std::size_t i = 0; i < name.size(); ++i) folded[i] = name[i] == '_' ? '-' : name[i];
  return http1::name_of(std::string_view(folded, name.size())) != Name::other;
}

// The request head for the upstream hop: the client's fields in their order without the
// hop-by-hop ones (and those its Connection names), the framing ones (the body goes with a
// Content-Length of what was read, never the client's framing), Expect (the body is here already)
// and the ones the gateway sets; then X-Forwarded-For (the client's values and its address),
// X-Forwarded-Proto, X-Forwarded-Host (the request's own Host; none without one, whatever the
// client sent), X-Real-IP (the client's address as proxy.trusted_proxies find it), Forwarded (the
// client's elements only from a trusted proxy, then this hop's), Host, Content-Length, X-Request-Id
// (the request's id, one field: the client's when it was kept), X-Tollgate-Shadow and
// X-Tollgate-Color (a meter's yellow: only the gateway says that), and Via (the client's elements,
// then this hop's: RFC 9110 7.6.3). Any other field (traceparent, tracestate, ...) goes as it came,
// except a name with '_' (proxy.underscores_in_headers: underscore_dropped). With a supplier
// credential (upstreams.<name>.auth) the caller's field of its name is dropped, however it is
// spelled (same_field_name), and `auth_field` (the whole line) goes instead: a caller never
// chooses the credential.
// Flattened (every call in it inlined): once it stopped being inlined into forward(), its appends
// became calls, ~470 instructions per request (bench/instructions.sh, T0).
[[gnu::flatten]] std::string request_head(const ProxyContext& px, const UpstreamRequest& r, std::string_view host_header,
                                         std::string_view auth_name = {}, std::string_view auth_field = {}) {
  const http1::RequestHead& h = r.head;
  std::string out;
  const std::string_view original_host = h.value(Name::host);
  const int received = h.version_minor == 0 ? 0 : 1;
  const std::string_view own_via = px.via_received[received];
  out.reserve(h.head_bytes + 184 + r.client_ip.size() + r.hop_fields.size() + original_host.size() +
              r.request_id.size() + r.shadow.size() + r.color.size() + auth_field.size() + own_via.size());
  out.append(h.method_text).push_back(' ');
  out.append(r.target).append(" HTTP/1.1\r\n", 11);
  std::string xff, via;
  FieldRun run;
  for (const http1::Field& f : h.all()) {
    switch (f.id) {
      case Name::x_forwarded_for:
        if (!xff.empty()) xff.append(", ", 2);
        xff.append(f.value);
        continue;
      case Name::via:
        if (!via.empty()) via.append(", ", 2);
        via.append(f.value);
        continue;
      case Name::host: case Name::content_length: case Name::transfer_encoding: case Name::expect:
      case Name::x_forwarded_proto: case Name::x_forwarded_host: case Name::x_real_ip: case Name::forwarded:
      case Name::x_tollgate_shadow: case Name::x_tollgate_color: case Name::x_request_id:
        continue;
      case Name::grpc_timeout:
        if (r.budget && r.budget->grpc) continue;  // what is left of it, below
        break;
      case Name::request_timeout:
        if (r.budget && r.budget->request_timeout) continue;
        break;
      default:
        if (http1::is_hop_by_hop(f.id)) continue;
        if (h.underscore_names && f.id == Name::other && underscore_dropped(f.name, px.limits.underscores_in_headers))
          continue;
        break;
    }
    if (h.connection_names_other && http1::connection_names(h, f.name)) continue;
    if (!auth_name.empty() && same_field_name(f.name, auth_name)) continue;
    run.add(out, f);
  }
  run.flush(out);
  out.append(auth_field);
  if (xff.empty()) append_field(out, "X-Forwarded-For", r.client_ip);
  else append_field(out, "X-Forwarded-For", xff.append(", ", 2).append(r.client_ip));
  if (via.empty()) {
    out.append(px.via_proto_lines[received][r.client_tls ? 1 : 0]);
  } else {
    append_field(out, "Via", via.append(", ", 2).append(own_via));
    append_field(out, "X-Forwarded-Proto", r.client_tls ? "https" : "http");
  }
  if (!original_host.empty()) append_field(out, "X-Forwarded-Host", original_host);
  out.append(r.hop_fields);  // X-Real-IP, Forwarded
  append_field(out, "Host", host_header);
  // As Beast's prepare_payload did: a length for any body, and for POST, PUT and OPTIONS always.
  if (!r.body.empty() || h.method == http1::Method::post || h.method == http1::Method::put ||
      h.method == http1::Method::options)
    append_field(out, "Content-Length", std::to_string(r.body.size()));
  if (!r.request_id.empty()) append_request_id_field(out, r.request_id);
  if (!r.shadow.empty()) append_field(out, "X-Tollgate-Shadow", r.shadow);
  if (!r.color.empty()) append_field(out, "X-Tollgate-Color", r.color);
  if (r.budget) {
    // What is left of the caller's budget now, as the upstream should see it.
    const auto left = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::microseconds>(r.deadline - std::chrono::steady_clock::now()).count());
    if (r.budget->grpc) append_field(out, "grpc-timeout", grpc_timeout_text(left));
    if (r.budget->request_timeout) {
      // Whole milliseconds, rounded down: never more than is left.
      const long long ms = left / 1000;
      char buf[32];
      const int n = std::snprintf(buf, sizeof buf, "%lld.%03lld", ms / 1000, ms % 1000);
      append_field(out, "Request-Timeout", std::string_view(buf, static_cast<std::size_t>(n)));
    }
  }
  out.append("\r\n", 2);
  return out;
}

enum class Reframe : std::uint8_t { none, chunked, drop_length };

// X-Tollgate-Origin marks the gateway's own answers (responses.cpp): an upstream's is never
// relayed, so that a client can believe it. Not a parsed name: the length first, then the bytes.
bool claims_origin(const http1::Field& f) {
  constexpr std::string_view kName = "x-tollgate-origin";
  return f.id == Name::other && f.name.size() == kName.size() && beast::iequals(f.name, kName);
}

// When both the gateway and the upstream have RateLimit fields: the gateway's, then the upstream's
// items made at least as restrictive (restrict_ratelimit), and its policies after ours. Rare: kept
// out of response_head's loop.
[[gnu::cold, gnu::noinline]] void append_merged_ratelimit(std::string& out, const http1::ResponseHead& h,
                                                          const RateLimitFields& fields) {
  std::string their_limit, their_policy;
  for (const http1::Field& f : h.all()) {
    if (f.id != Name::ratelimit && f.id != Name::ratelimit_policy) continue;
    std::string& to = f.id == Name::ratelimit ? their_limit : their_policy;
    if (!to.empty()) to.append(", ", 2);
    to.append(f.value);
  }
  std::string policy(fields.policy_header);
  if (!their_policy.empty()) policy.append(", ", 2).append(their_policy);
  append_field(out, "RateLimit-Policy", policy);
  append_field(out, "RateLimit", their_limit.empty() ? std::string(fields.limit_header)
                                                     : restrict_ratelimit(fields.limit_header, their_limit));
}

// The response head for the client: the upstream's status and fields without the hop-by-hop ones
// (and those its Connection names) and the framing the gateway changes, then the framing and
// connection fields for this client, then X-Request-Id, RateLimit-Policy and RateLimit. The
// request's id replaces any X-Request-Id of the upstream's: the client gets one, the one the
// upstream was sent. When the gateway has its own RateLimit fields, the upstream's RateLimit items
// follow the gateway's made at least as restrictive (proxy/upstream_signal: restrict_ratelimit),
// never more permissive, and its policies follow ours.
std::string response_head(const http1::ResponseHead& h, unsigned version, bool keep, Reframe reframe,
                          const RateLimitFields& fields) {
  std::string out;
  out.reserve(h.head_bytes + 80 + fields.request_id.size() + fields.policy_header.size() + fields.limit_header.size());
  append_status_line(out, version, h.status, h.reason.empty() ? reason_of(h.status) : h.reason);
  const bool ours = !fields.policy_header.empty();
  const bool our_id = !fields.request_id.empty();
  const bool drop_their_id = our_id && h.has(Name::x_request_id);
  FieldRun run;
  for (const http1::Field& f : h.all()) {
    if (f.id == Name::transfer_encoding) continue;
    if (drop_their_id && f.id == Name::x_request_id) continue;  // ours below
    if (claims_origin(f)) continue;  // only the gateway says an answer is its own
    if (f.id == Name::content_length && reframe != Reframe::none) continue;
    if (http1::is_hop_by_hop(f.id)) continue;
    if (h.connection_names_other && http1::connection_names(h, f.name)) continue;
    if (ours && (f.id == Name::ratelimit || f.id == Name::ratelimit_policy)) continue;  // below
    run.add(out, f);
  }
  run.flush(out);
  if (reframe == Reframe::chunked) append_field(out, "Transfer-Encoding", "chunked");
  if (version == 10 && keep) append_field(out, "Connection", "keep-alive");
  if (version != 10 && !keep) append_field(out, "Connection", "close");
  if (our_id) append_request_id_field(out, fields.request_id);
  if (ours) {
    if (h.has(Name::ratelimit) || h.has(Name::ratelimit_policy)) {
      append_merged_ratelimit(out, h, fields);
    } else {
      append_field(out, "RateLimit-Policy", fields.policy_header);
      append_field(out, "RateLimit", fields.limit_header);
    }
  }
  out.append("\r\n", 2);
  return out;
}

void upstream_error(ProxyContext& px, Upstream& up, UpstreamError e) {
  px.deps.metrics.count(e);
  up.metrics->count(e);
}

// A request tries at most this many endpoints (each once) before its answer is the last failure
// (forward: upstreams.<name>.max_attempts, at most this).
constexpr std::size_t kMaxTried = 16;

// The request counted as outstanding on the endpoint it is on, for least-outstanding balancing.
class Outstanding {
 public:
  Outstanding() = default;
  Outstanding(const Outstanding&) = delete;
  Outstanding& operator=(const Outstanding&) = delete;
  ~Outstanding() { on(nullptr); }
  void on(UpstreamEndpoint* e) {
    if (e == e_) return;
    if (e_) e_->outstanding.fetch_sub(1, std::memory_order_relaxed);
    e_ = e;
    if (e_) e_->outstanding.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  UpstreamEndpoint* e_ = nullptr;
};

// A failure of `e` (connect, reset, timeout, a 5xx other than 503): counts toward its ejection.
void endpoint_failed(Upstream& up, UpstreamEndpoint& e) {
  if (!e.in_set.load(std::memory_order_relaxed)) return;  // gone from the answers already
  std::uint64_t version = 0;
  const auto set = up.endpoints->current(version);
  const EjectPolicy& p = up.endpoints->policy();
  if (!note_failure(*set, e, p, limiter::steady_now_us())) return;
  up.endpoints->mark_ejected(e);  // counted there, under the lock that removes a leaving endpoint's series
  const std::uint32_t k = std::min<std::uint32_t>(e.ejections.load(std::memory_order_relaxed), 10);
  log_line("tollgate: warn: upstream '", up.conf.name, "' endpoint ", e.label, " ejected for ",
           static_cast<long long>(p.base_us / 1000) * k, " ms after ", p.consecutive_failures, " failures in a row");
}

// No endpoint could take the request and nothing of it was sent: the supplier never saw this
// call, so its permits go back to its bucket (and channel bucket), before the caller is answered.
net::awaitable<void> return_permit(ProxyContext& px, const UpstreamRequest& req) {
  if (req.permit == nullptr) co_return;
  // Counted whether or not the bucket had room (a bucket that refilled to its burst meanwhile
  // takes nothing more): the count is of requests whose permit went back.
  co_await px.deps.store.return_unused(*req.permit);
  px.deps.metrics.permits_returned.Increment();
}

// The worker's view of the upstream: its endpoints as the resolver last published them, and
// (https) the TLS profile current now (new connections use it; pooled ones made under another are
// not reused). Each is read again only after it changed.
void refresh_view(Pool& pool, const Upstream& up) {
  if (pool.set_version != up.endpoints->version()) pool.set = up.endpoints->current(pool.set_version);
  if (up.tls && pool.tls_epoch != up.tls->epoch()) {
    pool.tls_epoch = up.tls->epoch();
    pool.tls = up.tls->profile();
  }
}

}  // namespace

net::awaitable<bool> answer_unresolved(ProxyContext& px, TimedSocket& client, unsigned version, bool keep, Upstream& up,
                                       AccessRecord& rec) {
  upstream_error(px, up, UpstreamError::unresolved);
  rec.status = 503;
  const OwnAnswer answer = error_answer(503, "upstream_unresolved",
                                        "upstream '" + up.conf.name + "': " + up.conf.host + " does not resolve yet",
                                        rec.request_id);
  co_return co_await send_answer(client, version, keep, answer, milliseconds(px.limits.body_timeout_ms));
}

namespace {

// A TLS handshake or verification with the upstream failed: 502 naming the cause, counted by
// reason; never retried to the same endpoint within the request (it would fail the same way).
net::awaitable<bool> tls_failed(ProxyContext& px, TimedSocket& client, unsigned version, bool keep, Upstream& up,
                                const TlsFailure& f, AccessRecord& rec, bool counted = false) {
  if (!counted) {
    upstream_error(px, up, UpstreamError::connect);
    if (up.tls) up.tls->count_failure(f.reason);
  }
  rec.status = 502;
  const std::string detail = "upstream '" + up.conf.name + "': TLS: " + f.words;
  const OwnAnswer answer = error_answer(502, "upstream_tls_failed", detail, rec.request_id);
  co_return co_await send_answer(client, version, keep, answer, milliseconds(px.limits.body_timeout_ms));
}

// No supplier credential could be had (the token endpoint failed, refused or is slower than the
// caller's deadline): 502, counted as `auth`; nothing was sent to the supplier.
net::awaitable<bool> auth_failed(ProxyContext& px, TimedSocket& client, unsigned version, bool keep, Upstream& up,
                                 AccessRecord& rec) {
  upstream_error(px, up, UpstreamError::auth);
  rec.status = 502;
  // Why is the operator's to read (the log, /admin/overview): a caller learns nothing of the
  // gateway's identity provider.
  const std::string detail = "upstream '" + up.conf.name +
                             "': no credential for the supplier could be had in time; nothing was sent to it";
  const OwnAnswer answer = error_answer(502, "upstream_auth_failed", detail, rec.request_id);
  co_return co_await send_answer(client, version, keep, answer, milliseconds(px.limits.body_timeout_ms));
}

// The caller's own deadline passed before the response head came: 504, counted as `deadline`,
// apart from upstream timeouts. The caller's budget ran out, so the endpoint is not marked failed.
net::awaitable<bool> deadline_passed(ProxyContext& px, TimedSocket& client, unsigned version, bool keep, Upstream& up,
                                     AccessRecord& rec) {
  upstream_error(px, up, UpstreamError::deadline);
  rec.status = 504;
  const OwnAnswer answer = error_answer(
      504, "deadline_exceeded",
      "upstream '" + up.conf.name + "': the caller's deadline (grpc-timeout, Request-Timeout) passed before the response",
      rec.request_id);
  co_return co_await send_answer(client, version, keep, answer, milliseconds(px.limits.body_timeout_ms));
}

// Before any of the response went out: 504 for a deadline, 502 for anything else, counted.
net::awaitable<bool> upstream_failed(ProxyContext& px, TimedSocket& client, unsigned version, bool keep, Upstream& up,
                                     beast::error_code ec, UpstreamError kind, AccessRecord& rec,
                                     std::string_view why = {}, bool counted = false) {
  const bool timeout = ec == beast::error::timeout;
  if (!counted) upstream_error(px, up, timeout ? UpstreamError::timeout : kind);
  rec.status = timeout ? 504 : 502;
  const char* code = timeout ? "upstream_timeout" : kind == UpstreamError::connect ? "upstream_unavailable" : "upstream_failed";
  std::string detail = "upstream '" + up.conf.name + "': " + (kind == UpstreamError::connect ? "connect: " : "");
  if (why.empty() || timeout) detail += ec.message();
  else detail.append(why.data(), why.size());
  const OwnAnswer answer = error_answer(timeout ? 504 : 502, code, detail, rec.request_id);
  co_return co_await send_answer(client, version, keep, answer, milliseconds(px.limits.body_timeout_ms));
}

// An idle connection to `ep` is reused only if it is young enough, nothing arrived on it while idle,
// (TLS) it was made with the upstream's current profile (SNI, trust and client certificate are
// part of what a pooled connection is), and its address is still one the upstream resolves to.
// Stale ones met on the way, to any endpoint, are closed.
// Whether an idle connection may still carry a request, before looking at its socket (quiet()):
// idle less than `max_age`, made under the profile of `tls_generation`, to an address still given.
bool reusable(PooledConn& c, std::chrono::steady_clock::time_point now, std::chrono::steady_clock::duration max_age,
              std::uint64_t tls_generation) {
  return now - c.idle_since < max_age && c.tls_generation == tls_generation &&
         c.endpoint->in_set.load(std::memory_order_relaxed) && c.stream.socket().is_open();
}

std::unique_ptr<PooledConn> take_idle(ProxyContext& px, Pool& pool, const Upstream& up, const UpstreamEndpoint* ep,
                                      std::uint64_t tls_generation) {
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = pool.idle.size(); i-- > 0;) {
    PooledConn& c = *pool.idle[i];
    const bool stale = !reusable(c, now, up.idle_timeout, tls_generation);
    if (!stale && c.endpoint.get() != ep) continue;
    auto taken = std::move(pool.idle[i]);
    pool.idle.erase(pool.idle.begin() + static_cast<std::ptrdiff_t>(i));
    if (!stale && quiet(taken->stream)) return taken;
    px.deps.metrics.upstream_conns_discarded.Increment();
  }
  return nullptr;
}

// TLS on a connection just made to its endpoint: the profile's SSL, resuming the worker's last
// session with that endpoint, and the handshake under `deadline`. Counts the handshake (resumed or
// not) and notes the upstream's certificate expiry after a full one. Null `failure`: it worked.
net::awaitable<beast::error_code> start_tls(std::size_t worker, const Upstream& up,
                                           const TlsClientProfile& profile, PooledConn& conn, Deadline deadline,
                                           std::optional<TlsFailure>& failure) {
  TlsSessionCache& sessions = conn.endpoint->sessions[worker];
  beast::error_code ec;
  conn.stream.socket().non_blocking(true, ec);
  SSL_SESSION* resume = sessions.take(profile.generation());
  SSL* ssl = profile.new_connection(conn.stream.socket().native_handle(), resume, &sessions);
  if (resume) SSL_SESSION_free(resume);
  if (ssl == nullptr) {
    failure = TlsFailure{"handshake", "cannot make a TLS connection (out of memory)"};
    co_return beast::error_code(net::error::no_memory);
  }
  conn.stream.set_tls(ssl);
  conn.tls_generation = profile.generation();
  conn.stream.start(deadline);
  ec = co_await tls_handshake(conn.stream);
  conn.stream.end(ec);
  if (ec) {
    if (ec != beast::error::timeout)
      failure = describe_tls_failure(ssl, is_tls_error(ec) ? static_cast<unsigned long>(ec.value()) : 0);
    co_return ec;
  }
  const bool resumed = SSL_session_reused(ssl) == 1;
  up.tls->count_handshake(resumed);
  if (!resumed) up.tls->saw_peer_certificate(certificate_not_after(SSL_get0_peer_certificate(ssl)));
  co_return ec;
}

// A new connection to conn.endpoint by `deadline`, handshaken under `profile` when it is not null
// (https): the handshake shares the connect deadline, so a supplier that accepts but never
// completes a handshake is a connect failure, not a response timeout. A TLS refusal is counted
// and described in `failure`.
net::awaitable<beast::error_code> open_connection(Worker& w, const Upstream& up, PooledConn& conn,
                                                  const TlsClientProfile* profile, Deadline deadline,
                                                  std::optional<TlsFailure>& failure) {
  beast::error_code ec;
  conn.stream.start(deadline);
  co_await conn.stream.socket().async_connect(conn.endpoint->address, with(ec));
  conn.stream.end(ec);
  if (ec) co_return ec;
  conn.stream.socket().set_option(tcp::no_delay(true), ec);
  ec = {};
  if (profile == nullptr) co_return ec;
  ec = co_await start_tls(w.index, up, *profile, conn, deadline, failure);
  if (failure) up.tls->count_failure(failure->reason);
  co_return ec;
}

// Called only when a response ended exactly at its message boundary; a byte already read past it
// belongs to no request, so such a connection is closed.
// A retired pool's upstream left the route table (SIGHUP): its connections close as they come back.
void give_back(ProxyContext& px, Pool& pool, std::unique_ptr<PooledConn> c) {
  if (pool.retired) return;
  if (c->buffer.size() != 0) {
    px.deps.metrics.upstream_conns_discarded.Increment();
    return;
  }
  if (pool.idle.size() >= px.limits.max_idle_upstream_conns) return;
  c->idle_since = std::chrono::steady_clock::now();
  pool.idle.push_back(std::move(c));
}

// Reads response heads until the final one. Interim responses (1xx) carry no body and answer
// nothing the client asked the upstream for (the gateway answers `Expect: 100-continue` itself
// and strips `Upgrade`), so they are consumed; the final response that follows is this
// request's. An unrequested 101, a status outside 100-599, a malformed head or too many interim
// responses are an upstream failure: `why` says which. One deadline for all of them.
net::awaitable<beast::error_code> read_final_head(PooledConn& conn, http1::ResponseHead& head, Deadline deadline,
                                                  bool& got_some, std::string_view& why) {
  for (int interim = 0;; ++interim) {
    std::size_t scanned = 0;
    http1::Error e;
    while ((e = http1::parse_response_head(view(conn.buffer), kMaxResponseHead, head, scanned)) == http1::Error::need_more) {
      got_some = got_some || conn.buffer.size() > 0;
      beast::error_code ec = co_await read_more(conn.stream, conn.buffer, deadline);
      if (closed(ec) && conn.buffer.size() > 0) {
        why = "partial message";
        ec = net::error::invalid_argument;
      }
      if (ec) co_return ec;
    }
    got_some = true;
    if (e != http1::Error::none) {
      why = http1::describe(e);
      co_return beast::error_code(net::error::invalid_argument);
    }
    const int status = head.status;
    if (status >= 200 && status <= 599) co_return beast::error_code();
    if (status == 101) why = "unrequested 101 Switching Protocols";
    else if (status < 100 || status > 599) why = "invalid response status";
    else if (interim == kMaxInterimResponses) why = "too many interim (1xx) responses";
    if (!why.empty()) co_return beast::error_code(net::error::invalid_argument);
    conn.buffer.consume(head.head_bytes);
  }
}

// Adds one chunk ("<size hex>\r\n<data>\r\n") to `out`.
void append_chunk(std::string& out, std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  out.append(size, static_cast<std::size_t>(n));
  out.append(data);
  out.append("\r\n", 2);
}

// A body that is large, chunked, delimited by the close, or still arriving: relayed piece by
// piece as it comes (whatever one read brings, never waiting to fill a buffer), never buffered
// whole. The response timeout applies to each read, so a slow but live stream goes on. A chunked
// body is decoded and sent again in chunks (its trailer is not passed on); to an HTTP/1.0 client
// it goes unframed and the connection closes after it.
net::awaitable<bool> relay(ProxyContext& px, TimedSocket& client, unsigned version, bool keep,
                           std::unique_ptr<PooledConn> conn, Pool& pool, Upstream& up, const http1::ResponseHead& h,
                           http1::BodyFraming framing, const RateLimitFields& fields) {
  const bool upstream_keep = h.keep_alive && framing.kind != http1::BodyKind::until_close;
  const bool chunked_out = framing.kind != http1::BodyKind::length && version == 11;
  if (framing.kind != http1::BodyKind::length && version == 10) keep = false;
  std::string out = response_head(h, version, keep, framing.kind == http1::BodyKind::length ? Reframe::none
                                                                      : chunked_out ? Reframe::chunked
                                                                                    : Reframe::drop_length, fields);
  conn->buffer.consume(h.head_bytes);  // the head's views are not used past this point
  std::uint64_t remaining = framing.length;
  http1::ChunkedDecoder decoder;
  bool done = false;
  bool upstream_ok = true;
  for (;;) {
    // What the buffer holds of the body goes out now, with the head the first time.
    std::string_view data = view(conn->buffer);
    std::size_t used = 0;
    if (framing.kind == http1::BodyKind::length) {
      used = static_cast<std::size_t>(std::min<std::uint64_t>(remaining, data.size()));
      out.append(data.substr(0, used));
      remaining -= used;
      done = remaining == 0;
    } else if (framing.kind == http1::BodyKind::chunked) {
      used = decoder.decode(data, [&](const char* p, std::size_t n) {
        if (chunked_out) append_chunk(out, {p, n});
        else out.append(p, n);
      });
      if (decoder.error() != http1::Error::none) {
        upstream_ok = false;
        upstream_error(px, up, UpstreamError::reset);
        endpoint_failed(up, *conn->endpoint);
      }
      done = decoder.done();
    } else {
      used = data.size();
      if (chunked_out && used > 0) append_chunk(out, data);
      else out.append(data);
    }
    conn->buffer.consume(used);
    if (done && chunked_out) out.append("0\r\n\r\n", 5);
    if (!out.empty()) {
      beast::error_code ec;
      client.start(deadline_after(milliseconds(px.limits.body_timeout_ms)));
      co_await write_both(client, net::buffer(out), {}, ec);
      client.end(ec);
      if (ec) co_return false;
      out.clear();
    }
    if (done || !upstream_ok) break;
    beast::error_code ec = co_await read_more(conn->stream, conn->buffer, deadline_after(up.response_timeout));
    if (closed(ec) && framing.kind == http1::BodyKind::until_close) {
      done = true;  // the end of a body delimited by the close
      if (chunked_out) {
        out.assign("0\r\n\r\n", 5);
        client.start(deadline_after(milliseconds(px.limits.body_timeout_ms)));
        co_await write_both(client, net::buffer(out), {}, ec);
        client.end(ec);
        if (ec) co_return false;
      }
      break;
    }
    if (ec) {
      upstream_ok = false;
      upstream_error(px, up, ec == beast::error::timeout ? UpstreamError::timeout : UpstreamError::reset);
      endpoint_failed(up, *conn->endpoint);
      break;  // the head already went out: all we can do is close the client connection
    }
  }
  if (!upstream_ok) co_return false;
  if (upstream_keep && done) give_back(px, pool, std::move(conn));
  co_return keep;
}

}  // namespace

// Longer than a function should be (about 240 lines): one request's credential, endpoint pick,
// connect, send, failover, retry and 401 loop, and its answer, over one coroutine frame. Its steps
// share a dozen locals (the permit, the endpoints tried, the deadline cut, the head made once) and
// run on every request: each as a coroutine of its own would allocate a frame a request (a step
// after the decision as its own coroutine measured +320 Ir a request, docs/history/benchmarks.md).
net::awaitable<bool> forward(ProxyContext& px, Worker& w, WorkerTable& table, TimedSocket& client,
                             const UpstreamRequest& request, const Route& route, const RateLimitFields& fields,
                             AccessRecord& rec) {
  Upstream& up = table.routes->upstreams()[route.upstream];
  Pool& pool = *table.pools[route.upstream];
  const http1::RequestHead& rh = request.head;
  const unsigned version = rh.version_minor == 0 ? 10 : 11;
  const bool keep = rh.keep_alive && !w.draining;  // draining: this answer closes the connection
  const bool head_request = rh.method == http1::Method::head;

  // The path the upstream sees: its base path, then the request's (without the route's prefix
  // when the route strips it).
  std::string joined;
  std::optional<UpstreamRequest> rewritten;  // only when the path changes (a copy is not free)
  if (!up.conf.base_path.empty() || route.strip_prefix) {
    joined = upstream_target(up.conf.base_path, route.strip_prefix ? route.prefix : std::string_view(), request.target);
    rewritten.emplace(request).target = joined;
  }
  const UpstreamRequest& req = rewritten ? *rewritten : request;
  refresh_view(pool, up);
  if (pool.set->endpoints.empty()) {  // (the session answers this before the limiter: only a race gets here)
    co_await return_permit(px, req);
    co_return co_await answer_unresolved(px, client, version, keep, up, rec);
  }

  // The supplier's credential (upstreams.<name>.auth): a fixed field, or the OAuth2 token, waited
  // for (a timer) up to the caller's deadline or the route's response timeout. None to be had:
  // 502 upstream_auth_failed, and the request is never sent without it.
  std::string_view auth_name, auth_field;
  std::string token_field;
  bool reached_supplier = false;  // a first attempt got its answer (a 401): the supplier counted it
  const auto auth_by = [&] {
    const Deadline by = deadline_after(route.response_timeout);
    return req.budget && req.deadline < by ? req.deadline : by;
  };
  if (up.auth) {
    auth_name = up.auth->field_name();
    if (!up.auth->oauth2()) {
      auth_field = up.auth->static_field();
    } else {
      up.auth->note_caller(caller_of(req));
      token_field = co_await up.auth->field(px, w, auth_by());
      if (token_field.empty()) {
        co_await return_permit(px, req);
        co_return co_await auth_failed(px, client, version, keep, up, rec);
      }
      auth_field = token_field;
    }
  }

  std::string head;
  std::string_view head_for;  // the Host `head` was made with
  const TlsClientProfile* const tls = up.conf.https ? pool.tls.get() : nullptr;
  const std::uint64_t tls_generation = tls ? tls->generation() : 0;
  std::unique_ptr<PooledConn> conn;
  Outstanding outstanding;
  std::chrono::steady_clock::time_point sent_at;
  // Endpoints that failed to connect (or to complete a handshake) for this request: a request
  // goes to each at most once, on its one permit.
  std::array<const UpstreamEndpoint*, kMaxTried> tried;  // the first tried_count are set
  std::size_t tried_count = 0;
  std::optional<TlsFailure> last_tls;
  beast::error_code last_connect;
  // The caller's deadline to the timer's precision (the tick alone could cut it 100 ms late). It
  // goes before `conn` does, so it never watches a connection that is gone or back in the pool.
  std::optional<DeadlineCut> cut;
  if (req.budget) cut.emplace(w.ctx->get_executor(), req.deadline);
  // A timeout that the caller's deadline caused, not the upstream's own timeouts.
  const auto by_deadline = [&](const beast::error_code& e, Deadline by) {
    return e == beast::error::timeout && cut && (by == req.deadline || cut->fired());
  };
  // Every connection opened for the request, each failover's and the wait for the response head
  // end by the route's response timeout after the first connect (or the caller's deadline, if
  // sooner): endpoints that drop SYNs cost a caller no more than that, however many a name gives.
  // kNoDeadline until a connection is opened (a reused one's request is bounded as it always was).
  Deadline attempt_by = kNoDeadline;
  for (bool auth_retried = false;; auth_retried = true, attempt_by = kNoDeadline) {
    for (int attempt = 0;;) {
      beast::error_code ec;
      const EndpointSet& set = *pool.set;
      // One endpoint and nothing tried yet (the common case): no clock read, no search.
      const std::size_t pick = set.endpoints.size() == 1 && tried_count == 0
                                   ? 0
                                   : pick_endpoint(set, pool.rr, limiter::steady_now_us(), tried.data(), tried_count);
      if (pick == kNoEndpoint) {
        // Every endpoint failed to take it: the last failure is the answer.
        if (!reached_supplier) co_await return_permit(px, req);
        if (last_tls) co_return co_await tls_failed(px, client, version, keep, up, *last_tls, rec, true);
        co_return co_await upstream_failed(px, client, version, keep, up, last_connect, UpstreamError::connect, rec, {}, true);
      }
      const EndpointPtr& ep = set.endpoints[pick];
      conn = take_idle(px, pool, up, ep.get(), tls_generation);
      const bool reused = conn != nullptr;
      if (cut && reused) cut->watch(&conn->stream);
      if (pool.warm_timer && pool.idle.size() < up.conf.min_idle_conns) pool.warm_timer->cancel();  // top it up now
      outstanding.on(ep.get());
      if (!reused) {
        conn = std::make_unique<PooledConn>(w.ctx->get_executor(), w.timeouts);
        conn->endpoint = ep;
        if (cut) cut->watch(&conn->stream);
        const auto now = std::chrono::steady_clock::now();
        if (attempt_by == kNoDeadline)
          attempt_by = req.budget ? std::min(now + route.response_timeout, req.deadline) : now + route.response_timeout;
        const Deadline connect_by = std::min(now + route.connect_timeout, attempt_by);  // attempt_by: the caller's deadline too
        // (https) The profile is held for the handshake: a reload meanwhile may replace the pool's.
        const std::shared_ptr<const TlsClientProfile> profile = tls ? pool.tls : nullptr;
        last_tls.reset();
        ec = co_await open_connection(w, up, *conn, profile.get(), connect_by, last_tls);
        if (ec && by_deadline(ec, connect_by)) {
          if (!reached_supplier) co_await return_permit(px, req);  // nothing of it reached the upstream
          co_return co_await deadline_passed(px, client, version, keep, up, rec);
        }
        if (ec) {
          // Nothing of the request was sent: another endpoint takes it at once, on the same permit.
          upstream_error(px, up, ec == beast::error::timeout ? UpstreamError::timeout : UpstreamError::connect);
          endpoint_failed(up, *conn->endpoint);
          last_connect = ec;
          if (tried_count < kMaxTried) tried[tried_count++] = conn->endpoint.get();
          outstanding.on(nullptr);
          // Another endpoint while the request has attempts (upstreams.<name>.max_attempts) and
          // time left; otherwise this failure is the answer (504 when the time ran out).
          if (tried_count < up.conf.max_attempts && tried_count < pool.set->endpoints.size() &&
              std::chrono::steady_clock::now() < attempt_by) {
            up.metrics->failovers->Increment();
            continue;
          }
          if (!reached_supplier) co_await return_permit(px, req);
          if (last_tls) co_return co_await tls_failed(px, client, version, keep, up, *last_tls, rec, true);
          co_return co_await upstream_failed(px, client, version, keep, up, ec, UpstreamError::connect, rec, {}, true);
        }
      }
      if (head.empty() || head_for != conn->endpoint->host_header) {
        head = request_head(px, req, conn->endpoint->host_header, auth_name, auth_field);
        head_for = conn->endpoint->host_header;
      }
      const net::const_buffer head_buf = net::buffer(head), body_buf = net::buffer(req.body.data(), req.body.size());
      sent_at = std::chrono::steady_clock::now();
      // The response head is awaited up to the route's timeout, or the caller's deadline if sooner.
      auto head_by = std::min(sent_at + route.response_timeout, attempt_by);
      if (req.budget && req.deadline < head_by) head_by = req.deadline;
      conn->stream.start(head_by);
      const std::size_t written = co_await write_both(conn->stream, head_buf, body_buf, ec);
      conn->stream.end(ec);
      bool retry = false;
      std::string_view why;
      if (!ec) {
        bool got_some = false;
        ec = co_await read_final_head(*conn, *conn->head, head_by, got_some, why);
        // A reused connection that failed before any response byte (the upstream closed it just
        // as the request went out): send once more on a fresh connection if the method may be
        // repeated. The upstream may then see the request twice on one permit, as with nginx's
        // proxy_next_upstream; non-idempotent requests get 502 instead.
        retry = ec && reused && attempt == 0 && !got_some && ec != beast::error::timeout && is_idempotent(rh.method);
      } else {
        // Nothing reached the upstream unless some bytes were written; then only idempotent methods.
        retry = reused && attempt == 0 && ec != beast::error::timeout && (written == 0 || is_idempotent(rh.method));
      }
      if (!ec) break;
      if (retry) {
        px.deps.metrics.upstream_retries.Increment();
        ++attempt;
        continue;
      }
      if (by_deadline(ec, head_by)) {
        if (req.latency) {
          // Cut off at the caller's deadline: the upstream takes at least this long, and the
          // estimate must learn it, or it would keep admitting requests that cannot make it.
          const auto now = std::chrono::steady_clock::now();
          req.latency->record(std::chrono::duration_cast<std::chrono::microseconds>(now - sent_at).count(),
                              std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count());
        }
        co_return co_await deadline_passed(px, client, version, keep, up, rec);
      }
      endpoint_failed(up, *conn->endpoint);
      // A fresh TLS connection refused on its first read: in TLS 1.3 the server checks the client
      // certificate after the client's handshake is done, so its alert arrives here.
      if (!reused && tls && is_tls_error(ec)) {
        const TlsFailure failure = describe_tls_failure(conn->stream.tls(), static_cast<unsigned long>(ec.value()));
        // Refused for its client certificate: the supplier read no request, so, as after a failed
        // handshake, the permit goes back.
        if (failure.reason == "client_certificate") co_await return_permit(px, req);
        co_return co_await tls_failed(px, client, version, keep, up, failure, rec);
      }
      co_return co_await upstream_failed(px, client, version, keep, up, ec, UpstreamError::reset, rec, why);
    }
    // The supplier refused the OAuth2 token (revoked, or expired early): it is dropped for every
    // worker, a new one fetched (one fetch, whoever asks), and the request sent once more on its
    // permit. A 401 says the request was not acted on, so any method goes again; only once.
    // Only with evidence that the token, not this caller, is refused (UpstreamAuth::confirm_401):
    // one caller's own 401s go to it as they came, the token kept.
    if (conn->head->status != 401 || !up.auth || !up.auth->oauth2() || auth_retried) break;
    if (!up.auth->confirm_401(token_field, caller_of(req))) break;
    if (cut) cut->watch(nullptr);
    conn.reset();  // its 401 body is not read: the connection closes
    outstanding.on(nullptr);
    token_field = co_await up.auth->field(px, w, auth_by(), token_field);
    reached_supplier = true;  // its permit is spent: it is never given back from here on
    if (token_field.empty()) co_return co_await auth_failed(px, client, version, keep, up, rec);
    auth_field = token_field;
    head.clear();
    tried_count = 0;
  }

  if (cut) cut->watch(nullptr);  // the head is in: the rest is under the response timeout
  const http1::ResponseHead& res = *conn->head;
  const auto head_at = std::chrono::steady_clock::now();
  const std::int64_t latency_us = std::chrono::duration_cast<std::chrono::microseconds>(head_at - sent_at).count();
  up.metrics->latency.observe_us(latency_us);
  if (req.latency)
    req.latency->record(latency_us,
                        std::chrono::duration_cast<std::chrono::microseconds>(head_at.time_since_epoch()).count());
  const int status = res.status;
  rec.status = rec.upstream_status = status;
  // A 5xx is the endpoint's failure, except a 503 (suppliers throttle with it).
  if (status >= 500 && status != 503) endpoint_failed(up, *conn->endpoint);
  else note_success(*conn->endpoint, up.endpoints->policy());
  if (req.signal && has_signal(res, *req.signal)) read_signal(up.conf.rate_fields, res, *req.signal);
  const http1::BodyFraming framing = http1::response_body(res, head_request);
  if (framing.kind == http1::BodyKind::unsupported) {
    const beast::error_code bad(net::error::invalid_argument);
    co_return co_await upstream_failed(px, client, version, keep, up, bad, UpstreamError::reset, rec,
                                       "unsupported Transfer-Encoding");
  }
  const std::uint64_t length = framing.kind == http1::BodyKind::none ? 0 : framing.length;
  if ((framing.kind == http1::BodyKind::none || framing.kind == http1::BodyKind::length) && length <= kBufferedBodyMax &&
      conn->buffer.size() >= res.head_bytes + length) {
    // The common case: a small body that came with its head (or none): head and body in one write.
    // A 204 has no body whatever its fields say: a Content-Length on it would make some clients
    // wait for bytes that never come.
    const std::string rhead = response_head(res, version, keep, status == 204 ? Reframe::drop_length : Reframe::none, fields);
    const std::string_view body = view(conn->buffer).substr(res.head_bytes, static_cast<std::size_t>(length));
    beast::error_code ec;
    client.start(deadline_after(milliseconds(px.limits.body_timeout_ms)));
    co_await write_both(client, net::buffer(rhead), net::buffer(body.data(), body.size()), ec);
    client.end(ec);
    conn->buffer.consume(res.head_bytes + static_cast<std::size_t>(length));
    if (res.keep_alive) give_back(px, pool, std::move(conn));
    co_return !ec && keep;
  }
  co_return co_await relay(px, client, version, keep, std::move(conn), pool, up, res, framing, fields);
}

namespace {
// exchange's request sent and its answer's head read (a connection per endpoint tried, one more
// try on a pooled connection the server closed meanwhile): the connection holding the head, or
// null with out.why said.
net::awaitable<std::unique_ptr<PooledConn>> exchange_head(ProxyContext& px, Worker& w, Upstream& up, Pool& pool,
                                                          std::string_view line, std::string_view fields,
                                                          std::string_view body, Deadline by, Exchange& out) {
  const TlsClientProfile* const tls = up.conf.https ? pool.tls.get() : nullptr;
  const std::uint64_t tls_generation = tls ? tls->generation() : 0;
  std::array<const UpstreamEndpoint*, kMaxTried> tried;
  std::size_t tried_count = 0;
  std::unique_ptr<PooledConn> conn;
  for (int attempt = 0;;) {
    const std::shared_ptr<const EndpointSet> set = pool.set;
    const std::size_t pick =
        set->endpoints.empty() ? kNoEndpoint
                               : pick_endpoint(*set, pool.rr, limiter::steady_now_us(), tried.data(), tried_count);
    if (pick == kNoEndpoint || std::chrono::steady_clock::now() >= by) {
      if (out.why.empty()) out.why = set->endpoints.empty() ? "no address (the name does not resolve)" : "no endpoint left";
      co_return nullptr;
    }
    const EndpointPtr& ep = set->endpoints[pick];
    conn = take_idle(px, pool, up, ep.get(), tls_generation);
    const bool reused = conn != nullptr;
    if (!reused) {
      conn = std::make_unique<PooledConn>(w.ctx->get_executor(), w.timeouts);
      conn->endpoint = ep;
      const std::shared_ptr<const TlsClientProfile> profile = tls ? pool.tls : nullptr;
      std::optional<TlsFailure> failure;
      auto connect_by = deadline_after(up.connect_timeout);
      if (by < connect_by) connect_by = by;
      const beast::error_code ec = co_await open_connection(w, up, *conn, profile.get(), connect_by, failure);
      if (ec) {
        upstream_error(px, up, ec == beast::error::timeout ? UpstreamError::timeout : UpstreamError::connect);
        endpoint_failed(up, *conn->endpoint);
        out.why = failure ? "TLS " + failure->reason + ": " + failure->words : "connect: " + ec.message();
        if (tried_count < kMaxTried) tried[tried_count++] = ep.get();
        else co_return nullptr;
        continue;
      }
    }
    std::string head;
    head.reserve(line.size() + fields.size() + 64);
    head.append(line).append(fields);
    append_field(head, "Host", conn->endpoint->host_header);
    append_field(head, "Content-Length", std::to_string(body.size()));
    head.append("\r\n", 2);
    conn->stream.start(by);
    beast::error_code ec;
    co_await write_both(conn->stream, net::buffer(head), net::buffer(body.data(), body.size()), ec);
    conn->stream.end(ec);
    bool got_some = false;
    std::string_view why;
    if (!ec) ec = co_await read_final_head(*conn, *conn->head, by, got_some, why);
    if (ec) {
      // A pooled connection the server closed meanwhile: once more on a fresh one.
      if (reused && attempt == 0 && !got_some && ec != beast::error::timeout) {
        ++attempt;
        continue;
      }
      upstream_error(px, up, ec == beast::error::timeout ? UpstreamError::timeout : UpstreamError::reset);
      endpoint_failed(up, *conn->endpoint);
      out.why = !why.empty() ? std::string(why) : ec == beast::error::timeout ? "timed out" : ec.message();
      co_return nullptr;
    }
    break;
  }
  co_return conn;
}

// exchange's answer's body into out.body (at most max_body bytes), as its framing says; false
// with out.why said.
net::awaitable<bool> read_exchange_body(PooledConn& conn, const http1::BodyFraming& framing, Deadline by,
                                        std::size_t max_body, Exchange& out) {
  http1::ChunkedDecoder decoder(max_body);
  for (;;) {
    const std::string_view data = view(conn.buffer);
    bool done = false;
    if (framing.kind == http1::BodyKind::none) {
      done = true;
    } else if (framing.kind == http1::BodyKind::length) {
      if (framing.length > max_body) {
        out.why = "response body over " + std::to_string(max_body) + " bytes";
        co_return false;
      }
      const std::size_t want = static_cast<std::size_t>(framing.length) - out.body.size();
      const std::size_t used = std::min(want, data.size());
      out.body.append(data.substr(0, used));
      conn.buffer.consume(used);
      done = out.body.size() == framing.length;
    } else if (framing.kind == http1::BodyKind::chunked) {
      const std::size_t used = decoder.decode(data, [&](const char* p, std::size_t n) { out.body.append(p, n); });
      conn.buffer.consume(used);
      if (decoder.error() != http1::Error::none) {
        out.why = "malformed chunked body";
        co_return false;
      }
      done = decoder.done();
    } else if (framing.kind == http1::BodyKind::until_close) {
      out.body.append(data);
      conn.buffer.consume(data.size());
      if (out.body.size() > max_body) {
        out.why = "response body over " + std::to_string(max_body) + " bytes";
        co_return false;
      }
    } else {
      out.why = "unsupported Transfer-Encoding";
      co_return false;
    }
    if (done) break;
    const beast::error_code ec = co_await read_more(conn.stream, conn.buffer, by);
    if (closed(ec) && framing.kind == http1::BodyKind::until_close) break;
    if (ec) {
      out.why = ec == beast::error::timeout ? "timed out reading the body" : "body cut short";
      co_return false;
    }
  }
  co_return true;
}
}  // namespace

net::awaitable<Exchange> exchange(ProxyContext& px, Worker& w, WorkerTable& table, std::size_t index,
                                  std::string_view line, std::string_view fields, std::string_view body, Deadline by,
                                  std::size_t max_body) {
  Upstream& up = table.routes->upstreams()[index];
  Pool& pool = *table.pools[index];
  Exchange out;
  refresh_view(pool, up);
  std::unique_ptr<PooledConn> conn = co_await exchange_head(px, w, up, pool, line, fields, body, by, out);
  if (!conn) co_return out;
  const http1::ResponseHead& res = *conn->head;
  out.status = res.status;
  const http1::BodyFraming framing = http1::response_body(res, false);
  const bool keep = res.keep_alive && framing.kind != http1::BodyKind::until_close;
  conn->buffer.consume(res.head_bytes);  // the head's views are not used past this point
  if (!co_await read_exchange_body(*conn, framing, by, max_body, out)) co_return out;
  out.complete = true;
  if (keep) give_back(px, pool, std::move(conn));
  co_return out;
}

net::awaitable<void> keep_warm(ProxyContext& px, Worker& w, Upstream up, std::shared_ptr<Pool> kept) {
  Pool& pool = *kept;
  const std::size_t want = up.conf.min_idle_conns;
  if (want == 0) co_return;
  net::steady_timer timer(*w.ctx);
  pool.warm_timer = &timer;
  // A warm connection is replaced before it gets old enough for a request to find it stale.
  const auto max_age = up.idle_timeout * 3 / 4;
  std::uint32_t rr = 0;
  while (!w.draining && !pool.retired) {
    refresh_view(pool, up);
    const std::uint64_t generation = up.conf.https && pool.tls ? pool.tls->generation() : 0;
    // Close what a request could not use: too old, made under another profile, to an address
    // the name no longer gives, or closed (or written to) by the upstream meanwhile.
    const auto now = std::chrono::steady_clock::now();
    std::size_t fresh = 0;
    for (std::size_t i = pool.idle.size(); i-- > 0;) {
      PooledConn& c = *pool.idle[i];
      if (reusable(c, now, max_age, generation) && quiet(c.stream)) {
        ++fresh;
        continue;
      }
      pool.idle.erase(pool.idle.begin() + static_cast<std::ptrdiff_t>(i));
      px.deps.metrics.upstream_conns_discarded.Increment();
    }
    // Open what is missing, one at a time, each to the endpoint balancing picks now.
    bool failed = false;
    while (fresh < want && !w.draining && !pool.retired && !pool.set->endpoints.empty()) {
      const std::shared_ptr<const EndpointSet> set = pool.set;
      auto conn = std::make_unique<PooledConn>(w.ctx->get_executor(), w.timeouts);
      conn->endpoint = set->endpoints[pick_endpoint(*set, rr, limiter::steady_now_us(), nullptr, 0)];
      const std::shared_ptr<const TlsClientProfile> profile = up.conf.https ? pool.tls : nullptr;
      std::optional<TlsFailure> failure;
      const beast::error_code ec =
          co_await open_connection(w, up, *conn, profile.get(), deadline_after(up.connect_timeout), failure);
      if (ec) {
        upstream_error(px, up, ec == beast::error::timeout ? UpstreamError::timeout : UpstreamError::connect);
        endpoint_failed(up, *conn->endpoint);
        failed = true;
        break;
      }
      if (pool.idle.size() >= px.limits.max_idle_upstream_conns) break;
      conn->idle_since = std::chrono::steady_clock::now();
      pool.idle.push_back(std::move(conn));
      up.metrics->warm_opened->Increment();
      ++fresh;
    }
    // Every quarter second (a second after a failure), or at once when a request took one.
    timer.expires_after(failed ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(250));
    beast::error_code ec;
    co_await timer.async_wait(with(ec));
  }
  pool.warm_timer = nullptr;
}

}  // namespace tollgate::proxy

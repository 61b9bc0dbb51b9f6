#include "upstream.hpp"

#include <array>
#include <limits>
#include <optional>
#include <sys/socket.h>

#include "responses.hpp"

namespace tollgate::proxy {

namespace {

constexpr std::uint64_t kBufferedBodyMax = 1024 * 1024;  // larger or unknown-length bodies stream

// True when nothing has arrived on an idle connection since its last response ended: no byte (an
// unsolicited response, the surplus of a short Content-Length, a body sent to a HEAD) and no
// close or error (the upstream's keep-alive timeout). Such bytes answer no request, so the
// connection is closed instead of reused: reading them as the next request's response would hand
// one client another's answer. One non-blocking peek, only when a connection is taken for reuse.
bool quiet(tcp::socket& s) {
  char c;
  const ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Interim (1xx) responses accepted before the final one; more is an upstream failure.
constexpr int kMaxInterimResponses = 8;

void upstream_error(ProxyContext& px, Upstream& up, UpstreamError e) {
  px.deps.metrics.count(e);
  px.deps.metrics.upstream(up.conf.name).errors[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed);
}

// Before any of the response went out: 504 for a deadline, 502 for anything else, counted.
net::awaitable<bool> upstream_failed(ProxyContext& px, TimedSocket& client, unsigned version, bool keep, Upstream& up,
                                     beast::error_code ec, UpstreamError kind, AccessRecord& rec,
                                     std::string_view why = {}) {
  const bool timeout = ec == beast::error::timeout;
  upstream_error(px, up, timeout ? UpstreamError::timeout : kind);
  rec.status = timeout ? 504 : 502;
  const char* code = timeout ? "upstream_timeout" : kind == UpstreamError::connect ? "upstream_unavailable" : "upstream_failed";
  std::string detail = "upstream '" + up.conf.name + "': " + (kind == UpstreamError::connect ? "connect: " : "");
  if (why.empty()) detail += ec.message();
  else detail.append(why.data(), why.size());
  const OwnAnswer answer = error_answer(timeout ? http::status::gateway_timeout : http::status::bad_gateway, code, detail);
  co_return co_await send_answer(client, version, keep, answer, milliseconds(px.limits.body_timeout_ms));
}

// An idle connection is reused only if it is young enough and nothing arrived on it while idle.
std::unique_ptr<PooledConn> take_idle(ProxyContext& px, Pool& pool, const Upstream& up) {
  const auto now = std::chrono::steady_clock::now();
  while (!pool.idle.empty()) {
    auto c = std::move(pool.idle.back());
    pool.idle.pop_back();
    if (now - c->idle_since < up.idle_timeout && c->stream.socket().is_open() && quiet(c->stream.socket())) return c;
    px.deps.metrics.upstream_conns_discarded.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

// Called only when a response ended exactly at its message boundary; a byte already read past it
// belongs to no request, so such a connection is closed.
void give_back(ProxyContext& px, Pool& pool, std::unique_ptr<PooledConn> c) {
  if (c->buffer.size() != 0) {
    px.deps.metrics.upstream_conns_discarded.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (pool.idle.size() >= px.limits.max_idle_upstream_conns) return;
  c->idle_since = std::chrono::steady_clock::now();
  pool.idle.push_back(std::move(c));
}

// Reads response heads until the final one. Interim responses (1xx) carry no body and answer
// nothing the client asked the upstream for (the gateway answers `Expect: 100-continue` itself
// and strips `Upgrade`), so they are consumed; the final response that follows is this
// request's. An unrequested 101, a status outside 100-599 or too many interim responses are an
// upstream failure: `why` says which. One deadline for all of them.
net::awaitable<beast::error_code> read_final_head(PooledConn& conn, std::optional<http::response_parser<http::string_body>>& parser,
                                                  bool head_request, Deadline deadline, bool& got_some,
                                                  std::string_view& why) {
  for (int interim = 0;; ++interim) {
    parser.emplace();
    parser->header_limit(64 * 1024);
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (head_request) parser->skip(true);
    beast::error_code ec = co_await parse_until(conn.stream, conn.buffer, *parser,
                                                [](auto& p) { return p.is_header_done(); }, deadline);
    got_some = got_some || parser->got_some();
    if (ec) co_return ec;
    const unsigned status = parser->get().result_int();
    if (status >= 200 && status <= 599) co_return ec;
    if (status == 101) why = "unrequested 101 Switching Protocols";
    else if (status < 100 || status > 599) why = "invalid response status";
    else if (interim == kMaxInterimResponses) why = "too many interim (1xx) responses";
    if (!why.empty()) co_return http::error::bad_status;
  }
}

net::awaitable<bool> relay(ProxyContext& px, TimedSocket& client, unsigned version, bool keep,
                           std::unique_ptr<PooledConn> conn, Pool& pool, Upstream& up,
                           http::response_parser<http::string_body>& header_parser, RateLimitFields fields);

}  // namespace

net::awaitable<bool> forward(ProxyContext& px, Worker& w, TimedSocket& client,
                             http::request<http::string_body> req, const std::string& client_ip, std::size_t upstream,
                             RateLimitFields fields, AccessRecord& rec) {
  Upstream& up = px.routes.upstreams()[upstream];
  Pool& pool = w.pools[upstream];
  const unsigned version = req.version();
  bool keep = req.keep_alive() && !w.draining;  // draining: this answer closes the connection
  const bool head_request = req.method() == http::verb::head;

  // Rewrite the request in place for the upstream hop.
  const std::string original_host(req[http::field::host]);
  strip_hop_by_hop(req, false);
  req.erase(http::field::expect);  // the body is already here
  {
    std::string xff(req["X-Forwarded-For"]);
    req.set("X-Forwarded-For", xff.empty() ? client_ip : xff + ", " + client_ip);
  }
  req.set("X-Forwarded-Proto", "http");
  if (!original_host.empty()) req.set("X-Forwarded-Host", original_host);
  req.set(http::field::host, up.host_header);
  req.version(11);
  req.keep_alive(true);
  req.prepare_payload();  // Content-Length from the body actually read (never the client's framing)

  std::unique_ptr<PooledConn> conn;
  std::optional<http::response_parser<http::string_body>> parser;
  const std::string head = request_head(req);
  const std::array<net::const_buffer, 2> out{net::buffer(head), net::buffer(req.body())};
  std::chrono::steady_clock::time_point sent_at;
  for (int attempt = 0;; ++attempt) {
    beast::error_code ec;
    conn = take_idle(px, pool, up);
    const bool reused = conn != nullptr;
    if (!reused) {
      conn = std::make_unique<PooledConn>(w.ctx->get_executor(), w.timeouts);
      conn->stream.start(deadline_after(up.connect_timeout));
      co_await net::async_connect(conn->stream.socket(), up.endpoints, with(ec));
      conn->stream.end(ec);
      if (ec) co_return co_await upstream_failed(px, client, version, keep, up, ec, UpstreamError::connect, rec);
      conn->stream.socket().set_option(tcp::no_delay(true), ec);
      ec = {};
    }
    sent_at = std::chrono::steady_clock::now();
    conn->stream.start(sent_at + up.response_timeout);
    const std::size_t written = co_await net::async_write(conn->stream, out, with(ec));
    conn->stream.end(ec);
    bool retry = false;
    std::string_view why;
    if (!ec) {
      bool got_some = false;
      ec = co_await read_final_head(*conn, parser, head_request, sent_at + up.response_timeout, got_some, why);
      // A reused connection that failed before any response byte (the upstream closed it just
      // as the request went out): send once more on a fresh connection if the method may be
      // repeated. The upstream may then see the request twice on one permit, as with nginx's
      // proxy_next_upstream; non-idempotent requests get 502 instead.
      retry = ec && reused && attempt == 0 && !got_some && ec != beast::error::timeout && is_idempotent(req.method());
    } else {
      // Nothing reached the upstream unless some bytes were written; then only idempotent methods.
      retry = reused && attempt == 0 && ec != beast::error::timeout && (written == 0 || is_idempotent(req.method()));
    }
    if (!ec) break;
    if (retry) {
      px.deps.metrics.upstream_retries.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    co_return co_await upstream_failed(px, client, version, keep, up, ec, UpstreamError::reset, rec, why);
  }

  px.deps.metrics.upstream(up.conf.name)
      .latency.observe_us(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - sent_at)
                              .count());
  auto& res = parser->get();
  const int status = res.result_int();
  rec.status = rec.upstream_status = status;
  const bool no_body = head_request || status == 204 || status == 304;
  // A 204 has no body whatever its fields say (the parser read none): a Content-Length on it
  // would make some clients wait for bytes that never come.
  if (status == 204) res.erase(http::field::content_length);
  const auto length = no_body ? boost::optional<std::uint64_t>(0) : parser->content_length();
  if (length && *length <= kBufferedBodyMax && conn->buffer.size() >= *length) {
    // The common case: a small body that came with its head. Parse it from the buffer (no I/O)
    // and send head and body in one write. A body still on its way is relayed as it arrives.
    beast::error_code ec;
    if (!parser->is_done()) {
      parser->eager(true);
      ec = co_await parse_until(conn->stream, conn->buffer, *parser, [](auto& p) { return p.is_done(); },
                                deadline_after(up.response_timeout));
      if (ec) co_return co_await upstream_failed(px, client, version, keep, up, ec, UpstreamError::reset, rec);
    }
    const bool upstream_keep = res.keep_alive();
    strip_hop_by_hop(res, false);
    res.version(version);
    res.keep_alive(keep);
    if (!fields.policy_header.empty()) {
      res.set("RateLimit-Policy", fields.policy_header);
      res.set("RateLimit", fields.limit_header);
    }
    const std::string rhead = response_head(res);
    const std::array<net::const_buffer, 2> rout{net::buffer(rhead),
                                                no_body ? net::const_buffer() : net::buffer(res.body())};
    if (upstream_keep) give_back(px, pool, std::move(conn));
    client.start(deadline_after(milliseconds(px.limits.body_timeout_ms)));
    co_await net::async_write(client, rout, with(ec));
    client.end(ec);
    co_return !ec && keep;
  }
  co_return co_await relay(px, client, version, keep, std::move(conn), pool, up, *parser, fields);
}

// A body that is large, chunked, delimited by the close, or still arriving: relayed piece by
// piece as it comes (whatever one read brings, never waiting to fill a buffer), never buffered
// whole. The response timeout applies to each read, so a slow but live stream goes on.
namespace {

net::awaitable<bool> relay(ProxyContext& px, TimedSocket& client, unsigned version, bool keep,
                           std::unique_ptr<PooledConn> conn, Pool& pool, Upstream& up,
                           http::response_parser<http::string_body>& header_parser, RateLimitFields fields) {
  // Same header, no body read yet: continue with a parser that hands the body out in pieces.
  http::response_parser<http::buffer_body> parser{std::move(header_parser)};
  auto& res = parser.get();
  const bool upstream_keep = res.keep_alive();
  strip_hop_by_hop(res, true);
  if (!res.chunked() && !res.has_content_length()) {
    // Body delimited by the upstream closing: re-frame as chunked, or close after it for HTTP/1.0.
    if (version == 11) res.chunked(true);
    else keep = false;
  }
  if (version == 10 && res.chunked()) {
    res.chunked(false);
    keep = false;
  }
  res.version(version);
  res.keep_alive(keep);
  if (!fields.policy_header.empty()) {
    res.set("RateLimit-Policy", fields.policy_header);
    res.set("RateLimit", fields.limit_header);
  }
  beast::error_code ec;
  http::response_serializer<http::buffer_body> sr{res};
  char buf[16 * 1024];
  bool upstream_ok = true;
  for (;;) {
    if (!parser.is_done()) {
      res.body().data = buf;
      res.body().size = sizeof buf;
      conn->stream.start(deadline_after(up.response_timeout));
      co_await http::async_read_some(conn->stream, conn->buffer, parser, with(ec));
      conn->stream.end(ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        upstream_ok = false;
        upstream_error(px, up, ec == beast::error::timeout ? UpstreamError::timeout : UpstreamError::reset);
        break;  // headers already went out: all we can do is close the client connection
      }
      const std::size_t got = sizeof buf - res.body().size;
      // Nothing for the client yet (the read brought only a chunk header): read on. An empty
      // piece must never reach the serializer: chunked, it would be the last-chunk marker.
      if (got == 0 && !parser.is_done()) continue;
      res.body().size = got;
      res.body().data = got > 0 ? buf : nullptr;
      res.body().more = !parser.is_done();
    } else {
      res.body().data = nullptr;
      res.body().more = false;
    }
    client.start(deadline_after(milliseconds(px.limits.body_timeout_ms)));
    co_await http::async_write(client, sr, with(ec));
    client.end(ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return false;
    if (sr.is_done()) break;
  }
  if (!upstream_ok) co_return false;
  if (upstream_keep && parser.is_done()) give_back(px, pool, std::move(conn));
  co_return keep;
}

}  // namespace

}  // namespace tollgate::proxy

// The only translation unit of the gateway that includes Beast (compile time on 2 cores).
// Shape: one coroutine per client connection; per request: read (with header/body limits and
// timeouts) -> route -> throttle (store decision, hold on a steady_timer) -> forward over a pooled
// keep-alive upstream connection -> relay the response without buffering its body.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/proxy/proxy_server.hpp"

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <iostream>
#include <unordered_set>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/client_key.hpp"
#include "tollgate/proxy/request_target.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

constexpr auto kAwait = net::use_awaitable;
inline auto with(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

using reuse_port = net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

tcp::endpoint make_endpoint(const config::Endpoint& e) {
  boost::system::error_code ec;
  auto addr = net::ip::make_address(e.host == "localhost" ? "127.0.0.1" : e.host, ec);
  if (ec) throw std::runtime_error("listen address '" + e.host + "' is not an IP address");
  return {addr, e.port};
}

void open_acceptor(tcp::acceptor& acc, const tcp::endpoint& ep, bool share_port) {
  acc.open(ep.protocol());
  acc.set_option(net::socket_base::reuse_address(true));
  if (share_port) acc.set_option(reuse_port(true));
  boost::system::error_code ec;
  acc.bind(ep, ec);
  if (ec) throw std::runtime_error("cannot bind " + ep.address().to_string() + ":" + std::to_string(ep.port()) + ": " + ec.message());
  acc.listen(net::socket_base::max_listen_connections);
}

bool is_idempotent(http::verb v) {
  switch (v) {
    case http::verb::get: case http::verb::head: case http::verb::options:
    case http::verb::put: case http::verb::delete_: case http::verb::trace:
      return true;
    default:
      return false;
  }
}

// Hop-by-hop headers (RFC 9110 7.6.1) plus any header the Connection field names. One pass over
// the fields erases what is there by its position (no lookup by name); most messages carry only
// `Connection: keep-alive`, and then nothing else is looked up.
template <class Fields>
void strip_hop_by_hop(Fields& f, bool keep_transfer_encoding) {
  std::string named;  // the Connection fields' values: the other fields they name go too
  for (auto it = f.begin(); it != f.end();) {
    bool hop = false;
    switch (it->name()) {
      case http::field::connection:
        named.append(it->value().data(), it->value().size()).push_back(',');
        hop = true;
        break;
      case http::field::keep_alive: case http::field::proxy_connection: case http::field::te:
      case http::field::trailer: case http::field::upgrade: case http::field::proxy_authorization:
      case http::field::proxy_authenticate:
        hop = true;
        break;
      case http::field::transfer_encoding:
        hop = !keep_transfer_encoding;
        break;
      default:
        break;
    }
    it = hop ? f.erase(it) : std::next(it);
  }
  if (named.empty()) return;
  for (auto const& token : http::token_list{named}) {
    // "close" names no field, and "keep-alive" one that is gone already.
    if (beast::iequals(token, "close") || beast::iequals(token, "keep-alive")) continue;
    f.erase(token);
  }
}

constexpr std::size_t kReadChunk = 16 * 1024;
constexpr std::uint64_t kBufferedBodyMax = 1024 * 1024;  // larger or unknown-length bodies stream

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline deadline_after(milliseconds timeout) { return std::chrono::steady_clock::now() + timeout; }

// Feeds the bytes already buffered to the parser and reads more only when it needs them, until
// `done(parser)` holds. Parsing straight from the buffer saves an async round trip per message.
// One deadline for the whole part, not one per read: a peer trickling a byte at a time
// (slowloris) is cut off when the part's time is up.
template <class Parser, class Done>
net::awaitable<beast::error_code> parse_until(beast::tcp_stream& stream, beast::flat_buffer& buffer, Parser& p,
                                              Done done, Deadline deadline) {
  beast::error_code ec;
  for (;;) {
    if (buffer.size() > 0) {
      const std::size_t used = p.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) ec = {};
      if (ec) co_return ec;
      if (done(p)) co_return ec;
      if (used > 0 && buffer.size() > 0) continue;
    }
    stream.expires_at(deadline);
    const std::size_t n = co_await stream.async_read_some(buffer.prepare(kReadChunk), with(ec));
    if (ec == net::error::eof && p.got_some()) {
      p.put_eof(ec);  // a body delimited by the peer closing; otherwise partial_message
      if (!ec && done(p)) co_return ec;
      if (!ec) ec = http::error::partial_message;
    }
    if (ec) co_return ec;
    buffer.commit(n);
  }
}

// Writes a message head ("start line\r\n" + fields + "\r\n") the simple way: one string, so the
// head and a buffered body leave in one gathered write.
template <class Fields>
void append_fields(std::string& out, const Fields& fields) {
  for (const auto& f : fields) {
    out.append(f.name_string().data(), f.name_string().size());
    out.append(": ", 2);
    out.append(f.value().data(), f.value().size());
    out.append("\r\n", 2);
  }
  out.append("\r\n", 2);
}

std::string request_head(const http::request<http::string_body>& req) {
  std::string out;
  out.reserve(512);
  const auto method = req.method_string();
  out.append(method.data(), method.size());
  out.push_back(' ');
  out.append(req.target().data(), req.target().size());
  out.append(" HTTP/1.1\r\n", 11);
  append_fields(out, req.base());
  return out;
}

std::string response_head(const http::response<http::string_body>& res) {
  std::string out;
  out.reserve(512);
  out.append(res.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ", 9);
  out.append(std::to_string(res.result_int()));
  out.push_back(' ');
  const auto reason = res.reason().empty() ? http::obsolete_reason(res.result()) : res.reason();
  out.append(reason.data(), reason.size());
  out.append("\r\n", 2);
  append_fields(out, res.base());
  return out;
}

struct Upstream {
  config::UpstreamConfig conf;
  std::vector<tcp::endpoint> endpoints;
  std::string host_header;
  milliseconds connect_timeout;
  milliseconds response_timeout;
  milliseconds idle_timeout;  // a pooled connection idle longer is closed, not reused
};

struct Route {
  std::string prefix;
  std::size_t upstream;
};

struct PooledConn {
  explicit PooledConn(net::any_io_executor ex) : stream(ex) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::chrono::steady_clock::time_point idle_since;
};

// Idle keep-alive connections to one upstream, owned by one thread: no locks.
struct Pool {
  std::vector<std::unique_ptr<PooledConn>> idle;
};

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

// Fields a parser added after the head (a chunked body's trailer section): they were never part of
// the request's header and must not become headers upstream (an X-Forwarded-For or a Host could be
// smuggled in that way).
template <class Fields>
void drop_trailers(Fields& fields, std::size_t head_fields) {
  auto it = fields.begin();
  for (std::size_t i = 0; i < head_fields && it != fields.end(); ++i) ++it;
  while (it != fields.end()) it = fields.erase(it);
}

}  // namespace

struct ProxyServer::Impl {
  struct Worker {
    net::io_context* ctx;
    std::unique_ptr<tcp::acceptor> acceptor;
    std::vector<Pool> pools;
    std::unordered_set<beast::tcp_stream*> idle;  // connections waiting for their next request
    bool draining = false;                        // set on this worker's own thread
    int spare_fd = -1;  // held back so that a 429 can still be sent when descriptors run out
  };

  ProxyDeps deps;
  std::vector<Worker> workers;
  std::vector<Upstream> upstreams;
  std::vector<Route> routes;  // longest prefix first
  std::uint16_t bound_port = 0;
  const config::ProxyLimits& limits;
  TrustedProxies trusted;
  MissingKey missing_key = MissingKey::anonymous;

  Impl(std::vector<net::io_context*> ctxs, ProxyDeps d) : deps(d), limits(d.config.proxy) {
    for (auto* c : ctxs) workers.push_back(Worker{c, nullptr, {}, {}, false, ::open("/dev/null", O_RDONLY | O_CLOEXEC)});
    trusted = trusted_proxies_from(limits.trusted_proxies);
    missing_key = d.config.limits.missing_key == "reject" ? MissingKey::reject : MissingKey::anonymous;
  }
  ~Impl() {
    for (auto& w : workers)
      if (w.spare_fd >= 0) ::close(w.spare_fd);
  }

  // Per-client parts of a request's checks (issue 7): keyed bucket, quotas, maxShare. Returns an
  // error detail when the request cannot be keyed (a keyBy header missing or too long): 400.
  std::optional<std::string> add_client_checks(store::AcquireRequest& areq, std::string& bucket_key,
                                               const config::Rule& rule, const config::Rule* channel,
                                               const http::request<http::string_body>& req, std::string_view path,
                                               const std::string& peer) {
    std::optional<std::string> address;  // the client's, resolved once when a spec needs it
    std::string key;
    auto derive = [&](const config::KeySpec& spec) -> std::optional<std::string> {
      using Kind = config::KeySpec::Kind;
      if ((spec.kind == Kind::client_ip || spec.kind == Kind::client_ip_path) && !address) {
        std::string xff;
        if (!trusted.empty()) {
          for (auto [it, end] = req.equal_range("X-Forwarded-For"); it != end; ++it) {
            if (!xff.empty()) xff += ',';
            xff.append(it->value().data(), it->value().size());
          }
        }
        address = client_address(peer, xff, trusted);
      }
      std::optional<std::string_view> header;
      if (spec.kind == Kind::header) {
        auto it = req.find(spec.header);
        if (it != req.end()) header = std::string_view(it->value().data(), it->value().size());
      }
      switch (client_key(spec, address ? std::string_view(*address) : std::string_view(), path, header, missing_key, key)) {
        case KeyResult::ok: return std::nullopt;
        case KeyResult::missing: return "header " + spec.header + " is required (it keys a rate limit)";
        case KeyResult::too_long:
          return "header " + spec.header + " is longer than " + std::to_string(kMaxHeaderKey) + " bytes";
      }
      return std::nullopt;
    };
    if (rule.has_bucket && rule.key_by.kind != config::KeySpec::Kind::none) {
      if (auto bad = derive(rule.key_by)) return bad;
      bucket_key = "c:" + std::to_string(rule.config_id) + ":" + key;
      areq.bucket.name = bucket_key;
      areq.per_client_bucket = true;
    }
    for (const config::Rule* r : {&rule, channel}) {
      if (r == nullptr) continue;
      for (const config::Quota& q : r->quotas) {
        if (auto bad = derive(q.key_by)) return bad;
        areq.quotas.push_back({"q:" + std::to_string(q.quota_id) + ":" + key, q.params(),
                               q.key_by.kind == config::KeySpec::Kind::none});
      }
    }
    if (rule.has_bucket && rule.max_share) {
      if (auto bad = derive(rule.share_key)) return bad;
      areq.share = store::ShareRef{"s:" + std::to_string(rule.config_id) + ":" + key, rule.max_held_per_client};
    }
    return std::nullopt;
  }

  void resolve_upstreams() {
    net::io_context tmp;
    tcp::resolver resolver(tmp);
    for (const auto& u : deps.config.upstreams) {
      Upstream up;
      up.conf = u;
      boost::system::error_code ec;
      auto results = resolver.resolve(u.host, std::to_string(u.port), ec);
      if (ec) throw std::runtime_error("upstream '" + u.name + "' (" + u.url + "): cannot resolve: " + ec.message());
      for (const auto& r : results) up.endpoints.push_back(r.endpoint());
      up.host_header = u.port == 80 ? u.host : u.host + ":" + std::to_string(u.port);
      up.connect_timeout = milliseconds(u.connect_timeout_ms ? u.connect_timeout_ms : limits.connect_timeout_ms);
      up.response_timeout = milliseconds(u.response_timeout_ms ? u.response_timeout_ms : limits.response_timeout_ms);
      up.idle_timeout = milliseconds(u.idle_timeout_ms ? u.idle_timeout_ms : limits.upstream_idle_timeout_ms);
      upstreams.push_back(std::move(up));
    }
    for (const auto& r : deps.config.routes) {
      std::size_t idx = 0;
      while (upstreams[idx].conf.name != r.upstream) ++idx;
      routes.push_back({r.prefix, idx});
    }
    std::stable_sort(routes.begin(), routes.end(),
                     [](const Route& a, const Route& b) { return a.prefix.size() > b.prefix.size(); });
  }

  const Route* route_for(std::string_view path) const {
    for (const auto& r : routes)
      if (path.starts_with(r.prefix)) return &r;
    return nullptr;
  }

  void start() {
    resolve_upstreams();
    tcp::endpoint ep = make_endpoint(deps.config.listen);
    for (std::size_t i = 0; i < workers.size(); ++i) {
      auto& w = workers[i];
      w.pools.resize(upstreams.size());
      w.acceptor = std::make_unique<tcp::acceptor>(*w.ctx);
      open_acceptor(*w.acceptor, ep, workers.size() > 1);
      if (i == 0) {
        bound_port = w.acceptor->local_endpoint().port();
        ep.port(bound_port);  // port 0: the others join the port the first one got
      }
      net::co_spawn(*w.ctx, accept_loop(w), net::detached);
    }
  }

  net::awaitable<void> accept_loop(Worker& w) {
    for (;;) {
      beast::error_code ec;
      tcp::socket sock = co_await w.acceptor->async_accept(with(ec));
      if (ec) {
        if (ec == net::error::operation_aborted || !w.acceptor->is_open()) co_return;
        // Out of file descriptors: answer the waiting clients 429 through the spare descriptor
        // rather than leave them hanging in the backlog, then back off briefly instead of spinning.
        if (ec == net::error::no_descriptors || ec.value() == ENFILE) refuse_with_spare(w);
        net::steady_timer t(*w.ctx, 50ms);
        co_await t.async_wait(with(ec));
        continue;
      }
      sock.set_option(tcp::no_delay(true), ec);
      if (deps.metrics.connections.load(std::memory_order_relaxed) >= static_cast<std::int64_t>(limits.max_connections)) {
        deps.metrics.connections_refused.fetch_add(1, std::memory_order_relaxed);
        net::co_spawn(*w.ctx, refuse(std::move(sock)), net::detached);
        continue;
      }
      net::co_spawn(*w.ctx, session(w, std::move(sock)), net::detached);
    }
  }

  static constexpr std::string_view kBusy =
      "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: 69\r\n\r\n"
      "{\"error\":\"too_many_connections\",\"detail\":\"connection limit reached\"}\n";

  // At EMFILE: give up the spare descriptor, accept the waiting clients one by one, answer each
  // the canned 429 (a few bytes: they fit the socket buffer, nothing waits) and close it, then
  // take the spare again.
  void refuse_with_spare(Worker& w) {
    if (w.spare_fd < 0) return;
    ::close(w.spare_fd);
    w.spare_fd = -1;
    for (int i = 0; i < 64; ++i) {
      const int fd = ::accept4(w.acceptor->native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      (void)!::send(fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
      deps.metrics.connections_refused.fetch_add(1, std::memory_order_relaxed);
    }
    w.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }

  // Over proxy.max_connections: a canned 429 without reading the request, then close.
  static net::awaitable<void> refuse(tcp::socket sock) {
    beast::error_code ec;
    co_await net::async_write(sock, net::buffer(kBusy.data(), kBusy.size()), with(ec));
    sock.shutdown(tcp::socket::shutdown_both, ec);
  }

  // ---- client side -------------------------------------------------------------------------

  template <class Body>
  static net::awaitable<bool> write_response(beast::tcp_stream& stream, http::response<Body>& res) {
    beast::error_code ec;
    res.prepare_payload();
    co_await http::async_write(stream, res, with(ec));
    co_return !ec;
  }

  net::awaitable<bool> send_error(beast::tcp_stream& stream, unsigned version, bool keep, http::status status,
                                  std::string_view code, std::string_view detail) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, "application/json");
    res.keep_alive(keep);
    res.body() = error_body(code, detail);
    stream.expires_after(milliseconds(limits.body_timeout_ms));
    const bool ok = co_await write_response(stream, res);
    co_return ok && keep;
  }

  net::awaitable<void> session(Worker& w, tcp::socket sock) {
    deps.metrics.connections.fetch_add(1, std::memory_order_relaxed);
    std::string client_ip;
    {
      boost::system::error_code ec;
      auto ep = sock.remote_endpoint(ec);
      if (!ec) client_ip = ep.address().to_string();
    }
    beast::tcp_stream stream(std::move(sock));
    beast::flat_buffer buffer;
    for (;;) {
      beast::error_code ec;
      if (buffer.size() == 0) {
        if (w.draining) break;  // shutting down: no new request on this connection
        // Keep-alive idle: wait for the first byte of the next request. 1 KiB, as nginx's
        // client_header_buffer_size: most requests fit, and an idle or held connection keeps
        // no more than that (larger requests continue in bigger reads).
        stream.expires_after(milliseconds(limits.idle_timeout_ms));
        w.idle.insert(&stream);
        const std::size_t n = co_await stream.async_read_some(buffer.prepare(1024), with(ec));
        w.idle.erase(&stream);
        if (ec) break;
        buffer.commit(n);
      }
      http::request_parser<http::string_body> parser;
      parser.header_limit(limits.max_header_bytes);
      parser.body_limit(limits.max_body_bytes);
      ec = co_await parse_until(stream, buffer, parser, [](auto& p) { return p.is_header_done(); },
                                deadline_after(milliseconds(limits.header_timeout_ms)));
      if (ec) {
        co_await answer_read_error(stream, ec);
        break;
      }
      if (!parser.is_done()) {
        if (parser.get()[http::field::expect] == "100-continue" && buffer.size() == 0) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          stream.expires_after(milliseconds(limits.body_timeout_ms));
          co_await net::async_write(stream, net::buffer(kContinue.data(), kContinue.size()), with(ec));
          if (ec) break;
        }
        const bool chunked = parser.chunked();
        std::size_t head_fields = 0;
        if (chunked) head_fields = static_cast<std::size_t>(std::distance(parser.get().begin(), parser.get().end()));
        parser.eager(true);
        ec = co_await parse_until(stream, buffer, parser, [](auto& p) { return p.is_done(); },
                                  deadline_after(milliseconds(limits.body_timeout_ms)));
        if (ec) {
          co_await answer_read_error(stream, ec);
          break;
        }
        if (chunked) drop_trailers(parser.get(), head_fields);
      }
      http::request<http::string_body> req = parser.release();
      const bool keep = co_await handle(w, stream, buffer, std::move(req), client_ip);
      if (!keep) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    deps.metrics.connections.fetch_sub(1, std::memory_order_relaxed);
  }

  net::awaitable<void> answer_read_error(beast::tcp_stream& stream, beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted)
      co_return;  // the client went away: nothing to answer
    deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
    if (ec == beast::error::timeout) {
      co_return;  // the stream closed the socket at the deadline: a slow client gets no answer
    } else if (ec == http::error::header_limit) {
      co_await send_error(stream, 11, false, http::status::request_header_fields_too_large, "headers_too_large",
                          "request headers exceed " + std::to_string(limits.max_header_bytes) + " bytes");
    } else if (ec == http::error::body_limit) {
      co_await send_error(stream, 11, false, http::status::payload_too_large, "body_too_large",
                          "request body exceeds " + std::to_string(limits.max_body_bytes) + " bytes");
    } else {
      co_await send_error(stream, 11, false, http::status::bad_request, "bad_request", ec.message());
    }
  }

  // The 429 and 503 answers live in coroutines of their own, so a held request's frame does not
  // carry a response object it never uses (memory per held request).
  net::awaitable<bool> send_rejection(beast::tcp_stream& stream, unsigned version, bool keep, std::string body,
                                      limiter::Micros retry_after_us, const std::string& policy, const std::string& limit) {
    http::response<http::string_body> res{http::status::too_many_requests, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::retry_after, std::to_string(ceil_seconds(retry_after_us)));
    res.set("RateLimit-Policy", policy);
    res.set("RateLimit", limit);
    res.keep_alive(keep);
    res.body() = std::move(body);
    stream.expires_after(milliseconds(limits.body_timeout_ms));
    const bool ok = co_await write_response(stream, res);
    co_return ok && keep;
  }

  net::awaitable<bool> send_not_allowed(beast::tcp_stream& stream, unsigned version, bool keep) {
    http::response<http::string_body> res{http::status::method_not_allowed, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::allow, limits.allow_trace ? "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"
                                                   : "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS");
    res.keep_alive(keep);
    res.body() = error_body("method_not_allowed", "the gateway forwards neither CONNECT nor (unless proxy.allow_trace) TRACE");
    stream.expires_after(milliseconds(limits.body_timeout_ms));
    const bool ok = co_await write_response(stream, res);
    co_return ok && keep;
  }

  net::awaitable<bool> send_unavailable(beast::tcp_stream& stream, unsigned version, bool keep) {
    http::response<http::string_body> res{http::status::service_unavailable, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::retry_after, "1");
    res.keep_alive(keep);
    res.body() = error_body("limiter_unavailable", "the shared rate-limit store is unavailable and the policy is fail_closed");
    stream.expires_after(milliseconds(limits.body_timeout_ms));
    const bool ok = co_await write_response(stream, res);
    co_return ok && keep;
  }

  // Returns whether the client connection stays open.
  // Writes the access log line when the request is done, whichever way it ended.
  struct LogOnExit {
    AccessLog* log;
    AccessRecord rec;
    std::string method, path, bucket, policy;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~LogOnExit() {
      if (!log) return;
      rec.method = method;
      rec.path = path;
      rec.bucket = bucket;
      rec.policy = policy;
      rec.duration_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      log->write(rec);
    }
  };

  net::awaitable<bool> handle(Worker& w, beast::tcp_stream& stream, beast::flat_buffer& buffer,
                              http::request<http::string_body> req, const std::string& client_ip) {
    const unsigned version = req.version();
    const bool keep = req.keep_alive() && !w.draining;  // draining: answer, then close
    // Routes and rules see the normalised path, and the upstream gets that path: what is limited
    // is what the upstream acts on, however the client spelled it.
    RequestTarget target;
    parse_target(req.target(), target);
    LogOnExit access{deps.access_log && deps.access_log->enabled() ? deps.access_log : nullptr, {}, {}, {}, {}, {}};
    if (access.log) {
      access.rec.client = client_ip;
      access.method = std::string(req.method_string());
      access.path = std::string(target.error == TargetError::none ? target.path : path_of(req.target()));
    }
    AccessRecord& rec = access.rec;
    if (auto te = req[http::field::transfer_encoding]; !te.empty() && !beast::iequals(te, "chunked")) {
      // Only chunked framing is understood; anything else could be read differently upstream.
      deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
      rec.status = 501;
      co_return co_await send_error(stream, version, false, http::status::not_implemented, "unsupported_transfer_encoding",
                                    "only Transfer-Encoding: chunked is accepted");
    }
    if (target.error != TargetError::none) {
      deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
      rec.status = 400;
      co_return co_await send_error(stream, version, false, http::status::bad_request, "bad_target",
                                    target_error_detail(target.error));
    }
    // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; an HTTP/1.0 one at most one. Which
    // of two would the upstream believe?
    if (const auto hosts = req.count(http::field::host); hosts > 1 || (hosts == 0 && version >= 11)) {
      deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
      rec.status = 400;
      co_return co_await send_error(stream, version, false, http::status::bad_request, "bad_host",
                                    hosts > 1 ? "more than one Host header" : "an HTTP/1.1 request needs a Host header");
    }
    // CONNECT would ask for a tunnel the gateway does not make; TRACE echoes the request with its
    // credentials (cross-site tracing) unless the operator allows it.
    if (req.method() == http::verb::connect || (req.method() == http::verb::trace && !limits.allow_trace)) {
      deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
      rec.status = 405;
      co_return co_await send_not_allowed(stream, version, keep);
    }
    if (target.rewritten) req.target(std::string(target.path) + std::string(target.query));
    const std::string_view path = target.path;
    const std::string_view match_path = target.match;
    const Route* route = route_for(path);
    if (route == nullptr) {
      deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
      rec.status = 404;
      co_return co_await send_error(stream, version, keep, http::status::not_found, "no_route",
                                    "no route for this path");
    }

    std::string policy_header, limit_header;
    req.erase("X-Tollgate-Shadow");  // only the gateway says that
    const config::SwitchMode global = deps.switch_state.mode();
    if (global == config::SwitchMode::off) {
      deps.metrics.count(Outcome::bypassed);
      rec.outcome = "bypassed";
    } else {
      const std::shared_ptr<const config::Snapshot> snap = deps.snapshots.get();
      const config::Rule* rule = snap ? snap->match(match_path) : nullptr;
      if (rule == nullptr) {
        deps.metrics.count(Outcome::unmatched);
        rec.outcome = "unmatched";
      } else if ((global == config::SwitchMode::shadow ? global : rule->mode) == config::SwitchMode::off) {
        deps.metrics.count(Outcome::bypassed);  // this rule is switched off by itself
        deps.metrics.bucket(rule->bucket).outcomes[static_cast<int>(Outcome::bypassed)].fetch_add(1);
        rec.outcome = "bypassed";
      } else {
        const bool shadow = global == config::SwitchMode::shadow || rule->mode == config::SwitchMode::shadow;
        if (access.log) access.bucket = rule->bucket;
        const config::Rule* channel = snap->channel_of(*rule);
        BucketMetrics& bm = deps.metrics.bucket(rule->bucket);
        // Too many requests already wait (globally or on this bucket): only an immediate permit
        // will do, so nothing is reserved for a request that could not be held.
        const bool capped =
            deps.metrics.held.load(std::memory_order_relaxed) >= static_cast<std::int64_t>(limits.max_held) ||
            bm.held.load(std::memory_order_relaxed) >= static_cast<std::int64_t>(limits.max_held_per_bucket);
        const bool parent = channel && channel->has_bucket;
        store::AcquireRequest areq{{rule->bucket, rule->params},
                                   parent ? std::optional<store::BucketRef>({channel->bucket, channel->params})
                                          : std::nullopt,
                                   channel ? std::string_view(channel->channel_type) : std::string_view(rule->bucket),
                                   1.0, capped ? 0 : rule->timeout_us()};
        areq.use_bucket = rule->has_bucket;
        std::string bucket_key;  // a keyed bucket's name; areq refers to it
        if (!rule->quotas.empty() || rule->key_by.kind != config::KeySpec::Kind::none || rule->max_share ||
            (channel && !channel->quotas.empty())) {
          if (auto bad = add_client_checks(areq, bucket_key, *rule, channel, req, match_path, client_ip)) {
            deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
            rec.status = 400;
            co_return co_await send_error(stream, version, keep, http::status::bad_request, "missing_client_key", *bad);
          }
        }
        if (!areq.use_bucket && !areq.parent && areq.quotas.empty()) {
          // A quota-only rule whose quotas are all disabled: nothing to decide.
          deps.metrics.count(Outcome::forwarded);
          bm.outcomes[static_cast<int>(Outcome::forwarded)].fetch_add(1, std::memory_order_relaxed);
          rec.outcome = outcome_name(Outcome::forwarded);
          co_return co_await forward(w, stream, std::move(req), client_ip, upstreams[route->upstream],
                                     w.pools[route->upstream], policy_header, limit_header, rec);
        }
        store::StoreDecision sd = co_await deps.store.try_acquire(areq);
        auto count = [&](Outcome o) {
          deps.metrics.count(o);
          bm.outcomes[static_cast<int>(o)].fetch_add(1, std::memory_order_relaxed);
          rec.outcome = outcome_name(o);
        };
        if (sd.status == store::StoreStatus::unavailable_open ||
            (shadow && sd.status == store::StoreStatus::unavailable_closed)) {
          count(Outcome::store_error);  // policy fail_open (or shadow mode): forward unlimited
        } else if (sd.status == store::StoreStatus::unavailable_closed) {
          count(Outcome::store_error);  // policy fail_closed: refuse
          rec.status = 503;
          co_return co_await send_unavailable(stream, version, keep);
        } else {
          if (sd.degraded) deps.metrics.store_degraded.fetch_add(1, std::memory_order_relaxed);
          for (std::size_t i = 0; i < sd.quotas.size(); ++i) {
            PolicyMetrics& pm = deps.metrics.policy(quota_owner(*rule, channel, i).bucket, quota_at(*rule, channel, i).name);
            (sd.quotas[i].admitted ? pm.passed : pm.failed).fetch_add(1, std::memory_order_relaxed);
          }
          if (shadow) {
            // Decided and counted, never enforced: the upstream is told what would have happened.
            if (!sd.decision.granted) {
              count(Outcome::shadow_rejected);
              const bool by_bucket = sd.bound == store::Bound::bucket || sd.bound == store::Bound::parent;
              req.set("X-Tollgate-Shadow", std::string(by_bucket ? "would-reject; bucket=" : "would-reject; policy=") +
                                               config::sf_string(bound_policy(*rule, channel, sd)) +
                                               "; retry-after-ms=" + std::to_string((sd.decision.retry_after_us + 999) / 1000));
            } else {
              count(Outcome::forwarded);
              if (sd.decision.wait_us > 0)
                req.set("X-Tollgate-Shadow", "would-delay; bucket=" + config::sf_string((sd.parent_bound && channel ? channel : rule)->bucket) +
                                                 "; wait-ms=" + std::to_string((sd.decision.wait_us + 999) / 1000));
            }
            co_return co_await forward(w, stream, std::move(req), client_ip, upstreams[route->upstream],
                                       w.pools[route->upstream], policy_header, limit_header, rec);
          }
          policy_header = rule->all_policies;
          limit_header = ratelimit_header(*rule, channel, sd);
          if (!sd.decision.granted) {
            if (capped && (sd.bound == store::Bound::bucket || sd.bound == store::Bound::parent))
              bm.cap_rejections.fetch_add(1, std::memory_order_relaxed);
            const std::string bound = bound_policy(*rule, channel, sd);
            deps.metrics.policy(bound_owner(*rule, channel, sd).bucket, bound).bound.fetch_add(1, std::memory_order_relaxed);
            if (access.log) access.policy = bound;
            count(Outcome::rejected);
            rec.status = 429;
            co_return co_await send_rejection(stream, version, keep, rejection_body(*rule, channel, sd),
                                              sd.decision.retry_after_us, policy_header, limit_header);
          }
          bm.wait.observe_us(sd.decision.wait_us);
          rec.wait_ms = static_cast<double>(sd.decision.wait_us) / 1e3;
          if (sd.decision.wait_us > 0) {
            count(Outcome::delayed);
            // A held request keeps only what it needs: its read buffer goes back to the allocator
            // (the next connection's read reuses it) and comes back on the next read.
            if (buffer.size() == 0) buffer.shrink_to_fit();
            if (!co_await hold(stream, bm, std::chrono::microseconds(sd.decision.wait_us))) {
              // The client left before its slot: its slot comes back now if nobody live queued
              // behind it (with any abandoned ones it unblocks), or later with the ones after it.
              deps.metrics.abandoned.fetch_add(1, std::memory_order_relaxed);
              const store::RefundResult given = co_await deps.store.refund_slots(areq, sd.reservation);
              deps.metrics.refunds.fetch_add(given.reservations(), std::memory_order_relaxed);
              rec.outcome = "client_gone";
              co_return false;
            }
          } else {
            count(Outcome::forwarded);
          }
        }
      }
    }
    co_return co_await forward(w, stream, std::move(req), client_ip, upstreams[route->upstream],
                               w.pools[route->upstream], policy_header, limit_header, rec);
  }

  // Holds a request until its slot on a timer (never a thread), watching the client meanwhile.
  // Returns false if the client closed its connection before the slot.
  net::awaitable<bool> hold(beast::tcp_stream& stream, BucketMetrics& bm, std::chrono::microseconds wait) {
    struct Hold {
      explicit Hold(net::any_io_executor ex) : timer(std::move(ex)) {}
      net::steady_timer timer;
      bool gone = false;
    };
    auto h = std::make_shared<Hold>(stream.get_executor());
    h->timer.expires_after(wait);
    auto& sock = stream.socket();
    sock.async_wait(tcp::socket::wait_read, [h, fd = sock.native_handle()](beast::error_code ec) {
      if (ec) return;  // cancelled: the hold is over
      char c;
      const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      // 0: orderly close; < 0 other than "nothing yet": reset. > 0: a pipelined request, still here.
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        h->gone = true;
        h->timer.cancel();
      }
    });
    deps.metrics.held.fetch_add(1, std::memory_order_relaxed);
    bm.held.fetch_add(1, std::memory_order_relaxed);
    beast::error_code ec;
    co_await h->timer.async_wait(with(ec));
    deps.metrics.held.fetch_sub(1, std::memory_order_relaxed);
    bm.held.fetch_sub(1, std::memory_order_relaxed);
    beast::error_code ignored;
    sock.cancel(ignored);
    co_return !h->gone;
  }

  // ---- upstream side -----------------------------------------------------------------------

  void upstream_error(Upstream& up, UpstreamError e) {
    deps.metrics.count(e);
    deps.metrics.upstream(up.conf.name).errors[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed);
  }

  // Before any of the response went out: 504 for a deadline, 502 for anything else, counted.
  net::awaitable<bool> upstream_failed(beast::tcp_stream& client, unsigned version, bool keep, Upstream& up,
                                       beast::error_code ec, UpstreamError kind, AccessRecord& rec,
                                       std::string_view why = {}) {
    const bool timeout = ec == beast::error::timeout;
    upstream_error(up, timeout ? UpstreamError::timeout : kind);
    rec.status = timeout ? 504 : 502;
    const char* code = timeout ? "upstream_timeout" : kind == UpstreamError::connect ? "upstream_unavailable" : "upstream_failed";
    std::string detail = "upstream '" + up.conf.name + "': " + (kind == UpstreamError::connect ? "connect: " : "");
    if (why.empty()) detail += ec.message();
    else detail.append(why.data(), why.size());
    co_return co_await send_error(client, version, keep, timeout ? http::status::gateway_timeout : http::status::bad_gateway,
                                  code, detail);
  }

  // An idle connection is reused only if it is young enough and nothing arrived on it while idle.
  std::unique_ptr<PooledConn> take_idle(Pool& pool, const Upstream& up) {
    const auto now = std::chrono::steady_clock::now();
    while (!pool.idle.empty()) {
      auto c = std::move(pool.idle.back());
      pool.idle.pop_back();
      if (now - c->idle_since < up.idle_timeout && c->stream.socket().is_open() && quiet(c->stream.socket())) return c;
      deps.metrics.upstream_conns_discarded.fetch_add(1, std::memory_order_relaxed);
    }
    return nullptr;
  }

  // Called only when a response ended exactly at its message boundary; a byte already read past it
  // belongs to no request, so such a connection is closed.
  void give_back(Pool& pool, std::unique_ptr<PooledConn> c) {
    if (c->buffer.size() != 0) {
      deps.metrics.upstream_conns_discarded.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (pool.idle.size() >= limits.max_idle_upstream_conns) return;
    c->stream.expires_never();
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

  net::awaitable<bool> forward(Worker& w, beast::tcp_stream& client, http::request<http::string_body> req,
                               const std::string& client_ip, Upstream& up, Pool& pool,
                               const std::string& policy_header, const std::string& limit_header, AccessRecord& rec) {
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
      conn = take_idle(pool, up);
      const bool reused = conn != nullptr;
      if (!reused) {
        conn = std::make_unique<PooledConn>(w.ctx->get_executor());
        conn->stream.expires_after(up.connect_timeout);
        co_await conn->stream.async_connect(up.endpoints, with(ec));
        if (ec) co_return co_await upstream_failed(client, version, keep, up, ec, UpstreamError::connect, rec);
        conn->stream.socket().set_option(tcp::no_delay(true), ec);
        ec = {};
      }
      conn->stream.expires_after(up.response_timeout);
      sent_at = std::chrono::steady_clock::now();
      const std::size_t written = co_await net::async_write(conn->stream, out, with(ec));
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
        deps.metrics.upstream_retries.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      co_return co_await upstream_failed(client, version, keep, up, ec, UpstreamError::reset, rec, why);
    }

    deps.metrics.upstream(up.conf.name)
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
        if (ec) co_return co_await upstream_failed(client, version, keep, up, ec, UpstreamError::reset, rec);
      }
      const bool upstream_keep = res.keep_alive();
      strip_hop_by_hop(res, false);
      res.version(version);
      res.keep_alive(keep);
      if (!policy_header.empty()) {
        res.set("RateLimit-Policy", policy_header);
        res.set("RateLimit", limit_header);
      }
      const std::string rhead = response_head(res);
      const std::array<net::const_buffer, 2> rout{net::buffer(rhead),
                                                  no_body ? net::const_buffer() : net::buffer(res.body())};
      if (upstream_keep) give_back(pool, std::move(conn));
      client.expires_after(milliseconds(limits.body_timeout_ms));
      co_await net::async_write(client, rout, with(ec));
      co_return !ec && keep;
    }
    co_return co_await relay(client, version, keep, std::move(conn), pool, up, *parser, policy_header, limit_header);
  }

  // A body that is large, chunked, delimited by the close, or still arriving: relayed piece by
  // piece as it comes (whatever one read brings, never waiting to fill a buffer), never buffered
  // whole. The response timeout applies to each read, so a slow but live stream goes on.
  net::awaitable<bool> relay(beast::tcp_stream& client, unsigned version, bool keep, std::unique_ptr<PooledConn> conn,
                             Pool& pool, Upstream& up, http::response_parser<http::string_body>& header_parser,
                             const std::string& policy_header, const std::string& limit_header) {
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
    if (!policy_header.empty()) {
      res.set("RateLimit-Policy", policy_header);
      res.set("RateLimit", limit_header);
    }
    beast::error_code ec;
    http::response_serializer<http::buffer_body> sr{res};
    char buf[16 * 1024];
    bool upstream_ok = true;
    for (;;) {
      if (!parser.is_done()) {
        res.body().data = buf;
        res.body().size = sizeof buf;
        conn->stream.expires_after(up.response_timeout);
        co_await http::async_read_some(conn->stream, conn->buffer, parser, with(ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
          upstream_ok = false;
          upstream_error(up, ec == beast::error::timeout ? UpstreamError::timeout : UpstreamError::reset);
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
      client.expires_after(milliseconds(limits.body_timeout_ms));
      co_await http::async_write(client, sr, with(ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return false;
      if (sr.is_done()) break;
    }
    if (!upstream_ok) co_return false;
    if (upstream_keep && parser.is_done()) give_back(pool, std::move(conn));
    co_return keep;
  }

  void stop() {
    for (auto& w : workers) {
      if (!w.acceptor) continue;
      net::post(*w.ctx, [a = w.acceptor.get()] {
        boost::system::error_code ec;
        a->close(ec);
      });
    }
  }

  // Stop accepting; close connections that are idle between requests; the others close after
  // their current answer (held requests still get theirs).
  void drain() {
    for (auto& w : workers) {
      net::post(*w.ctx, [&w] {
        w.draining = true;
        boost::system::error_code ec;
        if (w.acceptor) w.acceptor->close(ec);
        for (auto* s : w.idle) s->socket().cancel(ec);
      });
    }
  }
};

ProxyServer::ProxyServer(std::vector<net::io_context*> contexts, ProxyDeps deps)
    : impl_(std::make_unique<Impl>(std::move(contexts), deps)) {}
ProxyServer::~ProxyServer() = default;
void ProxyServer::start() { impl_->start(); }
std::uint16_t ProxyServer::port() const { return impl_->bound_port; }
void ProxyServer::stop() { impl_->stop(); }
void ProxyServer::drain() { impl_->drain(); }

// ---- SimpleServer: small request/response endpoints (admin API) ------------------------------

struct SimpleServer::Impl {
  net::io_context& ctx;
  config::Endpoint listen;
  SimpleHandler handler;
  SimpleInline runs_inline;
  tcp::acceptor acceptor;
  net::thread_pool worker{1};  // one thread: handlers never run concurrently with each other

  Impl(net::io_context& c, config::Endpoint l, SimpleHandler h, SimpleInline i)
      : ctx(c), listen(std::move(l)), handler(std::move(h)), runs_inline(std::move(i)), acceptor(c) {}
  ~Impl() {
    worker.stop();
    worker.join();
  }

  net::awaitable<void> accept_loop() {
    for (;;) {
      beast::error_code ec;
      tcp::socket sock = co_await acceptor.async_accept(with(ec));
      if (ec) {
        if (!acceptor.is_open()) co_return;
        // Out of file descriptors (EMFILE, ENFILE) and the like: wait a little instead of spinning
        // on the thread that also handles signals.
        net::steady_timer t(ctx, 50ms);
        co_await t.async_wait(with(ec));
        continue;
      }
      net::co_spawn(ctx, session(std::move(sock)), net::detached);
    }
  }

  SimpleResponse call(const SimpleRequest& in) {
    try {
      return handler(in);
    } catch (const std::exception& e) {
      return {500, error_body("internal", e.what())};
    }
  }

  net::awaitable<SimpleResponse> dispatch(const SimpleRequest& in) {
    if (runs_inline && runs_inline(in)) co_return call(in);
    co_return co_await net::co_spawn(
        worker.get_executor(), [this, &in]() -> net::awaitable<SimpleResponse> { co_return call(in); }, net::use_awaitable);
  }

  static net::awaitable<void> write(beast::tcp_stream& stream, unsigned version, bool keep, SimpleResponse out,
                                    beast::error_code& ec) {
    http::response<http::string_body> res{static_cast<http::status>(out.status), version};
    res.set(http::field::content_type, out.content_type);
    res.keep_alive(keep);
    res.body() = std::move(out.body);
    res.prepare_payload();
    stream.expires_after(30s);
    co_await http::async_write(stream, res, with(ec));
  }

  net::awaitable<void> session(tcp::socket sock) {
    std::string peer;
    {
      boost::system::error_code ec;
      auto ep = sock.remote_endpoint(ec);
      if (!ec) peer = ep.address().to_string();
    }
    beast::tcp_stream stream(std::move(sock));
    beast::flat_buffer buffer;
    for (;;) {
      beast::error_code ec;
      http::request_parser<http::string_body> parser;
      parser.header_limit(16 * 1024);
      parser.body_limit(64 * 1024);
      stream.expires_after(30s);
      co_await http::async_read(stream, buffer, parser, with(ec));
      if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
          ec == net::error::connection_reset || ec == net::error::operation_aborted)
        break;
      if (ec) {
        // Answered, not just closed, so the caller learns why; the rest of the message is not read.
        // A named value, not a braced temporary, goes into the coroutine call: g++ 12 destroys
        // such a temporary twice when it is a by-value argument of a co_await'ed coroutine.
        const bool body = ec == http::error::body_limit, head = ec == http::error::header_limit;
        SimpleResponse refusal{body ? 413 : head ? 431 : 400,
                               body   ? error_body("body_too_large", "admin request bodies are limited to 64 KiB")
                               : head ? error_body("headers_too_large", "admin request headers are limited to 16 KiB")
                                      : error_body("bad_request", ec.message())};
        co_await write(stream, 11, false, std::move(refusal), ec);
        break;
      }
      auto& req = parser.get();
      SimpleRequest in{std::string(req.method_string()), std::string(req.target()),
                       std::string(req[http::field::authorization]), std::move(req.body()), peer};
      SimpleResponse out = co_await dispatch(in);
      if (out.delay_ms > 0) {
        net::steady_timer t(ctx, milliseconds(out.delay_ms));
        co_await t.async_wait(with(ec));
      }
      const bool keep = req.keep_alive();
      co_await write(stream, req.version(), keep, std::move(out), ec);
      if (ec || !keep) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }
};

SimpleServer::SimpleServer(net::io_context& ctx, config::Endpoint listen, SimpleHandler handler, SimpleInline runs_inline)
    : impl_(std::make_unique<Impl>(ctx, std::move(listen), std::move(handler), std::move(runs_inline))) {}
SimpleServer::~SimpleServer() = default;
void SimpleServer::start() {
  open_acceptor(impl_->acceptor, make_endpoint(impl_->listen), false);
  net::co_spawn(impl_->ctx, impl_->accept_loop(), net::detached);
}
std::uint16_t SimpleServer::port() const { return impl_->acceptor.local_endpoint().port(); }
void SimpleServer::stop() {
  net::post(impl_->ctx, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
  });
}

}  // namespace tollgate::proxy

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/admin/admin_server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <list>

#include "tollgate/proxy/listener.hpp"
#include "tollgate/proxy/throttle.hpp"
#include "tollgate/store/metric_series.hpp"

namespace tollgate::admin {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using proxy::error_body;
using proxy::make_endpoint;
using proxy::open_acceptor;

namespace {
inline auto with(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

std::string lower_name(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!out.empty() && out.back() == '.') out.pop_back();  // "localhost." names the same host
  return out;
}
bool all_digits(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
// An IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack socket reports those).
net::ip::address plain(const net::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
  return a;
}
}  // namespace

bool admin_host_allowed(std::string_view host, std::string_view local_address, const std::vector<std::string>& allowed) {
  if (host.empty()) return true;
  std::string_view name, port;
  if (host.front() == '[') {
    const auto close = host.find(']');
    if (close == std::string_view::npos) return false;
    name = host.substr(1, close - 1);
    const std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    port = rest.empty() ? rest : rest.substr(1);
  } else {
    const auto colon = host.find(':');
    if (colon != std::string_view::npos && host.find(':', colon + 1) != std::string_view::npos) return false;
    name = host.substr(0, colon);
    port = colon == std::string_view::npos ? std::string_view() : host.substr(colon + 1);
  }
  if (name.empty() || !all_digits(port) || port.size() > 5) return false;
  const std::string n = lower_name(name);
  if (n.empty()) return false;
  if (n == "localhost") return true;
  for (const std::string& a : allowed)
    if (a == "*" || lower_name(a) == n) return true;
  boost::system::error_code ec;
  const net::ip::address addr = net::ip::make_address(n, ec);
  if (ec) return false;
  if (plain(addr).is_loopback()) return true;
  const net::ip::address local = net::ip::make_address(std::string(local_address), ec);
  return !ec && plain(addr) == plain(local);
}


struct AdminServer::Impl {
  // An open connection, on the listener's thread only.
  struct Conn {
    beast::tcp_stream* stream = nullptr;
    bool waiting = true;       // for (the rest of) its next request: may be closed at the cap
    std::uint64_t since = 0;   // when it started waiting (an order, not a time)
    bool closing = false;      // closed at the cap, its session not ended yet
  };
  // Connections answered 503 at once, each for a moment (writing, then reading what the client
  // still sends so the close does not reset the answer); past this many they are closed unanswered.
  static constexpr int kMaxRefusing = static_cast<int>(kAdminRefusalDescriptors);

  net::io_context& ctx;
  config::Endpoint listen;
  SimpleHandler handler;
  SimpleInline runs_inline;
  AdminServerOptions options;
  tcp::acceptor acceptor;
  net::thread_pool worker{1};  // one thread: handlers never run concurrently with each other
  std::list<Conn> conns;
  std::size_t open = 0;        // conns not closing
  std::uint64_t order = 0;
  int refusing = 0;
  prometheus::Counter* refused_busy = nullptr;
  prometheus::Counter* closed_idle = nullptr;
  prometheus::Counter* refused_host = nullptr;
  prometheus::Gauge* connections = nullptr;

  Impl(net::io_context& c, config::Endpoint l, SimpleHandler h, SimpleInline i, AdminServerOptions o)
      : ctx(c), listen(std::move(l)), handler(std::move(h)), runs_inline(std::move(i)), options(std::move(o)), acceptor(c) {
    if (prometheus::Registry* r = options.registry) {
      const char* help = "Admin connections or requests refused or closed by the admin listener, by reason.";
      refused_busy = &store::counter(*r, "tollgate_admin_refusals_total", help, {{"reason", "too_many_connections"}});
      closed_idle = &store::counter(*r, "tollgate_admin_refusals_total", help, {{"reason", "idle_closed_at_cap"}});
      refused_host = &store::counter(*r, "tollgate_admin_refusals_total", help, {{"reason", "host_not_allowed"}});
      connections = &store::gauge(*r, "tollgate_admin_connections", "Open admin connections.");
    }
  }
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
      if (open >= options.max_connections && !close_longest_waiting()) {
        if (refused_busy) refused_busy->Increment();
        if (refusing < kMaxRefusing) net::co_spawn(ctx, refuse(std::move(sock)), net::detached);
        continue;  // otherwise closed here, unanswered
      }
      // Counted here, not when the session starts: accepts that come before it runs count too.
      const auto me = conns.insert(conns.end(), Conn{nullptr, true, order++, false});
      ++open;
      if (connections) connections->Set(static_cast<double>(open));
      net::co_spawn(ctx, session(std::move(sock), me), net::detached);
    }
  }

  // At the cap: closes the connection that has waited longest for a request (an idle keep-alive
  // or one trickling its headers), so that a new caller is answered. False when all are busy.
  bool close_longest_waiting() {
    Conn* oldest = nullptr;
    for (Conn& c : conns)
      if (c.stream && c.waiting && !c.closing && (!oldest || c.since < oldest->since)) oldest = &c;
    if (!oldest) return false;
    oldest->closing = true;
    --open;
    beast::error_code ignored;
    oldest->stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
    oldest->stream->socket().close(ignored);
    if (closed_idle) closed_idle->Increment();
    return true;
  }

  net::awaitable<void> refuse(tcp::socket sock) {
    ++refusing;
    beast::tcp_stream stream(std::move(sock));
    beast::error_code ec;
    SimpleResponse out{503, error_body("too_many_admin_connections",
                                       "the admin listener's connections (admin.max_connections) are all busy: try again")};
    co_await write(stream, 11, false, std::move(out), ec, 2s);
    if (!ec) {
      stream.socket().shutdown(tcp::socket::shutdown_send, ec);
      std::array<char, 2048> discard{};
      stream.expires_after(500ms);
      while (!ec) co_await stream.async_read_some(net::buffer(discard), with(ec));
    }
    --refusing;
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
                                    beast::error_code& ec, std::chrono::seconds timeout = 30s) {
    http::response<http::string_body> res{static_cast<http::status>(out.status), version};
    res.set(http::field::content_type, out.content_type);
    res.set("Content-Security-Policy", kContentSecurityPolicy);
    res.set("X-Frame-Options", "DENY");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Referrer-Policy", "no-referrer");
    res.set(http::field::cache_control, "no-store");
    for (const auto& [name, value] : out.headers) res.set(name, value);
    res.keep_alive(keep);
    res.body() = std::move(out.body);
    res.prepare_payload();
    stream.expires_after(timeout);
    co_await http::async_write(stream, res, with(ec));
  }

  net::awaitable<void> session(tcp::socket sock, std::list<Conn>::iterator me) {
    std::string peer, local;
    {
      boost::system::error_code ec;
      auto ep = sock.remote_endpoint(ec);
      if (!ec) peer = plain(ep.address()).to_string();
      auto own = sock.local_endpoint(ec);
      if (!ec) local = plain(own.address()).to_string();
    }
    beast::tcp_stream stream(std::move(sock));
    me->stream = &stream;
    co_await serve(stream, peer, local, *me);
    if (!me->closing) --open;
    conns.erase(me);
    if (connections) connections->Set(static_cast<double>(open));
  }

  net::awaitable<void> serve(beast::tcp_stream& stream, const std::string& peer, const std::string& local, Conn& me) {
    beast::flat_buffer buffer;
    for (;;) {
      beast::error_code ec;
      http::request_parser<http::string_body> parser;
      parser.header_limit(16 * 1024);
      parser.body_limit(64 * 1024);
      stream.expires_after(30s);
      me.waiting = true;
      me.since = order++;
      co_await http::async_read(stream, buffer, parser, with(ec));
      if (me.closing) break;
      me.waiting = false;
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
      // A browser page that DNS rebinding brought here sends its own site's name as Host.
      const auto hosts = req.count(http::field::host);
      const std::string_view host = hosts == 1 ? std::string_view(req[http::field::host]) : std::string_view();
      if (hosts > 1 || (hosts == 0 && req.version() >= 11) ||
          !admin_host_allowed(host, local, options.allowed_hosts)) {
        const bool named = hosts == 1;
        if (named && refused_host) refused_host->Increment();
        SimpleResponse refusal{named ? 421 : 400,
                               named ? error_body("host_not_allowed",
                                                  "Host '" + std::string(host.substr(0, 100)) +
                                                      "' is neither this admin listener's address, localhost, nor one "
                                                      "of admin.allowed_hosts")
                                     : error_body("bad_host", "an HTTP/1.1 request needs exactly one Host field")};
        co_await write(stream, req.version(), false, std::move(refusal), ec);
        break;
      }
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

AdminServer::AdminServer(net::io_context& ctx, config::Endpoint listen, SimpleHandler handler, SimpleInline runs_inline,
                         AdminServerOptions options)
    : impl_(std::make_unique<Impl>(ctx, std::move(listen), std::move(handler), std::move(runs_inline),
                                   std::move(options))) {}
AdminServer::~AdminServer() = default;
void AdminServer::start() {
  open_acceptor(impl_->acceptor, make_endpoint(impl_->listen), false);
  net::co_spawn(impl_->ctx, impl_->accept_loop(), net::detached);
}
std::uint16_t AdminServer::port() const { return impl_->acceptor.local_endpoint().port(); }
void AdminServer::stop() {
  net::post(impl_->ctx, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
  });
}

}  // namespace tollgate::admin

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/admin/admin_server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

#include "tollgate/proxy/listener.hpp"
#include "tollgate/proxy/throttle.hpp"

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
}  // namespace


struct AdminServer::Impl {
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
    res.set("Content-Security-Policy", kContentSecurityPolicy);
    res.set("X-Frame-Options", "DENY");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Referrer-Policy", "no-referrer");
    res.set(http::field::cache_control, "no-store");
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

AdminServer::AdminServer(net::io_context& ctx, config::Endpoint listen, SimpleHandler handler, SimpleInline runs_inline)
    : impl_(std::make_unique<Impl>(ctx, std::move(listen), std::move(handler), std::move(runs_inline))) {}
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

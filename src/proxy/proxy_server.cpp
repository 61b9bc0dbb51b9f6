// The proxy listener's wiring: one Worker per io_context (thread), each with its own acceptor on
// the shared port (SO_REUSEPORT), its sessions (session.cpp) and its upstream pools (upstream.cpp).
// Here: start, accept (with the connection cap and the out-of-descriptors answer), stop and drain.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/proxy/proxy_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy_context.hpp"
#include "session.hpp"
#include "tollgate/proxy/listener.hpp"

namespace tollgate::proxy {

using namespace std::chrono_literals;

namespace {

constexpr std::string_view kBusyBody =
    "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,"
    "\"detail\":\"connection limit reached\",\"error\":\"too_many_connections\"}\n";
constexpr std::string_view kBusyHead =
    "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nX-Tollgate-Origin: gateway\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\nContent-Length: ";
// Head and body, made at start (sent when descriptors run out: nothing is made then).
const std::string kBusy = std::string(kBusyHead) + std::to_string(kBusyBody.size()) + "\r\n\r\n" + std::string(kBusyBody);

// Over proxy.max_connections: a canned 429 without reading the request, then close.
net::awaitable<void> refuse(tcp::socket sock) {
  beast::error_code ec;
  co_await net::async_write(sock, net::buffer(kBusy), with(ec));
  sock.shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace

struct ProxyServer::Impl {
  ProxyContext px;
  std::vector<Worker> workers;
  std::uint16_t bound_port = 0;
  bool tls_listener = false;

  Impl(std::vector<net::io_context*> ctxs, ProxyDeps d) : px(d) {
    for (auto* c : ctxs) {
      Worker w;
      w.ctx = c;
      w.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      workers.push_back(std::move(w));
    }
  }
  ~Impl() {
    for (auto& w : workers)
      if (w.spare_fd >= 0) ::close(w.spare_fd);
  }

  void start() {
    px.routes.build(px.deps.config, px.deps.metrics);
    tls_listener = px.deps.tls && px.deps.tls->listener();
    tcp::endpoint ep = make_endpoint(px.deps.config.listen);
    for (std::size_t i = 0; i < workers.size(); ++i) {
      auto& w = workers[i];
      w.pools.resize(px.routes.upstreams().size());
      for (std::size_t u = 0; u < w.pools.size(); ++u)
        if (px.routes.upstreams()[u].conf.https)
          w.pools[u].sessions = std::make_unique<TlsSessionCache[]>(px.routes.upstreams()[u].endpoints.size());
      w.acceptor = std::make_unique<tcp::acceptor>(*w.ctx);
      open_acceptor(*w.acceptor, ep, workers.size() > 1);
      if (i == 0) {
        bound_port = w.acceptor->local_endpoint().port();
        ep.port(bound_port);  // port 0: the others join the port the first one got
      }
      net::co_spawn(*w.ctx, accept_loop(w), net::detached);
      net::co_spawn(*w.ctx, w.timeouts.run(), net::detached);
    }
  }

  net::awaitable<void> accept_loop(Worker& w) {
    Metrics& metrics = px.deps.metrics;
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
      if (metrics.connections.Value() >= static_cast<double>(px.limits.max_connections)) {
        metrics.connections_refused.Increment();
        // An HTTPS client would read the canned plain-text 429 as garbage: it is closed instead.
        if (!tls_listener) net::co_spawn(*w.ctx, refuse(std::move(sock)), net::detached);
        continue;
      }
      net::co_spawn(*w.ctx, run_session(px, w, std::move(sock)), net::detached);
    }
  }

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
      if (!tls_listener) (void)!::send(fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
      px.deps.metrics.connections_refused.Increment();
    }
    w.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
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

}  // namespace tollgate::proxy

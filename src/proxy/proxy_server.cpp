// The proxy listener's wiring: one Worker per io_context (thread), each with its own acceptor on
// the shared port (SO_REUSEPORT), its sessions (session.cpp) and its upstream pools (upstream.cpp).
// Here: start, accept (with the connection caps, overall and per client address, and the
// out-of-descriptors answer), stop and drain.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/proxy/proxy_server.hpp"

#include <array>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "peer_slots.hpp"
#include "proxy_context.hpp"
#include "session.hpp"
#include "upstream.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/proxy/listener.hpp"
#include "tollgate/proxy/request_id.hpp"

namespace tollgate::proxy {

using namespace std::chrono_literals;

namespace {

// The canned 429s, in pieces around their request id (a new one each time: X-Request-Id and the
// body's request_id), so that each refusal writes the pieces and its id as they are, with no
// copy: nothing is made when descriptors run out.
constexpr std::string_view kBusyEnd = "\"}\n";
constexpr std::string_view kBusyHead =
    "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nX-Tollgate-Origin: gateway\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\nContent-Length: ";

// Made at start: the head up to the id, then the rest of the head and the body up to the id.
struct BusyText {
  explicit BusyText(std::string_view detail) {
    std::string body = "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\"detail\":\"";
    body.append(detail).append("\",\"error\":\"too_many_connections\",\"request_id\":\"");
    to_id = std::string(kBusyHead) + std::to_string(body.size() + kMadeRequestIdLength + kBusyEnd.size()) +
            "\r\nX-Request-Id: ";
    to_body_id = "\r\n\r\n" + body;
  }
  std::string to_id, to_body_id;
};
// Over proxy.max_connections; over proxy.max_connections_per_client.
const BusyText kBusyAll("connection limit reached");
const BusyText kBusyPeer("connection limit per client address reached");

struct BusyAnswer {
  explicit BusyAnswer(const BusyText& t) : text(t) { make_request_id(id); }
  const BusyText& text;
  char id[kMadeRequestIdLength];
  std::array<net::const_buffer, 5> buffers() const {
    return {net::buffer(text.to_id), net::buffer(id, sizeof id), net::buffer(text.to_body_id),
            net::buffer(id, sizeof id), net::buffer(kBusyEnd.data(), kBusyEnd.size())};
  }
};

// Over a connection cap: a canned 429 without reading the request, then close.
net::awaitable<void> refuse(tcp::socket sock, const BusyText& text) {
  beast::error_code ec;
  const BusyAnswer answer(text);
  const auto buffers = answer.buffers();
  co_await net::async_write(sock, buffers, with(ec));
  sock.shutdown(tcp::socket::shutdown_both, ec);
}

// An IPv4-mapped IPv6 peer (a dual-stack listener) as its IPv4 address.
net::ip::address canonical(const net::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
  return a;
}

PeerKey key_of(const net::ip::address& a) {
  return a.is_v4() ? peer_key_v4(a.to_v4().to_bytes()) : a.to_v6().to_bytes();
}

}  // namespace

struct ProxyServer::Impl {
  ProxyContext px;
  PeerSlots peer_slots{px.limits.max_connections_per_client};  // before the sessions that hold them
  std::vector<Worker> workers;
  std::uint16_t bound_port = 0;
  std::shared_ptr<const OwnListener> own;  // the listener as bound: never an upstream endpoint
  bool tls_listener = false;
  std::mutex replace_mu;  // one replacement at a time; the running_* below under it
  std::vector<config::UpstreamConfig> running_upstreams;
  std::vector<config::RouteConfig> running_routes;
  config::DnsConfig running_dns;

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

  // The route table of `cfg`'s upstreams, routes and dns, taking over what it keeps of `previous`,
  // its names resolved (waiting up to 2 s for their first answers, as at start).
  std::shared_ptr<RouteTable> make_table(const config::GatewayConfig& cfg, const RouteTable* previous) {
    std::vector<std::shared_ptr<UpstreamTls>> tls =
        px.deps.tls ? px.deps.tls->prepare(cfg.upstreams) : std::vector<std::shared_ptr<UpstreamTls>>{};
    for (std::size_t i = 0; i < cfg.upstreams.size(); ++i)
      if (cfg.upstreams[i].https && (i >= tls.size() || !tls[i]))
        throw std::runtime_error("upstream '" + cfg.upstreams[i].name + "' is https but the proxy has no TLS profiles");
    auto table = std::make_shared<RouteTable>(cfg, px.limits, tls, px.deps.metrics, workers.size(), previous, own);
    table->start(std::chrono::milliseconds(2000));
    if (px.deps.tls) px.deps.tls->adopt(std::move(tls));
    running_upstreams = cfg.upstreams;
    running_routes = cfg.routes;
    running_dns = cfg.dns;
    return table;
  }

  // On the worker's thread: `routes` becomes its table. Pools of upstreams it keeps unchanged (the
  // same endpoints) carry over with their idle connections and keeper; the others retire: idle
  // connections close now, busy ones when their request is answered.
  void adopt(Worker& w, const std::shared_ptr<RouteTable>& routes) {
    auto next = std::make_shared<WorkerTable>();
    next->routes = routes;
    std::vector<std::shared_ptr<Pool>> old;
    if (w.table) old = w.table->pools;
    for (Upstream& up : routes->upstreams()) {
      std::shared_ptr<Pool> pool;
      for (std::size_t i = 0; i < old.size() && !pool; ++i)
        if (old[i] && w.table->routes->upstreams()[i].endpoints == up.endpoints) pool = std::exchange(old[i], nullptr);
      if (!pool) {
        pool = std::make_shared<Pool>();
        if (up.conf.min_idle_conns > 0) net::co_spawn(*w.ctx, keep_warm(px, w, up, pool), net::detached);
      }
      next->pools.push_back(std::move(pool));
    }
    for (auto& pool : old) {
      if (!pool) continue;
      pool->retired = true;
      pool->idle.clear();
      if (pool->warm_timer) pool->warm_timer->cancel();
    }
    w.table = std::move(next);
  }

  // SIGHUP: see ProxyServer::replace_routes.
  bool replace_routes(const config::GatewayConfig& cfg) {
    std::lock_guard lock(replace_mu);
    if (cfg.upstreams == running_upstreams && cfg.routes == running_routes && cfg.dns == running_dns) return false;
    const std::shared_ptr<RouteTable> old = px.routes();
    std::shared_ptr<RouteTable> table = make_table(cfg, old.get());
    {
      std::lock_guard routes_lock(px.routes_mu);
      px.routes_ = table;
    }
    for (auto& w : workers) net::post(*w.ctx, [this, &w, table] { adopt(w, table); });
    old->stop();  // the new table's resolver follows the names now
    return true;
  }

  void start() {
    // Bound first, so that the table knows the listener's port (port 0 included) and leaves it out
    // of every upstream's endpoints; connections wait in the backlog until the threads run.
    tls_listener = px.deps.tls && px.deps.tls->listener();
    tcp::endpoint ep = make_endpoint(px.deps.config.listen);
    for (std::size_t i = 0; i < workers.size(); ++i) {
      auto& w = workers[i];
      w.index = i;
      w.acceptor = std::make_unique<tcp::acceptor>(*w.ctx);
      open_acceptor(*w.acceptor, ep, workers.size() > 1);
      if (i == 0) {
        bound_port = w.acceptor->local_endpoint().port();
        ep.port(bound_port);  // port 0: the others join the port the first one got
      }
    }
    own = std::make_shared<const OwnListener>(ep);
    auto table = make_table(px.deps.config, nullptr);
    {
      std::lock_guard routes_lock(px.routes_mu);
      px.routes_ = table;
    }
    for (auto& w : workers) {
      adopt(w, table);  // (before the threads run: on this thread)
      net::co_spawn(*w.ctx, accept_loop(w), net::detached);
      net::co_spawn(*w.ctx, w.timeouts.run(), net::detached);
    }
  }

  net::awaitable<void> accept_loop(Worker& w) {
    Metrics& metrics = px.deps.metrics;
    for (;;) {
      beast::error_code ec;
      tcp::endpoint peer;
      tcp::socket sock = co_await w.acceptor->async_accept(peer, with(ec));
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
        if (!tls_listener) net::co_spawn(*w.ctx, refuse(std::move(sock), kBusyAll), net::detached);
        continue;
      }
      const net::ip::address address = canonical(peer.address());
      PeerSlot slot;
      if (!peer_slots.acquire(key_of(address), slot)) {
        metrics.connections_refused_per_client.Increment();
        if (!tls_listener) net::co_spawn(*w.ctx, refuse(std::move(sock), kBusyPeer), net::detached);
        continue;
      }
      net::co_spawn(*w.ctx, run_session(px, w, std::move(sock), address, std::move(slot)), net::detached);
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
      if (!tls_listener) {
        const BusyAnswer answer(kBusyAll);
        const auto buffers = answer.buffers();
        std::array<iovec, std::tuple_size_v<decltype(buffers)>> iov;
        for (std::size_t b = 0; b < iov.size(); ++b) iov[b] = {const_cast<void*>(buffers[b].data()), buffers[b].size()};
        msghdr msg{};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = iov.size();
        (void)!::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      ::close(fd);
      px.deps.metrics.connections_refused.Increment();
    }
    w.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }

  void stop() {
    if (auto table = px.routes()) table->stop();
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
bool ProxyServer::replace_routes(const config::GatewayConfig& next) { return impl_->replace_routes(next); }
void ProxyServer::refresh_endpoint_gauges() const {
  const auto now_us = limiter::steady_now_us();
  const auto table = impl_->px.routes();
  if (!table) return;
  for (auto& u : table->upstreams()) {
    u.endpoints->refresh_gauges(now_us);
    if (u.auth) u.auth->refresh_gauge();
  }
}

std::vector<UpstreamView> ProxyServer::upstreams_view() const {
  std::vector<UpstreamView> out;
  const auto now_us = limiter::steady_now_us();
  const auto table = impl_->px.routes();
  if (!table) return out;
  for (auto& u : table->upstreams()) {
    UpstreamView v;
    v.name = u.conf.name;
    v.resolved = u.endpoints->resolved();
    std::uint64_t version = 0;
    for (const auto& e : u.endpoints->current(version)->endpoints)
      v.endpoints.push_back({e->label, e->ejected_until_us.load(std::memory_order_relaxed) <= now_us,
                             e->outstanding.load(std::memory_order_relaxed)});
    if (u.auth) v.auth = u.auth->status();
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace tollgate::proxy

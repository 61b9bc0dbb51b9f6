#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/app/gateway.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <iostream>
#include <thread>

#include "tollgate/admin/admin_api.hpp"
#include "tollgate/config/config_source.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/proxy/proxy_server.hpp"
#include "tollgate/store/local_store.hpp"

namespace tollgate::app {

namespace net = boost::asio;

struct Gateway::Impl {
  config::GatewayConfig cfg;
  limiter::SteadyClock clock;
  config::SnapshotHolder snapshots;
  config::SwitchState switch_state;
  proxy::Metrics metrics;
  std::unique_ptr<store::BucketStore> store;
  std::vector<std::unique_ptr<net::io_context>> contexts;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  std::unique_ptr<proxy::ProxyServer> proxy;
  std::unique_ptr<admin::AdminApi> admin_api;
  std::unique_ptr<proxy::SimpleServer> admin_server;

  explicit Impl(config::GatewayConfig c) : cfg(std::move(c)), switch_state(cfg.limits.switch_on, cfg.limits.source) {
    config::LoadResult loaded = config::FileSource::from_rows(cfg.limits.rows, cfg.limits.switch_on);
    snapshots.set(config::make_snapshot(std::move(loaded.rules), 1, "file:" + cfg.path));
    store = std::make_unique<store::LocalStore>(clock);
  }
};

Gateway::Gateway(config::GatewayConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Gateway::~Gateway() = default;

void Gateway::start() {
  auto& m = *impl_;
  unsigned n = m.cfg.threads ? m.cfg.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<net::io_context*> raw;
  for (unsigned i = 0; i < n; ++i) {
    m.contexts.push_back(std::make_unique<net::io_context>(1));
    m.guards.push_back(net::make_work_guard(*m.contexts.back()));
    raw.push_back(m.contexts.back().get());
  }
  m.proxy = std::make_unique<proxy::ProxyServer>(
      raw, proxy::ProxyDeps{m.cfg, m.snapshots, m.switch_state, *m.store, m.metrics});
  m.proxy->start();
  m.admin_api = std::make_unique<admin::AdminApi>(
      admin::AdminDeps{m.snapshots, m.switch_state, *m.store, m.metrics, m.cfg.admin.token});
  m.admin_server = std::make_unique<proxy::SimpleServer>(
      *raw[0], m.cfg.admin.listen, [api = m.admin_api.get()](const proxy::SimpleRequest& r) { return api->handle(r); });
  m.admin_server->start();

  const auto snap = m.snapshots.get();
  std::size_t enabled = 0;
  for (const auto& r : snap->rules) enabled += r.enabled ? 1 : 0;
  std::cout << "tollgate: proxy listening on " << m.cfg.listen.host << ":" << m.proxy->port() << " (" << n
            << " threads)\n"
            << "tollgate: admin listening on " << m.cfg.admin.listen.host << ":" << m.admin_server->port()
            << (m.cfg.admin.token.empty() ? " (read-only: $" + m.cfg.admin.token_env + " is not set)" : "") << "\n"
            << "tollgate: " << enabled << " enabled rules from " << snap->source << ", switch "
            << (m.switch_state.enabled() ? "on" : "off") << ", store " << m.store->name() << "\n"
            << "tollgate: ready" << std::endl;
}

int Gateway::run() {
  auto& m = *impl_;
  net::signal_set signals(*m.contexts[0], SIGINT, SIGTERM);
  signals.async_wait([&m](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    std::cout << "tollgate: signal " << sig << ", stopping" << std::endl;
    m.proxy->stop();
    m.admin_server->stop();
    for (auto& c : m.contexts) c->stop();
  });
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < m.contexts.size(); ++i) threads.emplace_back([c = m.contexts[i].get()] { c->run(); });
  m.contexts[0]->run();
  for (auto& t : threads) t.join();
  return 0;
}

}  // namespace tollgate::app

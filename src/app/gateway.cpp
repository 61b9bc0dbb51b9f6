#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/app/gateway.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/detail/concurrency_hint.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <csignal>
#include <fstream>
#include <functional>
#include <iterator>
#include <iostream>
#include <sys/resource.h>
#include <thread>

#include "tollgate/admin/admin_api.hpp"
#include "tollgate/config/config_manager.hpp"
#include "tollgate/config/config_source.hpp"
#include "tollgate/config/mysql_source.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/client_key.hpp"
#include "tollgate/admin/admin_server.hpp"
#include "tollgate/proxy/proxy_server.hpp"
#include "tollgate/proxy/tls_context.hpp"
#include "tollgate/store/failure_policy_store.hpp"
#include "tollgate/store/local_store.hpp"
#include "tollgate/store/redis_store.hpp"

namespace tollgate::app {

namespace net = boost::asio;
using Guard = net::executor_work_guard<net::io_context::executor_type>;

namespace {
// Priority classes a caller can pick for itself (docs/priority.md): the method is every caller's to
// choose, so any caller can take the high class; a class header is believed only from
// proxy.trusted_proxies, so without any it names no class. Said at start and by --check.
void warn_choosable_classes(const config::Snapshot* snap, const std::vector<std::string>& trusted_proxies) {
  if (snap == nullptr) return;
  const bool has_trusted_proxies = !trusted_proxies.empty();
  // A range of length 0 (0.0.0.0/0, ::/0) trusts every address: any caller can then name its class.
  const auto everyone = std::find_if(trusted_proxies.begin(), trusted_proxies.end(),
                                     [](const std::string& cidr) { return cidr.ends_with("/0"); });
  for (const config::Rule& r : snap->rules) {
    if (!r.enabled || !r.priority) continue;
    if (r.priority->by == config::Priority::By::method)
      std::cerr << "tollgate: warn: rule " << r.config_id << " (" << r.bucket
                << "): priority.by \"method\" lets every caller choose its class (any caller can send "
                << r.priority->classes.front()
                << "'s method); use \"header:<Name>\" set by a proxy in proxy.trusted_proxies (docs/priority.md)"
                << std::endl;
    else if (everyone != trusted_proxies.end())
      std::cerr << "tollgate: warn: rule " << r.config_id << " (" << r.bucket << "): priority.by \"header:"
                << r.priority->header << "\" is believed from proxy.trusted_proxies, and " << *everyone
                << " trusts every address: any caller can name its class; list only the proxies that set it "
                   "(docs/priority.md)"
                << std::endl;
    else if (!has_trusted_proxies)
      std::cerr << "tollgate: warn: rule " << r.config_id << " (" << r.bucket << "): priority.by \"header:"
                << r.priority->header
                << "\" is believed only from proxy.trusted_proxies, and none is set: every request gets the "
                   "default class (docs/priority.md)"
                << std::endl;
  }
}

// --check with MySQL: the rows read once (one connection under limits.mysql's timeouts, no retry)
// and checked as a reload checks them. Every rejected row, and a switch row the gateway would not
// apply, is named, and any of them fails the check, as a bad row of the file does; so does a
// MySQL that cannot be read, which the gateway itself would only wait out on the file's rules.
config::ValidatedRules checked_mysql_rows(config::MysqlSource& source) {
  config::LoadResult r;
  try {
    r = source.load();
  } catch (const std::exception& e) {
    throw config::ConfigError("limits.mysql: cannot read the rules from " + source.describe() + ": " + e.what());
  }
  std::string problems;
  for (const config::RejectedRow& bad : r.rules.rejected) problems += "\n  " + bad.message();
  if (r.switch_error) problems += "\n  " + *r.switch_error;
  const std::size_t n = r.rules.rejected.size() + (r.switch_error ? 1 : 0);
  if (n > 0)
    throw config::ConfigError(source.describe() + ": " + std::to_string(n) + (n == 1 ? " row" : " rows") +
                              " the gateway would reject:" + problems);
  return std::move(r.rules);
}
}  // namespace

struct Gateway::Impl {
  config::GatewayConfig cfg;
  limiter::SteadyClock clock;
  config::SnapshotHolder snapshots;
  config::SwitchState switch_state;
  proxy::Metrics metrics;
  std::shared_ptr<config::MysqlSource> mysql;  // set when limits.source is "mysql"
  std::unique_ptr<config::ConfigManager> config_manager;
  std::unique_ptr<proxy::TlsProfiles> tls;  // loaded with the config: --check sees a bad file
  std::unique_ptr<store::BucketStore> store;
  store::RedisStore* redis = nullptr;  // inside `store` when limits.store is "redis"
  // Request threads: one io_context each. The admin API has its own thread, so a slow MySQL
  // write or reload there never delays a request.
  std::vector<std::unique_ptr<net::io_context>> contexts;
  std::vector<Guard> guards;
  net::io_context admin_ctx{1};
  Guard admin_guard{net::make_work_guard(admin_ctx)};
  std::unique_ptr<proxy::ProxyServer> proxy;
  std::unique_ptr<admin::AdminApi> admin_api;
  std::unique_ptr<admin::AdminServer> admin_server;
  std::unique_ptr<proxy::AccessLog> access_log;
  proxy::RefusalLog refusals;                    // the last 429s and 503s, for the console
  std::unique_ptr<admin::History> history;       // five minutes per bucket, sampled every second
  std::unique_ptr<net::steady_timer> history_timer;
  std::atomic<bool> draining{false};
  std::unique_ptr<net::signal_set> signals;  // created before "ready": no signal is lost or fatal

  // Teardown in dependency order, whatever the members' order. Requests still suspended when the
  // event loops stopped (held past the drain deadline, or a second signal) are coroutine frames
  // owned by the io_contexts, by the store's pending calls and by the proxy's sockets; destroying
  // them runs their destructors, which write access-log lines and touch metrics. So everything
  // that owns such frames goes first (the store's connections and the proxy's sockets while their
  // io_context still exists), then the io_contexts, and only then the access log.
  ~Impl() {
    signals.reset();
    admin_server.reset();
    admin_api.reset();
    proxy.reset();
    store.reset();
    guards.clear();
    contexts.clear();
    access_log.reset();
  }

  // SIGHUP: TLS files, the file's upstreams, routes and dns (a new route table), and the rules (the
  // file's or MySQL's) read again; what only a restart applies is named.
  void reload_on_sighup() {
    if (tls->any()) {
      // Certificates, keys and CA files: new handshakes use what loads, a file that does not
      // load leaves its old context in force.
      const proxy::TlsProfiles::ReloadReport t = tls->reload();
      for (const auto& e : t.errors) std::cout << "tollgate: SIGHUP: TLS reload refused, keeping the old context: " << e << std::endl;
      if (!t.reloaded.empty()) std::cout << "tollgate: SIGHUP: TLS files re-read (" << t.reloaded.size() << " contexts)" << std::endl;
    }
    // The file's upstreams, routes and dns (a new route table) and its rules (a file source) or
    // MySQL's. With the file source the table is applied inside the rules' load, after the rules
    // loaded and before they are swapped in: a file that does not parse, whose rules are rejected
    // or whose table cannot be made (a TLS file that does not load) is refused whole, counted as
    // a failed load, and table and rules both stay.
    auto apply_table = [this] {
      const config::GatewayConfig next = config::load_gateway_config(cfg.path);
      if (proxy->replace_routes(next))
        std::cout << "tollgate: SIGHUP: route table replaced (" << next.upstreams.size() << " upstreams, "
                  << next.routes.size() << " routes); requests in flight finish on the old one" << std::endl;
    };
    config::ReloadResult r;
    if (cfg.limits.source == config::RuleSource::file) {
      r = config_manager->reload(apply_table);
      if (!r.ok)
        std::cout << "tollgate: SIGHUP: reload failed, keeping config v" << r.version << " and the route table: " << r.error
                  << std::endl;
    } else {
      try {
        apply_table();
      } catch (const std::exception& e) {
        std::cout << "tollgate: SIGHUP: " << cfg.path << " refused, keeping the route table: " << e.what() << std::endl;
      }
      r = config_manager->reload();
      if (!r.ok) std::cout << "tollgate: SIGHUP: reload failed, keeping config v" << r.version << ": " << r.error << std::endl;
    }
    if (r.ok) std::cout << "tollgate: SIGHUP: config v" << r.version << " loaded" << std::endl;
    if (std::ifstream in{cfg.path}) {
      const std::string now{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      const std::vector<std::string> fields = config::fields_needing_restart(cfg.text, now);
      if (!fields.empty()) {
        std::string list;
        for (const auto& f : fields) list += (list.empty() ? "" : ", ") + f;
        std::cout << "tollgate: SIGHUP: " << cfg.path << " changes " << list
                  << ": read only at start, so not applied; running with the values it started with until a restart"
                  << std::endl;
      }
    }
  }

  // One history sample a second, on the admin thread (it only reads counters: never blocks), on
  // a fixed grid so that samples do not drift.
  void sample_history(std::chrono::steady_clock::time_point due) {
    const auto wall = std::chrono::system_clock::now().time_since_epoch();
    history->sample(std::chrono::duration_cast<std::chrono::milliseconds>(wall).count());
    auto next = due + std::chrono::seconds(1);
    if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    history_timer->expires_at(next);
    history_timer->async_wait([this, next](const boost::system::error_code& ec) {
      if (!ec) sample_history(next);
    });
  }

  Impl(config::GatewayConfig c, bool check_only) : cfg(std::move(c)), switch_state(cfg.limits.switch_mode, "file") {
    (void)proxy::trusted_proxies_from(cfg.proxy.trusted_proxies);  // checked here too, so --check sees it
    tls = std::make_unique<proxy::TlsProfiles>(cfg, metrics);
    // The file's rules: the configuration itself (file source) or the fallback (MySQL source).
    // Either way they are checked strictly: a bad file stops the start with the reason.
    config::LoadResult from_file = config::FileSource::from_rows(cfg.limits.rows, cfg.limits.switch_mode);
    if (cfg.limits.source == config::RuleSource::mysql) {
      mysql = std::make_shared<config::MysqlSource>(cfg.limits.mysql);
      config_manager = std::make_unique<config::ConfigManager>(
          mysql, snapshots, switch_state, std::chrono::milliseconds(cfg.limits.mysql.poll_interval_ms));
      if (check_only) {
        config_manager->install(checked_mysql_rows(*mysql), mysql->describe(), false);
      } else if (const config::ReloadResult first = config_manager->reload(); !first.ok) {
        std::cerr << "tollgate: warn: MySQL unreachable at start; serving the " << from_file.rules.rules.size()
                  << " rules of " << cfg.path << " until it answers (retrying with backoff)" << std::endl;
        config_manager->install(std::move(from_file.rules), "file-fallback:" + cfg.path, true);
      }
    } else {
      config_manager = std::make_unique<config::ConfigManager>(
          std::make_shared<config::FileSource>(cfg.path), snapshots, switch_state, std::chrono::milliseconds(1000));
      config_manager->install(std::move(from_file.rules), "file:" + cfg.path, false);
    }
    warn_choosable_classes(snapshots.get().get(), cfg.proxy.trusted_proxies);
  }

  std::unique_ptr<store::BucketStore> make_store(const std::vector<net::io_context*>& ctxs) {
    if (cfg.limits.store != config::StoreKind::redis) return std::make_unique<store::LocalStore>(clock, cfg.limits.max_client_keys);
    const auto& rc = cfg.limits.redis;
    store::RedisOptions o;
    o.mode = rc.mode == config::RedisMode::cluster    ? store::RedisMode::cluster
             : rc.mode == config::RedisMode::sentinel ? store::RedisMode::sentinel
                                                      : store::RedisMode::standalone;
    o.host = rc.host;
    o.port = rc.port;
    for (const auto& e : rc.mode == config::RedisMode::cluster ? rc.nodes : rc.sentinels) o.seeds.push_back({e.host, e.port});
    o.master_name = rc.master_name;
    o.sentinel_password = rc.sentinel_password;
    o.password = rc.password;
    o.database = rc.database;
    o.key_prefix = rc.key_prefix;
    o.decision_timeout_ms = rc.decision_timeout_ms;
    o.connect_timeout_ms = rc.connect_timeout_ms;
    o.heartbeat_ms = rc.heartbeat_ms;
    auto shared = std::make_unique<store::RedisStore>(o, ctxs, clock);
    redis = shared.get();
    const store::FailurePolicy policy = rc.failure_policy == config::FailurePolicy::fail_closed ? store::FailurePolicy::fail_closed
                                        : rc.failure_policy == config::FailurePolicy::local     ? store::FailurePolicy::local
                                                                                                : store::FailurePolicy::fail_open;
    // The `local` policy's buckets: this instance's share of each limit while Redis is down.
    std::unique_ptr<store::BucketStore> fallback;
    if (policy == store::FailurePolicy::local)
      fallback = std::make_unique<store::LocalStore>(clock, cfg.limits.max_client_keys);
    redis->start();
    return std::make_unique<store::FailurePolicyStore>(std::move(shared), std::move(fallback), policy,
                                                       rc.local_divisor,
                                                       [r = redis] { return r->live_instances(); });
  }
};

namespace {

bool is_loopback(const std::string& host) {
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  return !ec && addr.is_loopback();
}

// Where a browser on this host reaches the admin listener: a wildcard address prints as loopback.
std::string console_host(const std::string& host) {
  if (host == "0.0.0.0" || host.empty()) return "127.0.0.1";
  if (host == "::") return "[::1]";
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Every client connection is a descriptor, and so is every upstream connection, the listeners,
// the log files and the store and database connections. The soft limit is raised to the hard one;
// if proxy.max_connections still does not fit under it with room for the rest, it is lowered (and
// said), so that the gateway answers 429 at its cap instead of failing accept() with EMFILE.
void fit_connections_to_fd_limit(config::GatewayConfig& cfg, unsigned threads) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur == RLIM_INFINITY) return;
  // Room kept: the idle upstream pools (per thread and upstream), 64 for listeners, epoll and
  // event descriptors, logs, Redis and MySQL connections, and the admin listener's own: its
  // connections and the few it answers 503 at its cap. The proxy's cap is what is left, so a full
  // proxy side never takes the descriptors the admin listener needs, nor the reverse.
  const std::uint64_t admin_reserve = std::uint64_t{cfg.admin.max_connections} + admin::kAdminRefusalDescriptors;
  const std::uint64_t reserve =
      64 + admin_reserve +
      static_cast<std::uint64_t>(threads) * cfg.upstreams.size() * (cfg.proxy.max_idle_upstream_conns + 2);
  const std::uint64_t room = rl.rlim_cur > reserve * 2 ? rl.rlim_cur - reserve : rl.rlim_cur / 2;
  if (cfg.proxy.max_connections <= room) return;
  std::cerr << "tollgate: warn: proxy.max_connections " << cfg.proxy.max_connections << " does not fit the open-file limit "
            << rl.rlim_cur << " (RLIMIT_NOFILE) with " << reserve
            << " descriptors kept for upstreams, stores, logs and the admin listener; using "
            << room << " (raise the limit, e.g. LimitNOFILE= or ulimit -n, to allow more)" << std::endl;
  cfg.proxy.max_connections = static_cast<std::uint32_t>(room);
}

}  // namespace

Gateway::Gateway(config::GatewayConfig config, bool check_only)
    : impl_(std::make_unique<Impl>(std::move(config), check_only)) {}
Gateway::~Gateway() = default;

void Gateway::start() {
  auto& m = *impl_;
  // OpenSSL writes TLS connections' descriptors itself: a peer gone mid-write must be an error
  // (EPIPE), not a signal that ends the process.
  std::signal(SIGPIPE, SIG_IGN);
  unsigned n = m.cfg.threads ? m.cfg.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<net::io_context*> raw;
  for (unsigned i = 0; i < n; ++i) {
    // Each context runs on one thread and owns its sockets and timers, so the reactor needs no
    // locking for I/O (posts from other threads stay safe: the scheduler still locks).
    m.contexts.push_back(std::make_unique<net::io_context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO));
    m.guards.push_back(net::make_work_guard(*m.contexts.back()));
    raw.push_back(m.contexts.back().get());
  }
  fit_connections_to_fd_limit(m.cfg, n);
  m.store = m.make_store(raw);
  m.access_log = std::make_unique<proxy::AccessLog>(m.cfg.access_log, &m.metrics.access_log_dropped);
  m.proxy = std::make_unique<proxy::ProxyServer>(
      raw, proxy::ProxyDeps{m.cfg, m.snapshots, m.switch_state, *m.store, m.metrics, m.access_log.get(), &m.refusals, m.tls.get()});
  m.proxy->start();
  m.history = std::make_unique<admin::History>(m.metrics, m.snapshots);
  m.history_timer = std::make_unique<net::steady_timer>(m.admin_ctx);
  m.sample_history(std::chrono::steady_clock::now());
  m.admin_api = std::make_unique<admin::AdminApi>(admin::AdminDeps{m.snapshots, m.switch_state, *m.store, m.metrics,
                                                                   m.cfg.admin.token, m.cfg.admin.token_name,
                                                                   m.config_manager.get(), m.mysql.get(),
                                                                   &m.draining,
                                                                   [&m](std::int64_t after_ms, std::function<void()> f) {
                                                                     // Called from the admin worker thread: the
                                                                     // timer is made on the admin thread itself.
                                                                     net::post(m.admin_ctx, [&m, after_ms, f] {
                                                                       auto t = std::make_shared<net::steady_timer>(
                                                                           m.admin_ctx, std::chrono::milliseconds(after_ms));
                                                                       t->async_wait([t, f](auto ec) {
                                                                         if (!ec) f();
                                                                       });
                                                                     });
                                                                   },
                                                                   m.history.get(), &m.refusals, m.tls.get(),
                                                                   [&m] { return m.proxy->upstreams_view(); },
                                                                   [&m] { m.proxy->refresh_endpoint_gauges(); }});
  m.admin_server = std::make_unique<admin::AdminServer>(
      m.admin_ctx, m.cfg.admin.listen, [api = m.admin_api.get()](const admin::SimpleRequest& r) { return api->handle(r); },
      &admin::AdminApi::runs_inline,
      admin::AdminServerOptions{m.cfg.admin.max_connections, m.cfg.admin.allowed_hosts, &m.metrics.registry});
  m.admin_server->start();
  m.config_manager->start();
  m.signals = std::make_unique<net::signal_set>(m.admin_ctx, SIGINT, SIGTERM, SIGHUP);
  if (m.cfg.admin.token.empty() && !is_loopback(m.cfg.admin.listen.host))
    std::cerr << "tollgate: warn: the admin listener " << m.cfg.admin.listen.to_string()
              << " is reachable beyond this host and no admin token is set ($" << m.cfg.admin.token_env
              << "): anyone who reaches it can read rules, buckets and metrics (changes stay refused)" << std::endl;

  const auto snap = m.snapshots.get();
  std::size_t enabled = 0;
  for (const auto& r : snap->rules) enabled += r.enabled ? 1 : 0;
  std::cout << "tollgate: proxy listening on " << m.cfg.listen.host << ":" << m.proxy->port() << " (" << n
            << " threads" << (m.cfg.tls.enabled() ? ", HTTPS" : "") << ")\n"
            << "tollgate: admin listening on " << m.cfg.admin.listen.host << ":" << m.admin_server->port()
            << (m.cfg.admin.token.empty() ? " (read-only: $" + m.cfg.admin.token_env + " is not set)" : "") << "\n"
            << "tollgate: console at http://" << console_host(m.cfg.admin.listen.host) << ":" << m.admin_server->port()
            << "/\n"
            << "tollgate: " << enabled << " enabled rules from " << snap->source << ", switch "
            << config::switch_mode_name(m.switch_state.mode()) << ", store " << m.store->name();
  if (const auto* policy = dynamic_cast<const store::FailurePolicyStore*>(m.store.get()))
    std::cout << " (failure policy " << store::failure_policy_name(policy->policy()) << ")";
  std::cout << "\n"
            << "tollgate: ready" << std::endl;
}

int Gateway::run() {
  auto& m = *impl_;
  net::signal_set& signals = *m.signals;
  net::steady_timer drain_timer(m.admin_ctx);
  std::chrono::steady_clock::time_point drain_deadline;
  auto stop_everything = [&m] {
    m.admin_server->stop();
    for (auto& c : m.contexts) c->stop();
    m.admin_ctx.stop();
  };
  // Polls until every client connection is gone (held and in-flight requests answered) or the
  // drain deadline passes.
  std::function<void()> check_drained = [&] {
    const auto open = static_cast<std::int64_t>(m.metrics.connections.Value());
    if (open == 0 || std::chrono::steady_clock::now() >= drain_deadline) {
      if (open > 0) std::cout << "tollgate: drain deadline reached, closing " << open << " connections" << std::endl;
      else std::cout << "tollgate: drained" << std::endl;
      stop_everything();
      return;
    }
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) check_drained();
    });
  };
  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                              int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      m.reload_on_sighup();
      signals.async_wait(on_signal);
      return;
    }
    if (m.draining.load()) {  // a second SIGTERM/SIGINT: stop now
      std::cout << "tollgate: signal " << sig << " again, stopping now" << std::endl;
      stop_everything();
      return;
    }
    std::cout << "tollgate: signal " << sig << ", draining (up to " << m.cfg.proxy.drain_timeout_ms << " ms)"
              << std::endl;
    m.draining.store(true);
    m.proxy->drain();
    drain_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(m.cfg.proxy.drain_timeout_ms);
    check_drained();
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);
  std::vector<std::thread> threads;
  for (auto& c : m.contexts) threads.emplace_back([ctx = c.get()] { ctx->run(); });
  m.admin_ctx.run();
  for (auto& c : m.contexts) c->stop();
  for (auto& t : threads) t.join();
  m.config_manager->stop();
  if (m.redis) m.redis->stop();
  return 0;
}

}  // namespace tollgate::app

#include "resolver.hpp"

#include <ares.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "tollgate/limiter/clock.hpp"
#include "tollgate/log_line.hpp"

namespace tollgate::proxy {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kMinRefresh{1000};

// c-ares's servers string: "ip:port,[ipv6]:port".
std::string servers_csv(const config::DnsConfig& dns) {
  std::string out;
  for (const auto& s : dns.servers) {
    if (!out.empty()) out += ',';
    out += s.host.find(':') != std::string::npos ? "[" + s.host + "]" : s.host;
    out += ':' + std::to_string(s.port);
  }
  return out;
}

}  // namespace

struct Resolver::Impl {
  struct Name {
    UpstreamEndpoints* up;
    std::size_t target;
    std::string host;
    std::uint16_t port;
    std::chrono::milliseconds refresh;
    Clock::time_point due;
    bool in_flight = false;
    bool answered = false;  // once, success or failure (start() waits for it)
    bool failing = false;   // in a failure episode (logged once)
    Impl* impl;
  };

  config::DnsConfig dns;
  std::vector<UpstreamEndpoints*> upstreams;
  std::vector<Name> names;
  ares_channel channel = nullptr;
  int wake_fd = -1;
  std::thread thread;
  std::mutex mu;
  std::condition_variable first_cv;
  std::size_t unanswered = 0;  // under mu
  bool stopping = false;       // under mu

  ~Impl() {
    if (channel) ares_destroy(channel);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  static void on_answer(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
    Name& n = *static_cast<Name*>(arg);
    n.impl->answer(n, status, res);
    if (res) ares_freeaddrinfo(res);
  }

  void answer(Name& n, int status, ares_addrinfo* res) {
    n.in_flight = false;
    if (status == ARES_EDESTRUCTION) return;
    std::vector<tcp::endpoint> addrs;
    int ttl = -1;
    if (status == ARES_SUCCESS && res) {
      for (ares_addrinfo_node* a = res->nodes; a; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
          const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
          net::ip::address_v4::bytes_type b;
          std::memcpy(b.data(), &sin->sin_addr, 4);
          addrs.emplace_back(net::ip::address_v4(b), n.port);
        } else if (a->ai_family == AF_INET6) {
          const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
          net::ip::address_v6::bytes_type b;
          std::memcpy(b.data(), &sin6->sin6_addr, 16);
          addrs.emplace_back(net::ip::address_v6(b, sin6->sin6_scope_id), n.port);
        } else {
          continue;
        }
        if (a->ai_ttl > 0) ttl = ttl < 0 ? a->ai_ttl : std::min(ttl, a->ai_ttl);
      }
    }
    std::chrono::milliseconds next = n.refresh;
    const std::string& upstream = n.up->conf().name;
    if (addrs.empty()) {
      n.up->metrics().dns_failures->Increment();
      if (!n.failing) {
        const char* why = status == ARES_SUCCESS ? "no address in the answer" : ares_strerror(status);
        log_line("tollgate: warn: upstream '", upstream, "': cannot resolve ", n.host, ": ", why,
                 n.up->resolved() ? "; keeping its last good addresses" : "; its requests get 503 until it resolves");
      }
      n.failing = true;
    } else {
      if (n.failing) log_line("tollgate: upstream '", upstream, "': ", n.host, " resolves again");
      n.failing = false;
      if (ttl >= 0) next = std::min<std::chrono::milliseconds>(next, std::chrono::seconds(ttl));
      if (n.up->set_addresses(n.target, std::move(addrs))) {
        std::uint64_t v = 0;
        const auto set = n.up->current(v);
        std::string list;
        for (const auto& e : set->endpoints) list += (list.empty() ? "" : ", ") + e->label;
        log_line("tollgate: upstream '", upstream, "': ", n.host, " now gives endpoints ", list);
      }
    }
    n.due = Clock::now() + std::max(next, kMinRefresh);
    if (!n.answered) {
      n.answered = true;
      std::lock_guard lock(mu);
      if (--unanswered == 0) first_cv.notify_all();
    }
  }

  void ask(Name& n) {
    n.in_flight = true;
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    ares_getaddrinfo(channel, n.host.c_str(), nullptr, &hints, &Impl::on_answer, &n);
  }

  void run() {
    auto last_gauges = Clock::now();
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (stopping) break;
      }
      auto now = Clock::now();
      for (auto& n : names)
        if (!n.in_flight && n.due <= now) ask(n);
      if (now - last_gauges >= std::chrono::milliseconds(500)) {
        last_gauges = now;
        for (auto* u : upstreams) u->refresh_gauges(limiter::steady_now_us());
      }
      // Sleep until the next name is due, c-ares's own timeout, the next gauge pass or a wake-up.
      auto wake = now + std::chrono::milliseconds(500);
      for (const auto& n : names)
        if (!n.in_flight) wake = std::min(wake, n.due);
      int timeout_ms = static_cast<int>(
          std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count()));
      timeval maxtv{timeout_ms / 1000, (timeout_ms % 1000) * 1000}, tv{};
      if (const timeval* t = ares_timeout(channel, &maxtv, &tv)) timeout_ms = static_cast<int>(t->tv_sec * 1000 + (t->tv_usec + 999) / 1000);
      ares_socket_t socks[ARES_GETSOCK_MAXNUM];
      const int bits = ares_getsock(channel, socks, ARES_GETSOCK_MAXNUM);
      std::vector<pollfd> fds;
      fds.push_back({wake_fd, POLLIN, 0});
      for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
        short ev = 0;
        if (ARES_GETSOCK_READABLE(bits, i)) ev |= POLLIN;
        if (ARES_GETSOCK_WRITABLE(bits, i)) ev |= POLLOUT;
        if (ev) fds.push_back({socks[i], ev, 0});
      }
      ::poll(fds.data(), fds.size(), timeout_ms);
      if (fds[0].revents & POLLIN) {
        std::uint64_t v;
        (void)!::read(wake_fd, &v, sizeof v);
      }
      bool any = false;
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        any = true;
        ares_process_fd(channel, (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) ? fds[i].fd : ARES_SOCKET_BAD,
                        (fds[i].revents & POLLOUT) ? fds[i].fd : ARES_SOCKET_BAD);
      }
      if (!any) ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
    }
  }
};

Resolver::Resolver(const config::DnsConfig& dns, std::vector<UpstreamEndpoints*> upstreams)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.dns = dns;
  m.upstreams = std::move(upstreams);
  for (auto* u : m.upstreams) {
    const auto& targets = u->conf().targets;
    for (std::size_t t = 0; t < targets.size(); ++t) {
      const auto& tg = targets[t];
      if (tg.ip_literal) {
        u->set_addresses(t, {tcp::endpoint(net::ip::make_address(tg.host), tg.port)});
        continue;
      }
      m.names.push_back({u, t, tg.host, tg.port, std::chrono::milliseconds(u->conf().dns_refresh_ms), Clock::now(),
                         false, false, false, &m});
    }
  }
  m.unanswered = m.names.size();
}

Resolver::~Resolver() { stop(); }

void Resolver::start(std::chrono::milliseconds first) {
  Impl& m = *impl_;
  // With IP literals only there is nothing to resolve, but the thread still follows ejections
  // that end (their gauges and log lines).
  static std::once_flag init;
  std::call_once(init, [] { ares_library_init(ARES_LIB_INIT_ALL); });
  ares_options opts{};
  opts.timeout = 1000;  // per try, ms
  opts.tries = 2;
  if (const int rc = ares_init_options(&m.channel, &opts, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES); rc != ARES_SUCCESS)
    throw std::runtime_error(std::string("cannot start the DNS resolver: ") + ares_strerror(rc));
  if (!m.dns.servers.empty()) {
    const std::string csv = servers_csv(m.dns);
    if (const int rc = ares_set_servers_ports_csv(m.channel, csv.c_str()); rc != ARES_SUCCESS)
      throw std::runtime_error("dns.servers: c-ares refuses '" + csv + "': " + ares_strerror(rc));
  }
  m.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  m.thread = std::thread([&m] { m.run(); });
  if (m.names.empty()) return;
  std::unique_lock lock(m.mu);
  m.first_cv.wait_for(lock, first, [&m] { return m.unanswered == 0; });
}

void Resolver::stop() {
  Impl& m = *impl_;
  if (!m.thread.joinable()) return;
  {
    std::lock_guard lock(m.mu);
    m.stopping = true;
  }
  const std::uint64_t one = 1;
  (void)!::write(m.wake_fd, &one, sizeof one);
  m.thread.join();
}

}  // namespace tollgate::proxy

#include "support/dns.hpp"

#include "support/http_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

namespace tollgate::testing {

namespace {

void put16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}

std::uint16_t get16(const std::string& m, std::size_t at) {
  return static_cast<std::uint16_t>((static_cast<unsigned char>(m[at]) << 8) | static_cast<unsigned char>(m[at + 1]));
}

std::uint32_t get32(const std::string& m, std::size_t at) {
  return (static_cast<std::uint32_t>(get16(m, at)) << 16) | get16(m, at + 2);
}

// The position after the (possibly compressed) name at `at`, or npos when it runs off the message.
std::size_t skip_name(const std::string& m, std::size_t at) {
  while (at < m.size()) {
    const auto len = static_cast<unsigned char>(m[at]);
    if (len == 0) return at + 1;
    if ((len & 0xc0) == 0xc0) return at + 2 <= m.size() ? at + 2 : std::string::npos;  // a pointer ends the name
    at += 1 + len;
  }
  return std::string::npos;
}

// A query with one question, recursion desired.
std::string build_query(std::uint16_t id, const std::string& name, std::uint16_t type) {
  std::string q;
  put16(q, id);
  put16(q, 0x0100);  // RD
  put16(q, 1);       // QDCOUNT
  put16(q, 0);
  put16(q, 0);
  put16(q, 0);
  std::size_t start = 0;
  while (start < name.size()) {
    std::size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    const std::size_t len = dot - start;
    if (len == 0 || len > 63) throw std::invalid_argument("bad DNS name: " + name);
    q.push_back(static_cast<char>(len));
    q.append(name, start, len);
    start = dot + 1;
  }
  q.push_back('\0');
  put16(q, type);
  put16(q, 1);  // IN
  return q;
}

// The answer to query `id`, or nullopt when the message is not one (or is cut short).
std::optional<DnsAnswer> parse_response(const std::string& m, std::uint16_t id, std::uint16_t type) {
  if (m.size() < 12 || get16(m, 0) != id || (static_cast<unsigned char>(m[2]) & 0x80) == 0) return std::nullopt;
  DnsAnswer a;
  a.rcode = static_cast<unsigned char>(m[3]) & 0x0f;
  a.truncated = (static_cast<unsigned char>(m[2]) & 0x02) != 0;
  const std::uint16_t qd = get16(m, 4);
  const std::uint16_t an = get16(m, 6);
  std::size_t at = 12;
  for (std::uint16_t i = 0; i < qd; ++i) {
    at = skip_name(m, at);
    if (at == std::string::npos || at + 4 > m.size()) return std::nullopt;
    at += 4;
  }
  bool first = true;
  for (std::uint16_t i = 0; i < an; ++i) {
    at = skip_name(m, at);
    if (at == std::string::npos || at + 10 > m.size()) return std::nullopt;
    const std::uint16_t rtype = get16(m, at);
    const std::uint32_t ttl = get32(m, at + 4);
    const std::uint16_t rdlen = get16(m, at + 8);
    at += 10;
    if (at + rdlen > m.size()) return std::nullopt;
    if (rtype == type && ((type == kDnsTypeA && rdlen == 4) || (type == kDnsTypeAAAA && rdlen == 16))) {
      char text[INET6_ADDRSTRLEN] = {};
      inet_ntop(type == kDnsTypeA ? AF_INET : AF_INET6, m.data() + at, text, sizeof text);
      a.addresses.emplace_back(text);
      a.min_ttl = first ? ttl : std::min(a.min_ttl, ttl);
      first = false;
    }
    at += rdlen;
  }
  return a;
}

// A port free on 127.0.0.1 for both UDP and TCP at the time of the call.
int free_udp_tcp_port() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int u = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (u < 0 || ::bind(u, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(u, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (u >= 0) ::close(u);
      continue;
    }
    const int t = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool both = t >= 0 && ::bind(t, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (t >= 0) ::close(t);
    ::close(u);
    if (both) return ntohs(a.sin_port);
  }
  throw std::runtime_error("no port free for both UDP and TCP on 127.0.0.1");
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

bool is_ipv6(const std::string& address) { return address.find(':') != std::string::npos; }

// One read from `fd` within what is left until `deadline`; nullopt when the time is up, the
// socket failed (ECONNREFUSED: nobody on the port) or, over TCP, the peer closed.
std::optional<std::string> read_some_by(int fd, std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  if (left <= 0) return std::nullopt;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left)) <= 0) return std::nullopt;
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  if (n <= 0) return std::nullopt;
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace

std::optional<DnsAnswer> dns_query(int port, const std::string& name, std::uint16_t type,
                                   std::chrono::milliseconds timeout) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  const auto id = static_cast<std::uint16_t>(rng());
  const std::string q = build_query(id, name, type);
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Connected: only the server's datagrams arrive, and a closed port reports ECONNREFUSED.
  std::optional<DnsAnswer> out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 && ::send(fd, q.data(), q.size(), 0) >= 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (const auto datagram = read_some_by(fd, deadline))
      if ((out = parse_response(*datagram, id, type))) break;
  }
  ::close(fd);
  return out;
}

std::optional<DnsAnswer> dns_query_tcp(int port, const std::string& name, std::uint16_t type,
                                       std::chrono::milliseconds timeout) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  const auto id = static_cast<std::uint16_t>(rng());
  const std::string q = build_query(id, name, type);
  std::string framed;  // over TCP each message follows its length
  put16(framed, static_cast<std::uint16_t>(q.size()));
  framed += q;
  const int fd = connect_loopback(port);
  if (fd < 0) return std::nullopt;
  std::optional<DnsAnswer> out;
  if (::send(fd, framed.data(), framed.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(framed.size())) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string in;
    for (;;) {
      if (in.size() >= 2 && in.size() >= 2u + get16(in, 0)) {
        out = parse_response(in.substr(2, get16(in, 0)), id, type);
        break;
      }
      const auto more = read_some_by(fd, deadline);
      if (!more) break;
      in += *more;
    }
  }
  ::close(fd);
  return out;
}

bool Dnsmasq::available() { return ::access(kBinary, X_OK) == 0; }

Dnsmasq::Dnsmasq() : dir_(temp_dir()) { start(); }

Dnsmasq::Dnsmasq(const std::string& name, std::vector<std::string> addresses) : dir_(temp_dir()) {
  if (!addresses.empty()) names_[name] = std::move(addresses);
  start();
}

void Dnsmasq::start() {
  write_hosts();
  // The port is free when picked, but another process may take it before dnsmasq binds it: a
  // failed bind gets a new one.
  for (int attempt = 1;; ++attempt) {
    port_ = free_udp_tcp_port();
    // -d (--no-daemon): in the foreground, logging to stderr (--log-facility=-), no pid file and no
    // change of user, so it runs as whoever runs the tests (root on CI included: it then keeps
    // reading the hosts file in this private directory). -C /dev/null: no system configuration.
    // --local=/#/: every name is local, so a name missing from the file gets NXDOMAIN (not
    // REFUSED for want of an upstream server). --cache-size=0, --local-ttl=1, --neg-ttl=1: answers
    // come from the file as it is now, and say so for at most a second.
    proc_ = std::make_unique<Process>(std::vector<std::string>{
        kBinary, "-d", "-C", "/dev/null", "--log-facility=-", "--no-resolv", "--no-hosts", "--no-poll",
        "--addn-hosts=" + dir_ + "/hosts", "--local=/#/", "--port=" + std::to_string(port_),
        "--listen-address=127.0.0.1", "--bind-interfaces", "--cache-size=0", "--local-ttl=1", "--neg-ttl=1",
        "--pid-file=" + dir_ + "/dnsmasq.pid"});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool exited = false;
    for (;;) {
      // Any answer (NXDOMAIN for this name) shows it is serving.
      if (dns_query(port_, "probe.tollgate-dns-helper.invalid", kDnsTypeA, std::chrono::milliseconds(200))) return;
      if (proc_->wait_exit(std::chrono::milliseconds(0))) {
        exited = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
    }
    proc_->wait_for_line("\n", std::chrono::milliseconds(50));  // collect what it said
    const std::string why = proc_->output();
    proc_.reset();
    if (exited && why.find("in use") != std::string::npos && attempt < 5) continue;
    port_ = -1;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // the destructor does not run
    throw std::runtime_error(std::string("dnsmasq did not start") + (exited ? "" : " (no answer in 10 s)") + ": " + why);
  }
}

Dnsmasq::~Dnsmasq() {
  proc_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void Dnsmasq::write_hosts() const {
  std::string text;
  for (const auto& [name, addresses] : names_)
    for (const auto& a : addresses) text += a + " " + name + "\n";
  // A whole new file renamed into place: the server never reads half of one.
  write_file(dir_ + "/hosts.new", text);
  std::filesystem::rename(dir_ + "/hosts.new", dir_ + "/hosts");
}

bool Dnsmasq::answers_as_configured(const std::string& name) const {
  const auto it = names_.find(name);
  std::vector<std::string> v4, v6;
  if (it != names_.end())
    for (const auto& a : it->second) (is_ipv6(a) ? v6 : v4).push_back(a);
  const auto a = dns_query(port_, name, kDnsTypeA, std::chrono::milliseconds(500));
  if (!a) return false;
  if (v4.empty() && v6.empty()) return a->rcode == 3;  // removed: NXDOMAIN
  if (a->rcode != 0 || sorted(a->addresses) != sorted(v4)) return false;
  if (v6.empty()) return true;
  const auto aaaa = dns_query(port_, name, kDnsTypeAAAA, std::chrono::milliseconds(500));
  return aaaa && aaaa->rcode == 0 && sorted(aaaa->addresses) == sorted(v6);
}

void Dnsmasq::set(const std::string& name, std::vector<std::string> addresses) {
  if (!proc_) throw std::runtime_error("dnsmasq is stopped");
  if (addresses.empty()) names_.erase(name);
  else names_[name] = std::move(addresses);
  write_hosts();
  proc_->signal(SIGHUP);  // clears the cache and reads the hosts file again
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!answers_as_configured(name)) {
    if (std::chrono::steady_clock::now() >= deadline)
      throw std::runtime_error("dnsmasq does not answer for " + name + " as set within 10 s: " + output());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Dnsmasq::stop() {
  if (!proc_) return;
  proc_->signal(SIGTERM);
  proc_->wait_exit(std::chrono::seconds(5));
  last_output_ = proc_->output();
  proc_.reset();  // SIGKILL if it did not exit
}

std::string Dnsmasq::output() const {
  if (!proc_) return last_output_;
  proc_->wait_for_line("\x01", std::chrono::milliseconds(20));  // reads what is pending
  return proc_->output();
}

}  // namespace tollgate::testing

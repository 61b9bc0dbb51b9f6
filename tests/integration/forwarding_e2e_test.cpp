// What a forwarded request carries and how far it goes, end to end: the real gateway, the mock
// upstream, and sockets of this process that stand in for a path back to the gateway (a relay)
// or for suppliers whose addresses drop SYNs (listeners whose backlog is full).
//
//   - loops: a request that comes back to the gateway (its Via names it) is answered 508 at the
//     first hop, not forwarded a thousand times; the listener's own address is never an endpoint;
//     Via names every hop;
//   - failovers: however many endpoints drop SYNs, a caller has its 504 within the response
//     timeout, and no more endpoints are tried than upstreams.<name>.max_attempts; the permit goes
//     back each time;
//   - spellings: a field name with '_' is dropped (or refused, or let by), and the credential's
//     name under another spelling never reaches the supplier.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kSearch = "/shopping/search";  // base_config's rule: each admitted request takes a permit

double series_or_zero(const GatewayProcess& gw, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  return metric_series(gw, name, labels).value_or(0);
}

bool has_problem_code(const std::string& body, const std::string& code) {
  const json j = json::parse(body, nullptr, false);
  return j.is_object() && j.contains("error") && j["error"] == code;
}

// A TCP relay on 127.0.0.1: every connection it accepts is joined to a new one to the target
// port, bytes passed both ways as they come. A gateway whose upstream is the relay and the relay's
// target the gateway reaches itself by an address that is not its listener's.
class Relay {
 public:
  Relay() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listen_fd_, 512) != 0) return;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (const auto& [a, b] : pairs_) {
      ::close(a);
      ::close(b);
    }
    ::close(listen_fd_);
  }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  int port() const { return port_; }
  void target(int port) { target_ = port; }
  int accepted() const { return accepted_; }

 private:
  void run() {
    char buf[65536];
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (const auto& [a, b] : pairs_) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      std::vector<std::size_t> closed;
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        for (int side = 0; side < 2; ++side) {
          if (fds[1 + 2 * i + static_cast<std::size_t>(side)].revents == 0) continue;
          const int from = side == 0 ? pairs_[i].first : pairs_[i].second;
          const int to = side == 0 ? pairs_[i].second : pairs_[i].first;
          const ssize_t n = ::recv(from, buf, sizeof buf, 0);
          if (n <= 0 || send_all(to, std::string_view(buf, static_cast<std::size_t>(n))) != 0) {
            closed.push_back(i);
            break;
          }
        }
      }
      for (std::size_t k = closed.size(); k-- > 0;) {
        ::close(pairs_[closed[k]].first);
        ::close(pairs_[closed[k]].second);
        pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(closed[k]));
      }
      if (fds[0].revents & POLLIN) {
        const int in = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (in < 0) continue;
        ++accepted_;
        const int out = connect_loopback(target_);
        if (out < 0) {
          ::close(in);
          continue;
        }
        pairs_.emplace_back(in, out);
      }
    }
  }

  int listen_fd_ = -1;
  int port_ = -1;
  std::atomic<int> target_{0};
  std::atomic<int> accepted_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::pair<int, int>> pairs_;  // (accepted, to the target): the relay thread's
  std::thread thread_;
};

// A listener on `host` whose accept queue is full and never drained: the kernel drops every
// further SYN to it, so a connection there neither succeeds nor fails until its timeout, as with a
// supplier address behind a firewall that drops packets.
struct SynDropper {
  int listen_fd = -1, filler_fd = -1, port = -1;
  explicit SynDropper(const std::string& host) {
    listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    socklen_t len = sizeof a;
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listen_fd, 0) != 0) return;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    // Backlog 0 holds one connection: this one, never accepted.
    filler_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(filler_fd, reinterpret_cast<sockaddr*>(&a), len) != 0) return;
    port = ntohs(a.sin_port);
  }
  ~SynDropper() {
    ::close(filler_fd);
    ::close(listen_fd);
  }
  SynDropper(const SynDropper&) = delete;
  SynDropper& operator=(const SynDropper&) = delete;
};

// Whether a connection to host:port stays unanswered for `wait` (neither accepted nor refused).
bool connect_hangs(const std::string& host, int port, std::chrono::milliseconds wait) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  pollfd p{fd, POLLOUT, 0};
  const bool hangs = rc != 0 && errno == EINPROGRESS && ::poll(&p, 1, static_cast<int>(wait.count())) == 0;
  ::close(fd);
  return hangs;
}

// The names of the fields the mock upstream received (?echo=1), in order, and their values.
std::vector<std::pair<std::string, std::string>> echoed_fields(const HttpResponse& r) {
  std::vector<std::pair<std::string, std::string>> out;
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("fields")) return out;
  for (const auto& f : j["fields"]) out.emplace_back(f[0].get<std::string>(), f[1].get<std::string>());
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// ---- loops ------------------------------------------------------------------------------------

// The upstream reaches the gateway's own listener through a relay (as a DNS answer or a proxy in
// between would): the listener's address is not the endpoint, so only Via can tell. The second
// arrival is answered 508, which goes back the way it came.
TEST(ForwardingLoop, ARequestThatComesBackIsAnswered508AtTheFirstHop) {
  Relay relay;
  ASSERT_GT(relay.port(), 0);
  GatewayProcess gw(base_config(relay.port()));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  relay.target(gw.port);

  const HttpResponse r = http_request(gw.port, {"GET", "/ibe/loop", {}, {}}, 20s);
  EXPECT_EQ(r.status, 508) << r.body << r.error;
  EXPECT_TRUE(has_problem_code(r.body, "loop_detected")) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/problem+json");
  // One hop: the gateway's one connection to the relay carried the request once.
  EXPECT_EQ(relay.accepted(), 1) << "the request went round the loop " << relay.accepted() << " times";
  EXPECT_EQ(series_or_zero(gw, "tollgate_loops_detected_total"), 1);
}

// The upstream's URL is the gateway's own listener (and a real supplier): that address is left
// out when it is resolved, logged and counted, and every request goes to the supplier.
TEST(ForwardingLoop, TheListenersOwnAddressIsNeverAnEndpoint) {
  MockUpstream m;
  ASSERT_GT(m.port, 0);
  ClosedPort own;  // the gateway's port, known before it starts
  const int port = own.port();
  own.release();
  json c = base_config(m.port);
  c["listen"] = "127.0.0.1:" + std::to_string(port);
  c["upstreams"]["ibe"] = {{"urls", {"http://127.0.0.1:" + std::to_string(port), "http://127.0.0.1:" + std::to_string(m.port)}}};
  GatewayProcess gw(c);
  ASSERT_EQ(gw.port, port) << gw.proc->output();

  int ok = 0;
  for (int i = 0; i < 20; ++i) ok += http_get(gw.port, "/ibe/booking").status == 200;
  EXPECT_EQ(ok, 20);
  EXPECT_EQ(m.count("/ibe/booking"), 20);
  // Twenty requests arrived at the gateway, none a second time (balancing to its own address would
  // bring some back, forwarded again, until the supplier's turn came).
  EXPECT_EQ(series_or_zero(gw, "tollgate_requests_total", {{"outcome", "unmatched"}}), 20);
  EXPECT_EQ(series_or_zero(gw, "tollgate_loops_detected_total"), 0) << "a request came back to the gateway";
  EXPECT_EQ(series_or_zero(gw, "tollgate_upstream_self_endpoints_refused_total", {{"upstream", "ibe"}}), 1);
  const std::string self = "127.0.0.1:" + std::to_string(port);
  EXPECT_FALSE(metric_series(gw, "tollgate_upstream_endpoint_up", {{"upstream", "ibe"}, {"endpoint", self}}).has_value());
  EXPECT_NE(gw.proc->read_available().find("gives " + self + ", the gateway's own listener: left out"), std::string::npos)
      << gw.proc->output();
}

// Via (RFC 9110 7.6.3): the client's elements, then this hop's, received over HTTP/1.1.
TEST(ForwardingLoop, ViaNamesThisHopAfterTheClientsOwn) {
  MockUpstream m;
  ASSERT_GT(m.port, 0);
  json c = base_config(m.port);
  c["proxy"]["via_pseudonym"] = "edge-7";
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  const HttpResponse r = http_request(gw.port, {"GET", "/ibe/via?echo=1", {{"Via", "1.0 corp-proxy"}}, {}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> via;
  for (const auto& [name, value] : echoed_fields(r))
    if (lower(name) == "via") via.push_back(value);
  EXPECT_EQ(via, std::vector<std::string>({"1.0 corp-proxy, 1.1 edge-7"}));
  // A request that names it (in any case, among others) was here before.
  const HttpResponse back = http_request(gw.port, {"GET", "/ibe/via", {{"Via", "1.1 corp-proxy, HTTP/1.1 EDGE-7 (tollgate)"}}, {}});
  EXPECT_EQ(back.status, 508) << back.body;
  EXPECT_EQ(m.count("/ibe/via"), 1);
}

// ---- failovers --------------------------------------------------------------------------------

// Eight addresses that drop SYNs, a 1 s connect timeout each and a 2.5 s response timeout: the
// caller has its 504 by the response timeout (the old code tried every address in turn: 8 s), and
// its permit goes back (nothing was sent).
TEST(FailoverBound, EndpointsDroppingSynsCostNoMoreThanTheResponseTimeout) {
  std::vector<std::unique_ptr<SynDropper>> dead;
  std::vector<std::string> urls;
  for (int i = 0; i < 8; ++i) {
    const std::string host = "127.0.0." + std::to_string(21 + i);
    dead.push_back(std::make_unique<SynDropper>(host));
    ASSERT_GT(dead.back()->port, 0) << host;
    ASSERT_TRUE(connect_hangs(host, dead.back()->port, 300ms)) << host << " does not drop SYNs here";
    urls.push_back("http://" + host + ":" + std::to_string(dead.back()->port));
  }
  json c = base_config(1);
  c["upstreams"]["ibe"] = {{"urls", urls}, {"connect_timeout_ms", 1000}, {"response_timeout_ms", 2500}};
  c["limits"]["rules"][0]["rateLimit"] = 100;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  for (int i = 0; i < 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const HttpResponse r = http_request(gw.port, {"GET", kSearch, {}, {}}, 20s);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    EXPECT_EQ(r.status, 504) << r.body << r.error;
    EXPECT_TRUE(has_problem_code(r.body, "upstream_timeout")) << r.body;
    // The response timeout, and a loaded machine's allowance; never a connect timeout per address.
    EXPECT_GE(took, 2400ms);
    EXPECT_LT(took, 4500ms) << "request " << i << " held its caller " << took.count() << " ms";
  }
  EXPECT_EQ(series_or_zero(gw, "tollgate_permits_returned_total"), 2);
}

// Eight refused addresses and max_attempts 2: each request tries two and gets its 502 at once,
// its permit given back.
TEST(FailoverBound, MaxAttemptsBoundsTheEndpointsARequestTries) {
  std::vector<std::unique_ptr<ClosedPort>> dead;
  std::vector<std::string> urls;
  for (int i = 0; i < 8; ++i) {
    dead.push_back(std::make_unique<ClosedPort>());
    urls.push_back("http://127.0.0.1:" + std::to_string(dead.back()->port()));
  }
  json c = base_config(1);
  c["upstreams"]["ibe"] = {{"urls", urls}, {"max_attempts", 2}, {"eject", {{"consecutive_failures", 0}}}};
  c["limits"]["rules"][0]["rateLimit"] = 100;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  constexpr int kRequests = 5;
  for (int i = 0; i < kRequests; ++i) {
    const HttpResponse r = http_request(gw.port, {"GET", kSearch, {}, {}});
    EXPECT_EQ(r.status, 502) << r.body << r.error;
    EXPECT_TRUE(has_problem_code(r.body, "upstream_unavailable")) << r.body;
  }
  EXPECT_EQ(series_or_zero(gw, "tollgate_upstream_failures_total", {{"upstream", "ibe"}, {"kind", "connect"}}), 2 * kRequests);
  EXPECT_EQ(series_or_zero(gw, "tollgate_upstream_failovers_total", {{"upstream", "ibe"}}), kRequests);
  EXPECT_EQ(series_or_zero(gw, "tollgate_permits_returned_total"), kRequests);
}

// ---- spellings --------------------------------------------------------------------------------

constexpr const char* kKey = "e2e-static-key-Xw7";

json keyed_config(const MockUpstream& m) {
  json c = base_config(m.port);
  c["upstreams"]["ibe"]["auth"] = {{"type", "header"}, {"name", "X-Api-Key"}, {"value_env", "E2E_KEY"}};
  return c;
}

const std::vector<std::pair<std::string, std::string>> kSpellings = {
    {"X_Api_Key", "callers-1"}, {"x_api-key", "callers-2"}, {"X_Forwarded_For", "10.9.9.9"}, {"X-Trace_Id", "t-1"},
    {"X-Trace-Id", "t-2"}};

// What the supplier received of the caller's fields above, and how many X-Api-Key fields.
struct Received {
  std::vector<std::string> names;  // lower case, of the ones above
  int keys = 0;                    // X-Api-Key fields, each the gateway's
  bool foreign_key = false;        // a key value that is not the gateway's
};
Received received(const HttpResponse& r) {
  Received out;
  for (const auto& [name, value] : echoed_fields(r)) {
    const std::string n = lower(name);
    if (n == "x-api-key") {
      ++out.keys;
      out.foreign_key = out.foreign_key || value != kKey;
    }
    for (const auto& [sent, v] : kSpellings)
      if (n == lower(sent) && n != "x-api-key") out.names.push_back(n);
  }
  return out;
}

TEST(UnderscoreHeaders, NamesWithUnderscoresAreDroppedAndTheCredentialIsTheGatewaysAlone) {
  MockUpstream m({"--auth", json{{"require_header", {{"name", "X-Api-Key"}, {"value", kKey}}}}.dump()});
  ASSERT_GT(m.port, 0);
  GatewayProcess gw(keyed_config(m), {{"E2E_KEY", kKey}});
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  const HttpResponse r = http_request(gw.port, {"GET", "/ibe/spell?echo=1", kSpellings, {}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Received got = received(r);
  EXPECT_EQ(got.keys, 1);
  EXPECT_FALSE(got.foreign_key);
  EXPECT_EQ(got.names, std::vector<std::string>({"x-trace-id"}));
}

TEST(UnderscoreHeaders, AllowLetsThemByButNeverTheCredentialsOrTheGatewaysOwnFieldsSpelling) {
  MockUpstream m({"--auth", json{{"require_header", {{"name", "X-Api-Key"}, {"value", kKey}}}}.dump()});
  ASSERT_GT(m.port, 0);
  json c = keyed_config(m);
  c["proxy"]["underscores_in_headers"] = "allow";
  GatewayProcess gw(c, {{"E2E_KEY", kKey}});
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  const HttpResponse r = http_request(gw.port, {"GET", "/ibe/spell?echo=1", kSpellings, {}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Received got = received(r);
  EXPECT_EQ(got.keys, 1);
  EXPECT_FALSE(got.foreign_key);
  EXPECT_EQ(got.names, std::vector<std::string>({"x-trace_id", "x-trace-id"}));
}

TEST(UnderscoreHeaders, RejectAnswers400AndForwardsNothing) {
  MockUpstream m;
  ASSERT_GT(m.port, 0);
  json c = base_config(m.port);
  c["proxy"]["underscores_in_headers"] = "reject";
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  const HttpResponse r = http_request(gw.port, {"GET", "/ibe/spell", {{"X-Trace_Id", "t-1"}}, {}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(has_problem_code(r.body, "underscore_in_header_name")) << r.body;
  EXPECT_EQ(http_request(gw.port, {"GET", "/ibe/spell", {{"X-Trace-Id", "t-1"}}, {}}).status, 200);
  EXPECT_EQ(m.count("/ibe/spell"), 1);
}

}  // namespace
}  // namespace tollgate::testing

// Who a client is and what it may hold, against the real gateway: a new connection that says
// nothing is closed after proxy.header_timeout_ms (not the keep-alive idle time), one address
// holds at most proxy.max_connections_per_client connections, and the headers an upstream trusts
// (X-Real-IP, Forwarded, X-Forwarded-Host) are the gateway's, as is X-Tollgate-Origin on answers.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include "support/hostile.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Waits up to `timeout` for the server to close `fd` (or reset it) without sending anything.
// Returns the time it took, or nullopt when it sent bytes or stayed open.
std::optional<std::chrono::milliseconds> time_to_close(int fd, Clock::time_point since,
                                                       std::chrono::milliseconds timeout) {
  if (!readable(fd, timeout)) return std::nullopt;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, 0);
  if (n > 0) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since);
}

std::string read_some(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || !readable(fd, left)) break;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// The value of every field named `name` (any case) the upstream received, in order.
std::vector<std::string> received(const json& echo, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& f : echo["fields"]) {
    std::string n = f[0].get<std::string>();
    if (n.size() != name.size() ||
        !std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
      continue;
    out.push_back(f[1].get<std::string>());
  }
  return out;
}

// ---- the first bytes of a connection --------------------------------------------------------------

TEST(Peers, ASilentNewConnectionIsClosedAfterTheHeaderTimeoutNotTheIdleTime) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["header_timeout_ms"] = 300;
  c["proxy"]["idle_timeout_ms"] = 60000;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const auto t = Clock::now();
  const int fd = connect_loopback(gw.port);
  ASSERT_GE(fd, 0);
  const auto took = time_to_close(fd, t, 20s);
  ::close(fd);
  ASSERT_TRUE(took.has_value()) << "a connection that sent nothing was still open after 20 s";
  EXPECT_GE(*took, 250ms) << "closed before header_timeout_ms";
  EXPECT_LT(*took, 5s);
  EXPECT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") == 0; }, 5s));
  EXPECT_EQ(up.count("/ibe/a"), 0);
}

TEST(Peers, BetweenRequestsAKeepAliveConnectionWaitsTheIdleTime) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["header_timeout_ms"] = 300;
  c["proxy"]["idle_timeout_ms"] = 60000;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient client(gw.port);
  ASSERT_EQ(client.exchange("GET", "/ibe/a", "first").status, 200);
  // Idle for several header timeouts: still open, and the next request is served on it.
  EXPECT_FALSE(client.closed_by_peer(1500ms)) << "a keep-alive connection was closed at header_timeout_ms";
  EXPECT_EQ(client.exchange("GET", "/ibe/a", "second").status, 200);
  EXPECT_EQ(client.connects(), 1);
}

// ---- connections per client address -----------------------------------------------------------

TEST(Peers, OneAddressHoldsAtMostMaxConnectionsPerClientAndOthersStillGetIn) {
  MockUpstream up;
  json c = base_config(up.port);  // two worker threads: the count is shared
  c["proxy"]["max_connections_per_client"] = 5;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  std::vector<int> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back(connect_loopback(gw.port));
    ASSERT_GE(held.back(), 0);
  }
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") == 5; }, 10s))
      << metric_value(gw, "tollgate_connections");
  // The sixth from 127.0.0.1: 429 at once, closed.
  const int sixth = connect_loopback(gw.port);
  ASSERT_GE(sixth, 0);
  const std::string got = read_some(sixth, 5s);
  ::close(sixth);
  EXPECT_EQ(got.rfind("HTTP/1.1 429", 0), 0u) << got;
  EXPECT_NE(got.find("\"error\":\"too_many_connections\""), std::string::npos) << got;
  EXPECT_NE(got.find("per client address"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_EQ(metric_value(gw, "tollgate_connections_refused_per_client_total"), 1);
  EXPECT_EQ(metric_value(gw, "tollgate_connections_refused_total"), 0);  // the overall cap is another
  // Another address still gets in.
  const int other = connect_loopback(gw.port, {.source_address = "127.0.0.2"});
  ASSERT_GE(other, 0);
  ASSERT_EQ(send_all(other, "GET /ibe/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 0);
  const std::string answered = read_some(other, 5s);
  ::close(other);
  EXPECT_EQ(answered.rfind("HTTP/1.1 200", 0), 0u) << answered;
  // A slot given back is taken again.
  ::close(held.back());
  held.pop_back();
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") == 4; }, 10s));
  const int again = connect_loopback(gw.port);
  ASSERT_GE(again, 0);
  ASSERT_EQ(send_all(again, "GET /ibe/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 0);
  const std::string later = read_some(again, 5s);
  ::close(again);
  EXPECT_EQ(later.rfind("HTTP/1.1 200", 0), 0u) << later;
  for (int fd : held) ::close(fd);
}

TEST(Peers, MaxConnectionsPerClientZeroIsNoCap) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["max_connections_per_client"] = 0;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  std::vector<int> held;
  for (int i = 0; i < 20; ++i) {
    held.push_back(connect_loopback(gw.port));
    ASSERT_GE(held.back(), 0);
  }
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") == 20; }, 10s))
      << metric_value(gw, "tollgate_connections");
  EXPECT_EQ(metric_value(gw, "tollgate_connections_refused_per_client_total"), 0);
  for (int fd : held) ::close(fd);
}

// ---- the headers an upstream trusts ---------------------------------------------------------------

TEST(Peers, AnUntrustedClientsForwardingHeadersAreReplacedByTheGateways) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient client(gw.port);
  const Reply r = client.exchange("GET", "/ibe/a?echo=1", "fwd-1",
                                  {{"X-Real-IP", "6.6.6.6"},
                                   {"Forwarded", "for=6.6.6.6;proto=https;host=evil.example"},
                                   {"X-Forwarded-Host", "evil.example"},
                                   {"X-Forwarded-For", "6.6.6.6"}});
  ASSERT_EQ(r.status, 200) << r.error;
  const json echo = json::parse(r.body);
  EXPECT_EQ(received(echo, "X-Real-IP"), std::vector<std::string>{"127.0.0.1"});
  // request_text's Host is gateway.test: a token, so not quoted.
  EXPECT_EQ(received(echo, "Forwarded"), std::vector<std::string>{"for=127.0.0.1;proto=http;host=gateway.test"});
  EXPECT_EQ(received(echo, "X-Forwarded-Host"), std::vector<std::string>{"gateway.test"});
  EXPECT_EQ(received(echo, "X-Forwarded-For"), std::vector<std::string>{"6.6.6.6, 127.0.0.1"});  // as before
}

TEST(Peers, AHostWithAPortIsQuotedInForwarded) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const std::string raw = raw_exchange(
      gw.port, "GET /ibe/a?echo=1 HTTP/1.1\r\nHost: api.example:8443\r\nConnection: close\r\n\r\n");
  const auto body = raw.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << raw;
  const json echo = json::parse(raw.substr(body + 4));
  EXPECT_EQ(received(echo, "Forwarded"), std::vector<std::string>{"for=127.0.0.1;proto=http;host=\"api.example:8443\""});
  EXPECT_EQ(received(echo, "X-Forwarded-Host"), std::vector<std::string>{"api.example:8443"});
}

TEST(Peers, Http10WithoutHostDropsTheClientsForwardedHost) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const std::string raw = raw_exchange(
      gw.port, "GET /ibe/a?echo=1 HTTP/1.0\r\nX-Forwarded-Host: evil.example\r\nX-Real-IP: 6.6.6.6\r\n\r\n");
  ASSERT_LT(raw.find(" 200 "), raw.find("\r\n")) << raw;
  const json echo = json::parse(raw.substr(raw.find("\r\n\r\n") + 4));
  EXPECT_TRUE(received(echo, "X-Forwarded-Host").empty()) << echo.dump();
  EXPECT_EQ(received(echo, "X-Real-IP"), std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(received(echo, "Forwarded"), std::vector<std::string>{"for=127.0.0.1;proto=http"});
}

TEST(Peers, BehindATrustedProxyForwardedIsAppendedToAndXRealIpIsTheClient) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["trusted_proxies"] = json::array({"127.0.0.1"});
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient client(gw.port);
  const Reply r = client.exchange("GET", "/ibe/a?echo=1", "fwd-2",
                                  {{"X-Real-IP", "6.6.6.6"},
                                   {"Forwarded", "for=203.0.113.7;proto=https"},
                                   {"Forwarded", "for=\"[2001:db8::1]\""},
                                   {"X-Forwarded-For", "203.0.113.7"}});
  ASSERT_EQ(r.status, 200) << r.error;
  const json echo = json::parse(r.body);
  EXPECT_EQ(received(echo, "X-Real-IP"), std::vector<std::string>{"203.0.113.7"});
  EXPECT_EQ(received(echo, "Forwarded"),
            std::vector<std::string>{
                "for=203.0.113.7;proto=https, for=\"[2001:db8::1]\", for=127.0.0.1;proto=http;host=gateway.test"});
}

TEST(Peers, AnUpstreamCannotSayItsAnswerIsTheGateways) {
  HostileUpstream up;
  ASSERT_GT(up.port, 0);
  json c = base_config(up.port);
  up.into(c);
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient client(gw.port);
  const Reply r = client.exchange("GET", "/ibe/a?do=claim-origin", "origin-1");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.echo_id(), "origin-1");
  EXPECT_FALSE(r.has("x-tollgate-origin")) << r.header("x-tollgate-origin");
  // The gateway's own answers still say it.
  const Reply own = client.exchange("TRACE", "/ibe/a", "origin-2");
  EXPECT_EQ(own.status, 405);
  EXPECT_EQ(own.header("x-tollgate-origin"), "gateway");
}

}  // namespace
}  // namespace tollgate::testing

// What the README and docs/ promise and no other test held the gateway to, each checked against
// the real gateway process (and the real mock or hostile upstream): the lingering close after a
// refusal, the upstream pool's idle timeout, the body and idle timeouts, Expect: 100-continue, the
// config-source metrics, retries and bad-request counts, --check, limits.switch at start,
// proxy.deadline_headers: false and SIGINT; and the access log's bounded queue (in process).
// Timing bounds are generous (a loaded 2-core machine under ASan); events are polled for.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <sstream>

#include "support/hostile.hpp"
#include "support/stack.hpp"
#include "tollgate/proxy/access_log.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The base config with proxy.max_body_bytes at 1 KiB: the refusals of a body too large.
json small_bodies(int upstream_port) {
  json c = base_config(upstream_port);
  c["proxy"]["max_body_bytes"] = 1024;
  return c;
}

// Blocking sends that give up after 5 s: a test never hangs on a gateway that stopped reading.
constexpr SocketOptions kBoundedSends{.send_timeout = 5s};

// What a connection delivered until it ended: its bytes and how it ended ("eof", "timeout" or the
// errno's name, e.g. "Connection reset by peer").
struct Ending {
  std::string bytes;
  std::string how;
};

Ending read_to_end(int fd, std::chrono::milliseconds timeout) {
  Ending e;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms || !readable(fd, left)) {
      e.how = "timeout";
      return e;
    }
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) {
      e.how = "eof";
      return e;
    }
    if (n < 0) {
      e.how = std::strerror(errno);
      return e;
    }
    e.bytes.append(buf, static_cast<std::size_t>(n));
  }
}

// Reads until `marker` has arrived (true) or the deadline / a close (false).
bool read_until(int fd, std::string& into, const std::string& marker, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (into.find(marker) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms || !readable(fd, left)) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    into.append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

double counter(const GatewayProcess& gw, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  return metric_series(gw, name, labels).value_or(-1);
}

// ---- refusals: the lingering close ------------------------------------------------------------

// docs/security.md: a refused request still sending is answered, then what still arrives is read
// and discarded for up to 1 s and 1 MiB before the close, so the close cannot reset the
// connection. Without that, the gateway would close with the client's bytes still arriving: the
// kernel answers them with a reset, and the client's next send fails (a client that stops at a
// failed send never reads the 413).
TEST(PromisesLinger, ARefusedBodyGetsIts413AndAnOrderlyClose) {
  MockUpstream up;
  GatewayProcess gw(small_bodies(up.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const int fd = connect_loopback(gw.port, kBoundedSends);
  ASSERT_GE(fd, 0);
  constexpr std::size_t kBody = 256 * 1024;  // announced; far more than is sent
  const std::string piece(16 * 1024, 'b');
  ASSERT_EQ(send_all(fd, "POST /ibe/upload HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(kBody) +
                             "\r\n\r\n"),
            0);
  ASSERT_EQ(send_all(fd, piece), 0);
  // The 413 comes while the body is still on its way (the head alone decides it) ...
  ASSERT_TRUE(readable(fd, 10s)) << "no answer to a body over the limit";
  // ... and the client goes on sending, as a client that reads only when done would: four more
  // pieces 50 ms apart (pacing, well inside the 1 s the gateway keeps reading), then its end.
  // Had the gateway closed at once, the first of them would meet a closed socket and the next
  // send would fail.
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(50ms);
    ASSERT_EQ(send_all(fd, piece), 0) << "send " << i << " after the answer failed: the gateway reset the connection";
  }
  ::shutdown(fd, SHUT_WR);
  const Ending e = read_to_end(fd, 10s);
  ::close(fd);
  EXPECT_EQ(e.how, "eof") << "the answer must end in an orderly close, not a reset";
  EXPECT_EQ(e.bytes.rfind("HTTP/1.1 413", 0), 0u) << e.bytes.substr(0, 200);
  EXPECT_NE(e.bytes.find("Connection: close"), std::string::npos);
  EXPECT_NE(e.bytes.find("body_too_large"), std::string::npos);
  EXPECT_NE(e.bytes.find("request body exceeds 1024 bytes"), std::string::npos);
  EXPECT_EQ(up.stats()["total"], 0);  // nothing of it reached the upstream

  // The discarding is bounded in time. The gateway's FIN comes with the answer (it sends nothing
  // more) while it goes on reading; a client that keeps sending a byte every 100 ms is accepted for
  // about 1 s, then the socket is closed and the next bytes meet a reset (not at once: that would
  // be no lingering at all; not never: it is bounded).
  const int slow = connect_loopback(gw.port, kBoundedSends);
  ASSERT_GE(slow, 0);
  ASSERT_EQ(send_all(slow, "POST /ibe/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"), 0);
  std::string answer;
  ASSERT_TRUE(read_until(slow, answer, "\r\n\r\n", 10s));
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  const auto answered = Clock::now();
  int failed = 0;
  while (failed == 0 && Clock::now() - answered < 10s) {
    std::this_thread::sleep_for(100ms);  // pacing the trickle, not ordering anything
    failed = send_all(slow, "x");
  }
  const auto lingered = Clock::now() - answered;
  ::close(slow);
  EXPECT_TRUE(failed == ECONNRESET || failed == EPIPE) << std::strerror(failed);
  EXPECT_GE(lingered, 700ms);
  EXPECT_LT(lingered, 5s);
}

// The largest receive buffer the kernel grows a TCP socket's to (the third figure of
// net.ipv4.tcp_rmem), or 0 when it cannot be read.
std::size_t largest_receive_buffer() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_rmem");
  std::size_t least = 0, initial = 0, largest = 0;
  in >> least >> initial >> largest;
  return in ? largest : 0;
}

// docs/security.md: the discarding is bounded in bytes as well as time, 1 MiB. A client that goes
// on sending as fast as it can after its 413 is read from until 1 MiB more has arrived; then the
// gateway closes with the rest unread and the client's sends fail (a reset). Counted in bytes, not
// time, since a loaded machine could not tell "well before 1 s" from "at 1 s": the client's sends
// accept at least the 1 MiB the gateway read, and at most that plus what waits unread between the
// two (the gateway's receive buffer, as large as the kernel lets it grow, and the client's send
// buffer, kept small). Read for 1 s with no bound in bytes, the gateway would take far more: the
// client sends on loopback at hundreds of MiB a second.
TEST(PromisesLinger, AClientStillSendingFastIsClosedOnceAMebibyteIsDiscarded) {
  MockUpstream up;
  GatewayProcess gw(small_bodies(up.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const std::size_t receive_buffer = largest_receive_buffer();
  ASSERT_GT(receive_buffer, 0u) << "net.ipv4.tcp_rmem could not be read";
  const int fd = connect_loopback(gw.port, {.send_buffer = 64 * 1024, .send_timeout = 5s});
  ASSERT_GE(fd, 0);
  int send_buffer = 0;
  socklen_t len = sizeof send_buffer;
  ASSERT_EQ(::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_buffer, &len), 0);
  constexpr std::size_t kMiB = 1024 * 1024;
  const std::string piece(64 * 1024, 'b');
  const std::size_t most = kMiB + receive_buffer + static_cast<std::size_t>(send_buffer) + 2 * piece.size();
  ASSERT_EQ(send_all(fd, "POST /ibe/upload HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(4 * most) +
                             "\r\n\r\n"),
            0);
  std::string answer;
  ASSERT_TRUE(read_until(fd, answer, "\r\n\r\n", 10s)) << "no answer to a body over the limit";
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  // Counted by hand, not with send_all: the bytes each send accepted are the measure.
  const auto t = Clock::now();
  std::size_t accepted = 0;
  int failed = 0;
  while (failed == 0 && accepted <= most) {
    const ssize_t n = ::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL);
    if (n < 0) failed = errno;
    else accepted += static_cast<std::size_t>(n);
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
  ::close(fd);
  EXPECT_TRUE(failed == ECONNRESET || failed == EPIPE)
      << (failed ? std::strerror(failed) : "no send failed") << " after " << accepted << " bytes in " << took.count()
      << " ms";
  EXPECT_GE(accepted, kMiB) << "closed before 1 MiB was discarded";
  EXPECT_LE(accepted, most) << "still reading past 1 MiB and the buffers, " << took.count() << " ms after the answer";
  EXPECT_EQ(up.stats()["total"], 0);
}

// ---- the upstream pool's idle timeout ----------------------------------------------------------

// docs/configuration.md, proxy.upstream_idle_timeout_ms: a pooled upstream connection idle longer
// is closed, not reused; docs/operations.md: such a connection is counted in
// tollgate_upstream_conns_discarded_total. One thread and one pooled connection, so that every
// request takes the same pool. The mock counts the connections it accepted.
TEST(PromisesUpstreamPool, AConnectionIdlePastTheTimeoutIsNotReusedAndIsCounted) {
  MockUpstream up;
  json c = base_config(up.port);
  c["threads"] = 1;
  c["proxy"]["max_idle_upstream_conns"] = 1;
  c["proxy"]["upstream_idle_timeout_ms"] = 1500;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  up.reset();  // its count restarts at 0 (the stats requests below are counted too: one each)
  ASSERT_EQ(http_get(gw.port, "/ibe/a").status, 200);
  ASSERT_EQ(http_get(gw.port, "/ibe/a").status, 200);  // at once: the pooled connection again
  const int after_two = up.stats()["connections"].get<int>() - 1;
  EXPECT_EQ(after_two, 1) << "a young pooled connection must be reused";
  EXPECT_EQ(counter(gw, "tollgate_upstream_conns_discarded_total"), 0);
  // Idle for longer than the timeout (nothing to poll for: the pooled connection's age is the
  // point), then a request: on a new connection, the old one discarded and counted.
  std::this_thread::sleep_for(2500ms);
  ASSERT_EQ(http_get(gw.port, "/ibe/a").status, 200);
  const int after_three = up.stats()["connections"].get<int>() - 2;
  EXPECT_EQ(after_three, 2) << "a connection idle past upstream_idle_timeout_ms was reused";
  EXPECT_EQ(counter(gw, "tollgate_upstream_conns_discarded_total"), 1);
  EXPECT_EQ(up.count("/ibe/a"), 3);
}

// docs/configuration.md, upstreams.<name>.idle_timeout_ms: an upstream's own idle timeout for
// its pooled connections, in place of proxy.upstream_idle_timeout_ms. Two upstreams, one of them
// with its own 1 s, the other under the proxy's 10 s; one thread and one pooled connection each,
// so that every request to an upstream takes the same pool. After 2.5 s idle, the first one's
// connection is discarded (and counted) and a new one made; the second one's is reused.
TEST(PromisesUpstreamPool, AnUpstreamsOwnIdleTimeoutOverridesTheProxys) {
  MockUpstream brief, patient;
  ASSERT_GT(brief.port, 0);
  ASSERT_GT(patient.port, 0);
  json c = base_config(brief.port);
  c["threads"] = 1;
  c["proxy"]["max_idle_upstream_conns"] = 1;
  c["proxy"]["upstream_idle_timeout_ms"] = 10000;
  c["upstreams"] = {{"brief", {{"url", "http://" + brief.endpoint()}, {"idle_timeout_ms", 1000}}},
                    {"patient", {{"url", "http://" + patient.endpoint()}}}};
  c["routes"] = json::array({{{"prefix", "/brief/"}, {"upstream", "brief"}}, {{"prefix", "/patient/"}, {"upstream", "patient"}}});
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  brief.reset();  // the counts restart at 0 (each stats request below is a connection too)
  patient.reset();
  for (int i = 0; i < 2; ++i) {  // the second at once: the pooled connection again
    ASSERT_EQ(http_get(gw.port, "/brief/a").status, 200);
    ASSERT_EQ(http_get(gw.port, "/patient/a").status, 200);
  }
  EXPECT_EQ(brief.stats()["connections"].get<int>() - 1, 1) << "a young pooled connection must be reused";
  EXPECT_EQ(patient.stats()["connections"].get<int>() - 1, 1) << "a young pooled connection must be reused";
  EXPECT_EQ(counter(gw, "tollgate_upstream_conns_discarded_total"), 0);
  // Idle past the 1 s and well within the 10 s (nothing to poll for: the connections' age is the
  // point), then a request to each.
  std::this_thread::sleep_for(2500ms);
  ASSERT_EQ(http_get(gw.port, "/brief/a").status, 200);
  ASSERT_EQ(http_get(gw.port, "/patient/a").status, 200);
  EXPECT_EQ(brief.stats()["connections"].get<int>() - 2, 2) << "a connection idle past its upstream's own timeout was reused";
  EXPECT_EQ(patient.stats()["connections"].get<int>() - 2, 1) << "a connection within the proxy's timeout was not reused";
  EXPECT_EQ(counter(gw, "tollgate_upstream_conns_discarded_total"), 1);
  EXPECT_EQ(brief.count("/brief/a"), 3);
  EXPECT_EQ(patient.count("/patient/a"), 3);
}

// ---- proxy.body_timeout_ms ---------------------------------------------------------------------

// docs/configuration.md: proxy.body_timeout_ms bounds reading a request body; README: a request
// too slow is closed (no status is promised, and none is sent: an answer would be to a request
// that was never read). One deadline for the whole body: a trickle of a byte every 200 ms, which a
// per-read timeout would never end, is cut at about 1 s.
TEST(PromisesTimeouts, ASlowRequestBodyIsCutOffAtTheBodyTimeout) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["body_timeout_ms"] = 1000;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const int fd = connect_loopback(gw.port, kBoundedSends);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send_all(fd, "POST /ibe/slow-body HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"), 0);
  const auto t = Clock::now();
  bool cut_off = false;
  std::string got;
  for (int i = 0; i < 99 && !cut_off; ++i) {  // never the whole body
    if (send_all(fd, "x") != 0) {
      cut_off = true;
      break;
    }
    if (readable(fd, 200ms)) {
      char buf[512];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
      cut_off = true;
    }
  }
  const auto took = Clock::now() - t;
  ::close(fd);
  EXPECT_TRUE(cut_off) << "still open after 99 trickled bytes (~20 s)";
  EXPECT_EQ(got, "") << "a cut-off client gets no answer";
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 5s);
  EXPECT_EQ(up.stats()["total"], 0);
  // Counted with the gateway's own refusals (docs/operations.md, tollgate_bad_requests_total).
  EXPECT_TRUE(eventually([&] { return counter(gw, "tollgate_bad_requests_total") == 1; }, 5s));
}

// docs/configuration.md: proxy.body_timeout_ms also bounds writing to the client. A client that
// asks for a 32 MiB answer and reads none of it (its receive window kept small) leaves a write
// pending once the socket buffers are full: the gateway closes it about a second later (it polls
// for that through tollgate_connections, the client still reading nothing).
TEST(PromisesTimeouts, AClientThatDoesNotReadItsAnswerIsCutOff) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["body_timeout_ms"] = 1000;
  c["proxy"]["response_timeout_ms"] = 10000;  // the upstream side is not what ends it
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  constexpr std::size_t kSize = 32u << 20;
  const int fd = connect_loopback(gw.port, {.receive_buffer = 4096, .send_timeout = 5s});
  ASSERT_GE(fd, 0);
  const auto t = Clock::now();
  ASSERT_EQ(send_all(fd, "GET /ibe/big?size=" + std::to_string(kSize) + " HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
  ASSERT_TRUE(eventually([&] { return up.count("/ibe/big") == 1; }, 10s));
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") == 0; }, 20s))
      << "the connection of a client that reads nothing stayed open";
  const auto took = Clock::now() - t;
  EXPECT_GE(took, 900ms);
  const Ending e = read_to_end(fd, 10s);  // what it got before the cut: part of the answer, then the end
  ::close(fd);
  EXPECT_EQ(e.bytes.rfind("HTTP/1.1 200", 0), 0u) << e.bytes.substr(0, 100);
  EXPECT_LT(e.bytes.size(), kSize);
  EXPECT_NE(e.how, "timeout");
}

// ---- proxy.idle_timeout_ms ---------------------------------------------------------------------

// docs/configuration.md: proxy.idle_timeout_ms is how long a keep-alive connection waits for its
// next request; the gateway then closes it.
TEST(PromisesTimeouts, AnIdleKeepAliveConnectionIsClosedAfterTheIdleTimeout) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["idle_timeout_ms"] = 1000;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  ASSERT_EQ(cl.exchange("GET", "/ibe/a", "idle-1").status, 200);
  ASSERT_EQ(cl.exchange("GET", "/ibe/a", "idle-2").status, 200);
  ASSERT_EQ(cl.connects(), 1);  // kept alive between requests
  const auto t = Clock::now();
  EXPECT_TRUE(cl.closed_by_peer(10s)) << "an idle keep-alive connection stayed open";
  const auto took = Clock::now() - t;
  EXPECT_GE(took, 800ms);
  EXPECT_LT(took, 5s);
  EXPECT_TRUE(eventually([&] { return metric_value(gw, "tollgate_connections") == 0; }, 5s));
}

// ---- Expect: 100-continue ----------------------------------------------------------------------

// docs/security.md: the gateway answers a client's Expect: 100-continue itself and does not
// forward Expect. The client sends its head alone and waits: 100 Continue comes from the gateway
// before anything reached the upstream; then the body, and the upstream's answer with it.
TEST(Promises100Continue, TheGatewayAnswersContinueThenForwardsTheBody) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const int fd = connect_loopback(gw.port, kBoundedSends);
  ASSERT_GE(fd, 0);
  const std::string body = R"({"pax":1})";
  const std::string head = "POST /ibe/pricing?echo=1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                           "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  ASSERT_EQ(send_all(fd, head), 0);
  std::string in;
  ASSERT_TRUE(read_until(fd, in, "\r\n\r\n", 10s)) << "no 100 Continue: " << in;
  EXPECT_EQ(in, "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(up.stats()["total"], 0);  // the gateway said it, not the upstream
  ASSERT_EQ(send_all(fd, body), 0);
  std::string rest;
  ASSERT_TRUE(read_until(fd, rest, "\r\n\r\n", 10s)) << rest;
  EXPECT_EQ(rest.rfind("HTTP/1.1 200", 0), 0u) << rest.substr(0, 200);
  const auto len_at = rest.find("Content-Length: ");
  ASSERT_NE(len_at, std::string::npos) << rest;
  const std::size_t length = std::stoul(rest.substr(len_at + 16));
  const std::size_t body_at = rest.find("\r\n\r\n") + 4;
  while (rest.size() < body_at + length) {
    ASSERT_TRUE(readable(fd, 10s));
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    rest.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const json echo = json::parse(rest.substr(body_at, length));
  EXPECT_EQ(echo["method"], "POST");
  EXPECT_EQ(echo["body"], body);
  for (const auto& [name, value] : echo["headers"].items()) {
    std::string lower = name;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_NE(lower, "expect") << "Expect reached the upstream: " << value;
  }
  EXPECT_EQ(up.count("/ibe/pricing"), 1);
}

// A declared body over proxy.max_body_bytes: the client waiting for 100 Continue gets the 413 at
// once instead (RFC 9110 allows a final status in its place), and never has to send the body.
TEST(Promises100Continue, AnOversizeBodyGetsItsRefusalInsteadOfContinue) {
  MockUpstream up;
  GatewayProcess gw(small_bodies(up.port));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const int fd = connect_loopback(gw.port, kBoundedSends);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send_all(fd, "POST /ibe/pricing HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                         "Content-Length: 1025\r\n\r\n"), 0);
  std::string in;
  ASSERT_TRUE(read_until(fd, in, "\r\n\r\n", 10s)) << "no answer: " << in;
  EXPECT_EQ(in.rfind("HTTP/1.1 413", 0), 0u) << in;
  ::close(fd);
  EXPECT_EQ(up.stats()["total"], 0);
}

// The limiter decides before the body is invited (RFC 9110 10.1.1): a request that will be
// refused gets its 429 in place of 100 Continue, and never sends the body; one that must wait for
// its slot is invited once its slot comes, not before.
TEST(Promises100Continue, TheLimitDecidesBeforeTheBodyIsInvited) {
  MockUpstream up;
  json c = base_config(up.port);
  // One permit, the next 200 ms later; /pricing: no wait at all.
  c["limits"]["rules"] = json::array(
      {{{"configId", 1}, {"interfaceUrl", "/shopping/search"}, {"rateLimit", 5}, {"burst", 1}, {"cache", 1}, {"status", 1}},
       {{"configId", 2}, {"interfaceUrl", "/pricing"}, {"rateLimit", 0.01}, {"burst", 1}, {"cache", 0}, {"status", 1}}});
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const std::string expect = "Host: x\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n";

  // Refused: the answer is the 429 itself, and the connection closes (the body may still come).
  ASSERT_EQ(http_get(gw.port, "/ibe/pricing").status, 200);
  {
    const int fd = connect_loopback(gw.port, kBoundedSends);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send_all(fd, "POST /ibe/pricing HTTP/1.1\r\n" + expect), 0);
    std::string in;
    ASSERT_TRUE(read_until(fd, in, "\r\n\r\n", 10s)) << "no answer: " << in;
    EXPECT_EQ(in.rfind("HTTP/1.1 429", 0), 0u) << "the body was invited before the refusal: " << in.substr(0, 200);
    EXPECT_NE(in.find("Connection: close"), std::string::npos) << in;
    ::close(fd);
  }
  EXPECT_EQ(up.count("/ibe/pricing"), 1);

  // Held: 100 Continue only when its slot comes (~200 ms on), then the body and the answer.
  ASSERT_EQ(http_get(gw.port, "/ibe/shopping/search").status, 200);
  const int fd = connect_loopback(gw.port, kBoundedSends);
  ASSERT_GE(fd, 0);
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(send_all(fd, "POST /ibe/shopping/search HTTP/1.1\r\n" + expect), 0);
  std::string in;
  ASSERT_TRUE(read_until(fd, in, "\r\n\r\n", 10s)) << "no 100 Continue: " << in;
  EXPECT_EQ(in, "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_GE(std::chrono::steady_clock::now() - sent, 120ms) << "invited before its slot came";
  ASSERT_EQ(send_all(fd, R"({"pax":1})"), 0);
  std::string rest;
  ASSERT_TRUE(read_until(fd, rest, "\r\n\r\n", 10s)) << rest;
  EXPECT_EQ(rest.rfind("HTTP/1.1 200", 0), 0u) << rest.substr(0, 200);
  ::close(fd);
  EXPECT_EQ(up.count("/ibe/shopping/search"), 2);
}

// ---- the config source's metrics ---------------------------------------------------------------

// docs/operations.md: tollgate_config_loads_total{result}, tollgate_config_rejected_rows,
// tollgate_config_source_up ("1 if the last read of the source succeeded") and
// tollgate_config_version, with the file source: after the start, after a SIGHUP reload, after a
// failed reload (POST /admin/reload of a broken file) and after the file is mended. A file's rows
// are all valid or the load fails (docs/configuration.md, Rule strings): rejected rows stay 0.
TEST(PromisesConfigMetrics, FileSourceStartReloadAndFailedReload) {
  MockUpstream up;
  json c = base_config(up.port);
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  auto expect_state = [&](double ok, double failed, double up_now, double version, const char* when) {
    const std::string m = http_get(gw.admin_port, "/metrics").body;
    EXPECT_EQ(metric_series(m, "tollgate_config_loads_total", {{"result", "ok"}}), ok) << when;
    EXPECT_EQ(metric_series(m, "tollgate_config_loads_total", {{"result", "failed"}}), failed) << when;
    EXPECT_EQ(metric_series(m, "tollgate_config_source_up", {}), up_now) << when;
    EXPECT_EQ(metric_series(m, "tollgate_config_version", {}), version) << when;
    EXPECT_EQ(metric_series(m, "tollgate_config_rejected_rows", {}), 0) << when;
  };
  expect_state(1, 0, 1, 1, "after the start");

  c["limits"]["rules"][0]["rateLimit"] = 7;
  write_file(gw.dir + "/gateway.json", c.dump());
  gw.proc->signal(SIGHUP);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: config v2 loaded", 10s)) << gw.proc->output();
  expect_state(2, 0, 1, 2, "after a SIGHUP reload");

  write_file(gw.dir + "/gateway.json", "{ broken");
  const HttpResponse failed = gw.admin("POST", "/admin/reload");
  EXPECT_EQ(failed.status, 503) << failed.body;
  expect_state(2, 1, 0, 2, "after a failed reload");
  EXPECT_EQ(gw.admin_json("/admin/rules")["rules"][0]["rateLimit"], 7.0);  // the rules stayed

  c["limits"]["rules"][0]["rateLimit"] = 9;
  write_file(gw.dir + "/gateway.json", c.dump());
  const HttpResponse mended = gw.admin("POST", "/admin/reload");
  EXPECT_EQ(mended.status, 200) << mended.body;
  expect_state(3, 1, 1, 3, "after the file was mended");

  // A SIGHUP that is refused counts as a failed load too, whether the rules or the route table
  // refused it (a route to an upstream that does not exist).
  write_file(gw.dir + "/gateway.json", "{ broken");
  gw.proc->signal(SIGHUP);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: reload failed", 10s)) << gw.proc->output();
  expect_state(3, 2, 0, 3, "after a refused SIGHUP");
  json unknown = c;
  unknown["routes"] = json::array({{{"prefix", "/"}, {"upstream", "nope"}}});
  write_file(gw.dir + "/gateway.json", unknown.dump());
  gw.proc->signal(SIGHUP);
  ASSERT_TRUE(gw.proc->wait_for_line("SIGHUP: reload failed", 10s)) << gw.proc->output();
  expect_state(3, 3, 0, 3, "after a SIGHUP refused for its routes");
  EXPECT_EQ(gw.admin_json("/admin/rules")["rules"][0]["rateLimit"], 9.0);
}

// ---- retries and bad requests ------------------------------------------------------------------

// docs/security.md: a reused connection that fails before any response byte is sent again once
// on a fresh connection for an idempotent method, counted in tollgate_upstream_retries_total; a
// POST gets 502 and is not retried. The hostile upstream's drop-once closes the connection
// without answering the first time it sees a request id.
TEST(PromisesRetries, AReusedConnectionClosedUnderARequestIsRetriedAndCounted) {
  HostileUpstream up;
  ASSERT_GT(up.port, 0);
  json c = base_config(up.port);
  up.into(c);
  c["threads"] = 1;
  c["proxy"]["max_idle_upstream_conns"] = 1;
  c["proxy"]["response_timeout_ms"] = 5000;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  ASSERT_EQ(cl.exchange("GET", "/x", "retry-warm").status, 200);  // leaves one pooled connection
  EXPECT_EQ(counter(gw, "tollgate_upstream_retries_total"), 0);
  const Reply get = cl.exchange("GET", "/x?do=drop-once", "retry-get");
  EXPECT_EQ(get.status, 200) << get.error;
  EXPECT_EQ(get.echo_id(), "retry-get");
  EXPECT_EQ(up.count("retry-get"), 2);  // dropped, then sent again
  EXPECT_EQ(counter(gw, "tollgate_upstream_retries_total"), 1);
  ASSERT_EQ(cl.exchange("GET", "/x", "retry-warm-2").status, 200);
  const Reply post = cl.exchange("POST", "/x?do=drop-once", "retry-post", {}, "{}");
  EXPECT_EQ(post.status, 502) << post.error;
  EXPECT_EQ(up.count("retry-post"), 1);
  EXPECT_EQ(counter(gw, "tollgate_upstream_retries_total"), 1);  // a POST is not retried
}

// docs/operations.md: tollgate_bad_requests_total counts the requests the gateway answered itself
// with 400, 404, 413, 431 or 501: one of each here, each counted once.
TEST(PromisesBadRequests, EachOwnRefusalIsCountedOnce) {
  MockUpstream up;
  json c = base_config(up.port);
  c["routes"] = json::array({{{"prefix", "/ibe/"}, {"upstream", "ibe"}}});
  c["proxy"]["max_body_bytes"] = 1024;
  c["proxy"]["max_header_bytes"] = 2048;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  EXPECT_EQ(counter(gw, "tollgate_bad_requests_total"), 0);
  const std::vector<std::pair<int, std::string>> cases{
      {400, "POST /ibe/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"},
      {404, "GET /elsewhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
      {413, "POST /ibe/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"},
      {431, "GET /ibe/x HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n"},
      {501, "POST /ibe/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"}};
  double expected = 0;
  for (const auto& [status, bytes] : cases) {
    const std::string out = raw_exchange(gw.port, bytes);
    EXPECT_EQ(out.rfind("HTTP/1.1 " + std::to_string(status), 0), 0u) << out.substr(0, 200);
    ++expected;
    EXPECT_EQ(counter(gw, "tollgate_bad_requests_total"), expected) << "after the " << status;
  }
  // A forwarded request is not one of them.
  EXPECT_EQ(http_get(gw.port, "/ibe/fine").status, 200);
  EXPECT_EQ(counter(gw, "tollgate_bad_requests_total"), expected);
  EXPECT_EQ(up.stats()["total"], 1);
}

// ---- --check -----------------------------------------------------------------------------------

// README and docs/configuration.md: `tollgate --config FILE --check` validates the file and exits;
// an invalid file exits 1 with the path of the field at fault.
TEST(PromisesCheck, CheckExitsZeroForAGoodFileAndOneWithTheFieldPathForABadOne) {
  const std::string dir = temp_dir();
  json good = base_config(unused_port());
  write_file(dir + "/good.json", good.dump(2));
  Process ok({TOLLGATE_BIN, "--config", dir + "/good.json", "--check"});
  EXPECT_EQ(ok.wait_exit(15s), 0) << ok.output();
  EXPECT_NE(ok.output().find("tollgate: " + dir + "/good.json is valid"), std::string::npos) << ok.output();
  EXPECT_EQ(ok.output().find("listening"), std::string::npos) << "--check must not start serving";

  json bad = good;
  bad["limits"]["rules"][0]["rateLimit"] = 0;
  write_file(dir + "/bad.json", bad.dump(2));
  Process refused({TOLLGATE_BIN, "--config", dir + "/bad.json", "--check"});
  EXPECT_EQ(refused.wait_exit(15s), 1) << refused.output();
  EXPECT_NE(refused.output().find("tollgate: config error: limits.rules[0].rateLimit: must be > 0 (configId 1)"),
            std::string::npos)
      << refused.output();

  json range = good;
  range["proxy"]["max_header_bytes"] = 10;
  write_file(dir + "/range.json", range.dump(2));
  Process out_of_range({TOLLGATE_BIN, "--config", dir + "/range.json", "--check"});
  EXPECT_EQ(out_of_range.wait_exit(15s), 1) << out_of_range.output();
  EXPECT_NE(out_of_range.output().find("proxy.max_header_bytes: must be within [1024, 1048576]"), std::string::npos)
      << out_of_range.output();
}

// Priority classes any caller can choose are flagged by --check (and the start-up log, the same
// code): by the method; by a header while no proxy is trusted to set it. Still valid (exit 0):
// a warning, not an error.
TEST(PromisesCheck, ClassesEveryCallerCanChooseAreWarnedAbout) {
  const std::string dir = temp_dir();
  auto check = [&](const json& c, const std::string& name) {
    write_file(dir + "/" + name + ".json", c.dump(2));
    Process p({TOLLGATE_BIN, "--config", dir + "/" + name + ".json", "--check"});
    EXPECT_EQ(p.wait_exit(15s), 0) << p.output();
    return p.output();
  };
  json c = base_config(unused_port());
  c["limits"]["rules"][0]["priority"] = {{"by", "method"}, {"classes", {"POST", "GET"}}, {"default", "GET"}};
  std::string out = check(c, "method");
  EXPECT_NE(out.find("priority.by \"method\" lets every caller choose its class"), std::string::npos) << out;
  c["limits"]["rules"][0]["priority"] = {{"by", "header:X-Tollgate-Priority"}, {"classes", {"booking", "shopping"}},
                                         {"default", "shopping"}};
  out = check(c, "header-untrusted");
  EXPECT_NE(out.find("is believed only from proxy.trusted_proxies, and none is set"), std::string::npos) << out;
  c["proxy"]["trusted_proxies"] = json::array({"10.0.0.0/8", "0.0.0.0/0"});  // "trusted": everyone
  out = check(c, "header-everyone");
  EXPECT_NE(out.find("0.0.0.0/0 trusts every address: any caller can name its class"), std::string::npos) << out;
  c["proxy"]["trusted_proxies"] = json::array({"10.0.0.0/8"});
  out = check(c, "header-trusted");
  EXPECT_EQ(out.find("warn: rule"), std::string::npos) << out;
}

// ---- limits.switch at start --------------------------------------------------------------------

int shadow_header_count(const std::vector<HttpResponse>& rs, const std::string& prefix) {
  int n = 0;
  for (const auto& r : rs) {
    if (r.status != 200) continue;
    const json h = json::parse(r.body)["headers"];
    if (h.contains("X-Tollgate-Shadow") && h["X-Tollgate-Shadow"].get<std::string>().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

// docs/configuration.md and docs/operations.md (Switch states): limits.switch takes true/false or
// "enforce"/"shadow"/"off" and is the switch at start. 20 requests at once at the 1/s rule (burst
// 5, cache 2.2 s: support/stack.hpp) give 7 x 200 and 13 x 429 enforced; off (or false) forwards
// all 20, counted bypassed; shadow forwards all 20, the 13 that would have been refused counted
// shadow_rejected and marked to the upstream.
TEST(PromisesSwitchAtStart, OffFalseAndShadowAsConfigured) {
  MockUpstream up;
  const HttpRequest search{"GET", "/ibe/shopping/search?echo=1", {}, {}};
  for (const json& value : {json(false), json("off")}) {
    up.reset();
    json c = paced_config(up.port);
    c["limits"]["switch"] = value;
    GatewayProcess gw(c);
    ASSERT_GT(gw.port, 0) << gw.proc->output();
    EXPECT_NE(gw.proc->output().find("switch off"), std::string::npos) << gw.proc->output();
    const json sw = gw.admin_json("/admin/switch");
    EXPECT_EQ(sw["state"], "off") << value;
    EXPECT_EQ(sw["enabled"], false);
    EXPECT_EQ(sw["changed_by"], "config");
    const auto rs = concurrent_requests(gw.port, search, 20);
    EXPECT_EQ(count_status(rs, 200), 20) << value;
    EXPECT_EQ(shadow_header_count(rs, ""), 0);
    EXPECT_EQ(up.count("/ibe/shopping/search"), 20);
    const std::string m = http_get(gw.admin_port, "/metrics").body;
    EXPECT_EQ(metric_series(m, "tollgate_requests_total", {{"outcome", "bypassed"}}), 20) << value;
    EXPECT_EQ(metric_series(m, "tollgate_requests_total", {{"outcome", "rejected"}}), 0);
    EXPECT_EQ(metric_series(m, "tollgate_switch_enabled", {}), 0);
    EXPECT_EQ(metric_series(m, "tollgate_switch_state", {}), 0);
  }
  {
    up.reset();
    json c = paced_config(up.port);
    c["limits"]["switch"] = "shadow";
    GatewayProcess gw(c);
    ASSERT_GT(gw.port, 0) << gw.proc->output();
    EXPECT_EQ(gw.admin_json("/admin/switch")["state"], "shadow");
    const auto rs = concurrent_requests(gw.port, search, 20);
    EXPECT_EQ(count_status(rs, 200), 20);
    EXPECT_EQ(shadow_header_count(rs, "would-reject; bucket=\"/shopping/search\""), 13);
    EXPECT_EQ(up.count("/ibe/shopping/search"), 20);
    const std::string m = http_get(gw.admin_port, "/metrics").body;
    EXPECT_EQ(metric_series(m, "tollgate_requests_total", {{"outcome", "shadow_rejected"}}), 13) << m;
    EXPECT_EQ(metric_series(m, "tollgate_requests_total", {{"outcome", "rejected"}}), 0);
    EXPECT_EQ(metric_series(m, "tollgate_switch_enabled", {}), 1);
    EXPECT_EQ(metric_series(m, "tollgate_switch_state", {}), 2);
  }
  {  // the control: the same burst enforced
    up.reset();
    GatewayProcess gw(paced_config(up.port));
    ASSERT_GT(gw.port, 0) << gw.proc->output();
    const auto rs = concurrent_requests(gw.port, search, 20);
    EXPECT_EQ(count_status(rs, 200), 7);
    EXPECT_EQ(count_status(rs, 429), 13);
  }
}

// ---- proxy.deadline_headers: false -------------------------------------------------------------

// docs/configuration.md: with proxy.deadline_headers false, grpc-timeout and Request-Timeout "go
// through untouched and change nothing": not rewritten to what is left, a budget under the
// latency estimate not refused, a malformed one not answered 400, and a short one not turning a
// slow answer into a 504 (docs/adaptive-and-deadlines.md says what each does when they are read).
TEST(PromisesDeadlineHeadersOff, TheHeadersGoThroughUntouchedAndChangeNothing) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["deadline_headers"] = false;
  c["proxy"]["default_upstream_latency_ms"] = 20;
  c["proxy"]["response_timeout_ms"] = 5000;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  const HttpResponse echo =
      http_request(gw.port, {"GET", "/other?echo=1", {{"grpc-timeout", "5S"}, {"Request-Timeout", "7.5"}}, {}});
  ASSERT_EQ(echo.status, 200) << echo.body;
  const json seen = json::parse(echo.body)["headers"];
  EXPECT_EQ(seen.value("grpc-timeout", ""), "5S") << seen.dump();
  EXPECT_EQ(seen.value("Request-Timeout", ""), "7.5") << seen.dump();

  const HttpResponse malformed = http_request(gw.port, {"GET", "/other?echo=1", {{"grpc-timeout", "soon"}}, {}});
  EXPECT_EQ(malformed.status, 200) << malformed.body;  // read, it would be 400 bad_deadline
  if (malformed.status == 200) {
    EXPECT_EQ(json::parse(malformed.body)["headers"].value("grpc-timeout", ""), "soon");
  }

  const HttpResponse tiny = http_request(gw.port, {"GET", "/ibe/shopping/search", {{"grpc-timeout", "10m"}}, {}});
  EXPECT_EQ(tiny.status, 200) << tiny.body;  // read, it would be 429 deadline_too_short
  EXPECT_EQ(up.count("/ibe/shopping/search"), 1);

  const auto t0 = Clock::now();
  const HttpResponse slow = http_request(gw.port, {"GET", "/other?delay_ms=1200", {{"Request-Timeout", "0.3"}}, {}});
  EXPECT_EQ(slow.status, 200) << slow.body;  // read, it would be 504 at 0.3 s
  EXPECT_GE(Clock::now() - t0, 1100ms);
}

// ---- SIGINT ------------------------------------------------------------------------------------

// docs/operations.md (Lifecycle): SIGTERM/SIGINT stop accepting, let held and in-flight requests
// finish (their answers carry Connection: close), /readyz answers 503 draining meanwhile, then
// the process exits 0. The same as Operate.SigtermDrainsHeldRequestsThenExitsZero, with SIGINT.
TEST(PromisesSigint, SigintDrainsLikeSigterm) {
  MockUpstream up;
  json c = base_config(up.port);
  c["limits"]["rules"] = json::array({{{"configId", 1}, {"interfaceUrl", "/booking"}, {"rateLimit", 1},
                                       {"cache", 5}, {"status", 1}}});
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_EQ(http_get(gw.port, "/ibe/booking").status, 200);  // takes the stored permit
  HttpResponse held;
  std::thread client([&] { held = http_get(gw.port, "/ibe/booking"); });  // held ~1 s
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_held_requests") == 1; }, 5s));
  gw.proc->signal(SIGINT);
  ASSERT_TRUE(gw.proc->wait_for_line("draining", 5s)) << gw.proc->output();
  EXPECT_NE(gw.proc->output().find("signal " + std::to_string(SIGINT) + ", draining"), std::string::npos);
  const HttpResponse ready = http_get(gw.admin_port, "/readyz");
  EXPECT_EQ(ready.status, 503);
  if (ready.status == 503) {
    EXPECT_EQ(json::parse(ready.body)["draining"], true);
  }
  EXPECT_EQ(http_get(gw.port, "/ibe/booking").status, 0);  // no longer accepting
  client.join();
  EXPECT_EQ(held.status, 200);
  EXPECT_EQ(held.header("connection"), "close");
  EXPECT_EQ(gw.proc->wait_exit(10s), 0);
  EXPECT_NE(gw.proc->output().find("tollgate: drained"), std::string::npos);
  EXPECT_EQ(up.count("/ibe/booking"), 2);
}

// ---- the access log's bounded queue ------------------------------------------------------------

// docs/operations.md (Logs): lines are written by a thread of their own from a bounded queue and
// lines past the bound are dropped, counted in tollgate_access_log_dropped_total. In process, with
// a bound of 50: the log is a pipe the test has filled, so the writer is stuck on its first line
// while 200 are written. The first 50 (the one being written among them) are kept, the 150 after
// them dropped and counted; once the pipe is read, exactly lines 0-49 come out, in order.
TEST(PromisesAccessLog, LinesPastTheBoundAreDroppedAndCounted) {
  const std::string fifo = temp_dir() + "/access.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  {
    const int filler = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(filler, 0);
    const std::string block = std::string(PIPE_BUF - 1, '#') + "\n";  // atomic: whole or not at all
    while (::write(filler, block.data(), block.size()) == static_cast<ssize_t>(block.size())) {
    }
    ::close(filler);
  }
  prometheus::Registry registry;
  prometheus::Counter& dropped_total = prometheus::BuildCounter().Name("dropped").Register(registry).Add({});
  std::string lines;
  std::thread drain;
  {
    proxy::AccessLog log(fifo, &dropped_total, 50);
    ASSERT_TRUE(log.enabled());
    std::vector<std::string> paths;
    for (int i = 0; i < 200; ++i) paths.push_back("/line/" + std::to_string(i));
    for (const auto& p : paths) {
      proxy::AccessRecord r;
      r.client = "127.0.0.1";
      r.method = "GET";
      r.path = p;
      r.outcome = "forwarded";
      r.status = 200;
      log.write(r);
    }
    EXPECT_EQ(log.dropped(), 150u);
    EXPECT_EQ(dropped_total.Value(), 150);
    // Read the pipe until the writer closes it (the log's destruction, once its queue is out).
    drain = std::thread([&] {
      const auto deadline = Clock::now() + 30s;
      for (;;) {
        pollfd p{reader, POLLIN, 0};
        if (Clock::now() > deadline || ::poll(&p, 1, 1000) < 0) return;
        char buf[65536];
        const ssize_t n = ::read(reader, buf, sizeof buf);
        if (n == 0) return;  // the writer closed it
        if (n > 0) lines.append(buf, static_cast<std::size_t>(n));
      }
    });
  }
  drain.join();
  ::close(reader);
  std::istringstream in(lines);
  std::string line;
  std::vector<std::string> paths;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;  // the filler
    paths.push_back(json::parse(line)["path"].get<std::string>());
  }
  ASSERT_EQ(paths.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(paths[static_cast<std::size_t>(i)], "/line/" + std::to_string(i));
}

// The gateway exports the count (0 while nothing is dropped) beside its other counters.
TEST(PromisesAccessLog, TheGatewayExportsTheDropCounter) {
  MockUpstream up;
  json c = base_config(up.port);
  c["access_log"] = temp_dir() + "/access.log";
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  ASSERT_EQ(http_get(gw.port, "/ibe/a").status, 200);
  EXPECT_EQ(counter(gw, "tollgate_access_log_dropped_total"), 0);
}

}  // namespace
}  // namespace tollgate::testing

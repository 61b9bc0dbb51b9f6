// The upstream side against a hostile upstream (tests/support/hostile_upstream.cpp), with the real
// gateway process: no response ever reaches a client it does not belong to, interim responses are
// consumed, stale and dirty pooled connections are not reused, bodies stream, trailers stay out,
// odd statuses fail cleanly, and shutdown with a thousand held requests exits cleanly.
//
// Every request carries a unique X-Request-Id; every genuine upstream response names it (X-Echo-Id
// and the body), and every stray response the upstream writes names something else. So "the
// client got its own answer" is checked, not assumed.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>

#include "support/hostile.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A gateway in front of the hostile upstream. Two pool sizes matter: the default (many idle
// connections per thread) and a pool of one on one thread, where a connection that should have
// been closed is certain to be the one the next request gets.
json hostile_config(const HostileUpstream& up, bool pool_of_one = false, int response_timeout_ms = 5000) {
  json c = base_config(up.port);
  up.into(c);
  c["proxy"]["response_timeout_ms"] = response_timeout_ms;
  if (pool_of_one) {
    c["threads"] = 1;
    c["proxy"]["max_idle_upstream_conns"] = 1;
  }
  return c;
}

std::string own_body_marker(const std::string& id) { return "\"id\":\"" + id + "\""; }

// The reply answers request `id`: status 200, the upstream's X-Echo-Id and (when there is a body)
// the body both name it.
::testing::AssertionResult is_own_answer(const Reply& r, const std::string& id, bool head = false) {
  if (r.status != 200)
    return ::testing::AssertionFailure() << "request " << id << ": status " << r.status << " error '" << r.error
                                         << "' echo '" << r.echo_id() << "' body " << r.body.substr(0, 120);
  if (r.echo_id() != id)
    return ::testing::AssertionFailure() << "request " << id << " got the answer of '" << r.echo_id() << "': "
                                         << r.body.substr(0, 120);
  if (!head && r.body.find(own_body_marker(id)) == std::string::npos)
    return ::testing::AssertionFailure() << "request " << id << ": body does not name it: " << r.body.substr(0, 120);
  if (head && !r.body.empty()) return ::testing::AssertionFailure() << "HEAD " << id << " got a body";
  return ::testing::AssertionSuccess();
}

// Its own answer, or a clean upstream failure (502/504, naming no other request).
::testing::AssertionResult own_answer_or_gateway_error(const Reply& r, const std::string& id, bool head = false) {
  if ((r.status == 502 || r.status == 504) && (r.echo_id().empty() || r.echo_id() == id))
    return ::testing::AssertionSuccess();
  return is_own_answer(r, id, head);
}

// Waits until the upstream has decided whether to send its unsolicited response after `id`.
std::string wait_for_after(const HostileUpstream& up, const std::string& id) {
  std::string after;
  eventually([&] {
    after = up.about(id)["after"].get<std::string>();
    return !after.empty();
  }, 5s);
  return after;
}

// ---- many clients, a misbehaving upstream --------------------------------------------------

// Misbehaviour that a correct gateway can always detect, because the stray bytes arrive before or
// together with the response they follow: each request still gets its own answer. `drop` is the
// one kind whose answer is a 502.
const std::vector<std::string> kMix = {"",          "extra-glued",    "hints",    "continue-glued", "",
                                       "long-body", "continue-later", "close",    "head-body",      "",
                                       "drop",      "extra-glued",    "hints",    "long-body"};

TEST(HostileUpstream, ManyClientsEachGetTheirOwnAnswer) {
  HostileUpstream up;
  ASSERT_GT(up.port, 0);
  json c = hostile_config(up);
  // A second upstream entry for the same server: its own pools, used only by the paced client
  // below, so that no other request can pick up one of its connections at a racy moment.
  c["upstreams"]["quiet"] = {{"url", "http://127.0.0.1:" + std::to_string(up.port)}};
  up.into(c, "quiet");
  c["routes"] = json::array({{{"prefix", "/paced/"}, {"upstream", "quiet"}}, {{"prefix", "/"}, {"upstream", "ibe"}}});
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  constexpr int kClients = 12;
  constexpr int kPerClient = 30;
  std::mutex mu;
  std::vector<std::string> problems;
  std::atomic<int> ok{0}, errors{0}, non_drop_errors{0};
  auto note = [&](std::string p) {
    std::lock_guard lock(mu);
    problems.push_back(std::move(p));
  };
  std::vector<std::thread> clients;
  for (int ci = 0; ci < kClients; ++ci) {
    clients.emplace_back([&, ci] {
      RawClient cl(gw.port);
      for (int i = 0; i < kPerClient; ++i) {
        const std::string kind = kMix[static_cast<std::size_t>(ci * 5 + i) % kMix.size()];
        const bool head = kind == "head-body";
        std::string id = "client-";  // unique: client * 1000 + request
        id += std::to_string(ci * 1000 + i);
        const Reply r = cl.exchange(head ? "HEAD" : "GET", "/mix/x?do=" + kind, id, {}, "", 10s);
        const auto verdict = own_answer_or_gateway_error(r, id, head);
        if (!verdict) {
          note("do=" + kind + ": " + verdict.message());
          if (r.status == 0) return;  // a hang or a lost answer: this client cannot go on reliably
          continue;
        }
        if (r.status == 200) ++ok;
        else if (kind != "drop") ++non_drop_errors;
        else ++errors;
      }
    });
  }
  // The paced client: an unsolicited response while the connection is idle. A proxy can only see
  // bytes that arrived before it reuses a connection, so this client waits until the upstream has
  // written them (it reports that) and then 100 ms more, for the gateway's event loop to see them,
  // before its next request. The next request must then get its own answer on another connection.
  int paced = 0;
  clients.emplace_back([&] {
    RawClient cl(gw.port);
    for (int i = 0; i < 16; ++i) {
      const std::string kind = i % 2 == 0 ? "extra-idle" : "";
      const std::string id = "paced-r" + std::to_string(i);
      const Reply r = cl.exchange("GET", "/paced/x?do=" + kind, id, {}, "", 10s);
      const auto verdict = is_own_answer(r, id);
      if (!verdict) note("paced do=" + kind + ": " + verdict.message());
      if (r.status == 0) return;
      ++paced;
      if (kind == "extra-idle") {
        if (wait_for_after(up, id) != "sent") note("paced " + id + ": the upstream did not send its unsolicited response");
        std::this_thread::sleep_for(100ms);
      }
    }
  });
  for (auto& t : clients) t.join();
  for (std::size_t i = 0; i < problems.size() && i < 20; ++i) ADD_FAILURE() << problems[i];
  EXPECT_EQ(problems.size(), 0u) << "responses that were not the client's own (first 20 above)";
  EXPECT_EQ(paced, 16);
  // Only the dropped requests may fail: everything else a correct gateway can answer.
  EXPECT_EQ(non_drop_errors.load(), 0);
  EXPECT_GT(ok.load(), kClients * kPerClient * 3 / 4) << "errors " << errors.load();
  EXPECT_GT(up.stats()["unsolicited"].get<int>(), 0);  // the misbehaviour did happen
}

// ---- one kind at a time, on a pool of one -----------------------------------------------------

TEST(HostileUpstream, UnsolicitedResponseWhileIdleIsNeverDelivered) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient a(gw.port), b(gw.port);
  for (int i = 0; i < 10; ++i) {
    const std::string id = "idle-" + std::to_string(i);
    EXPECT_TRUE(is_own_answer(a.exchange("GET", "/x?do=extra-idle", id), id));
    // The stray response must have arrived before the next request for any proxy to notice it:
    // wait until the upstream wrote it, then give the gateway's loop 100 ms to see it.
    ASSERT_EQ(wait_for_after(up, id), "sent");
    std::this_thread::sleep_for(100ms);
    const std::string next = "after-idle-" + std::to_string(i);
    EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", next), next));
    EXPECT_EQ(up.count(next), 1);
  }
}

TEST(HostileUpstream, InterimResponsesAreConsumed) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  for (const std::string kind : {"hints", "continue-glued", "continue-later"}) {
    for (int i = 0; i < 3; ++i) {
      RawClient a(gw.port), b(gw.port);
      const std::string id = kind + "-" + std::to_string(i), next = "after-" + id;
      const Reply r = a.exchange("GET", "/x?do=" + kind, id, {}, "", 5s);
      EXPECT_TRUE(is_own_answer(r, id)) << kind;
      EXPECT_EQ(r.interim, 0) << kind << ": the 1xx reached the client";
      // The final response went to the request it answers, not to the next one.
      EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", next, {}, "", 5s), next)) << kind;
      EXPECT_TRUE(is_own_answer(a.exchange("GET", "/x", next + "-a", {}, "", 5s), next + "-a")) << kind;
    }
  }
}

TEST(HostileUpstream, SurplusBytesNeverReachAnotherClient) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient a(gw.port), b(gw.port);
  for (const std::string kind : {"extra-glued", "long-body"}) {
    for (int i = 0; i < 5; ++i) {
      const std::string id = kind + "-" + std::to_string(i), next = "after-" + id;
      const Reply r = a.exchange("GET", "/x?do=" + kind, id);
      EXPECT_TRUE(is_own_answer(r, id)) << kind;
      EXPECT_EQ(r.body.find("surplus-"), std::string::npos) << "the surplus was relayed: " << r.body;
      EXPECT_TRUE(a.unread().empty()) << kind << ": more bytes after the answer: " << a.unread().substr(0, 80);
      EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", next), next)) << kind;
    }
  }
}

TEST(HostileUpstream, HeadAnsweredWithABodyHasNoBodyAndLeavesNoBytes) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient a(gw.port), b(gw.port);
  for (int i = 0; i < 5; ++i) {
    const std::string id = "headbody-req-" + std::to_string(i);
    EXPECT_TRUE(is_own_answer(a.exchange("HEAD", "/x?do=head-body", id), id, /*head=*/true));
    // Nothing after the head: the body sent to the HEAD must not reach this client either.
    EXPECT_TRUE(a.unread().empty()) << a.unread().substr(0, 80);
    const std::string same = id + "-then", other = id + "-other";
    EXPECT_TRUE(is_own_answer(a.exchange("GET", "/x", same), same));
    EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", other), other));
  }
}

// ---- stale pooled connections -------------------------------------------------------------

// The upstream closes keep-alive connections idle for 200 ms (a short keep-alive timeout). Each
// POST/PATCH comes after 400 ms of idleness, right after a GET that left a connection in the pool,
// so the pooled connection is always one the upstream has already closed: the gateway must notice
// that before writing, not answer 502, and not send the request twice.
TEST(HostileUpstream, ClosedIdleConnectionIsNoticedBeforeReuse) {
  HostileUpstream up({"--idle-close-ms", "200"});
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  for (int i = 0; i < 20; ++i) {
    const std::string warm = "stale-warm-" + std::to_string(i);
    EXPECT_TRUE(is_own_answer(cl.exchange("GET", "/x", warm), warm));
    std::this_thread::sleep_for(400ms);
    const std::string method = i % 2 == 0 ? "POST" : "PATCH";
    const std::string id = "stale-" + method + "-" + std::to_string(i);
    const Reply r = cl.exchange(method, "/x", id, {{"Content-Type", "application/json"}}, R"({"seat":"12A"})");
    EXPECT_TRUE(is_own_answer(r, id)) << method;
    EXPECT_EQ(up.count(id), 1) << method << " " << id << " reached the upstream a wrong number of times";
  }
  EXPECT_GE(up.stats()["idle_closed"].get<int>(), 20);  // the upstream did close them
}

// ---- streaming -------------------------------------------------------------------------------

// A 250-byte body written 10 bytes every 100 ms (2.4 s): the client must see the first body bytes
// long before the end, and the whole body at the end.
TEST(HostileUpstream, DrippingBodyIsRelayedAsItArrives) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, false, /*response_timeout_ms=*/1500));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(cl.send(request_text("GET", "/x?do=drip&size=250&chunk=10&every=100", "drip-1")));
  ASSERT_TRUE(cl.wait_for_body_bytes(1, t0 + 10s)) << "no body byte at all";
  const auto first = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(cl.unread().rfind("HTTP/1.1 200", 0), 0u) << cl.unread().substr(0, 80);  // the body of the answer
  const Reply r = cl.read(false, 10s);
  const auto all = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(first, 1200ms) << "the first body byte came only after "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(first).count() << " ms";
  ASSERT_TRUE(is_own_answer(r, "drip-1"));
  EXPECT_EQ(r.body.size(), 250u);
  EXPECT_NO_THROW(json::parse(r.body));
  EXPECT_GE(all, 2000ms);  // it did drip
}

// Chunks every 200 ms for 1.5 s with a 500 ms response timeout: the stream is slow but alive, so
// the timeout (between reads) never fires and the client gets all of it.
TEST(HostileUpstream, SlowChunkedStreamOutlivesTheResponseTimeout) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, false, /*response_timeout_ms=*/500));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  const Reply r = cl.exchange("GET", "/x?do=slow-chunked&every=200&for=1500", "slow-1", {}, "", 10s);
  ASSERT_EQ(r.status, 200) << r.error << " " << r.body;
  EXPECT_EQ(r.echo_id(), "slow-1");
  EXPECT_EQ(r.body, "id=slow-1;part-1;part-2;part-3;part-4;part-5;part-6;part-7;done");
  const std::string next = "after-slow";
  EXPECT_TRUE(is_own_answer(cl.exchange("GET", "/x", next), next));
}

// ---- request and response framing --------------------------------------------------------------

TEST(HostileUpstream, ChunkedRequestTrailersDoNotBecomeHeaders) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  ASSERT_TRUE(cl.send("POST /x?do=echo HTTP/1.1\r\nHost: gateway.test\r\nX-Request-Id: trailers-1\r\n"
                      "Transfer-Encoding: chunked\r\nTrailer: X-Forwarded-For, X-Evil\r\n\r\n"
                      "5\r\nhello\r\n6\r\n world\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\nX-Evil: 1\r\n\r\n"));
  const Reply r = cl.read();
  ASSERT_TRUE(is_own_answer(r, "trailers-1"));
  const json echo = json::parse(r.body);
  EXPECT_EQ(echo["body_size"], 11);
  int xff = 0;
  for (const char* part : {"headers", "trailers"}) {
    for (const auto& f : echo[part]) {
      std::string name = f[0].get<std::string>();
      for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      EXPECT_NE(name, "x-evil") << part << ": " << echo.dump();
      if (name == "x-forwarded-for") {
        ++xff;
        EXPECT_EQ(f[1].get<std::string>().find("6.6.6.6"), std::string::npos) << part << ": " << echo.dump();
      }
    }
  }
  EXPECT_EQ(xff, 1) << echo.dump();  // the gateway's own, naming the real client
}

TEST(HostileUpstream, NoContentWithContentLengthIsRelayedWithout) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient a(gw.port), b(gw.port);
  for (int i = 0; i < 3; ++i) {
    const std::string id = "nocontent-" + std::to_string(i);
    const Reply r = a.exchange("GET", "/x?do=no-content-length", id);
    EXPECT_EQ(r.status, 204) << r.error;
    EXPECT_EQ(r.echo_id(), id);
    EXPECT_FALSE(r.has("content-length")) << "204 relayed with Content-Length: " << r.header("content-length");
    EXPECT_TRUE(a.unread().empty()) << "bytes after a 204: " << a.unread().substr(0, 80);
    // The next request on the same client connection, and another client's, get their own.
    const std::string same = id + "-then", other = id + "-other";
    EXPECT_TRUE(is_own_answer(a.exchange("GET", "/x", same), same));
    EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", other), other));
  }
}

TEST(HostileUpstream, HeadAndNotModifiedCarryNoBody) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  const Reply head = cl.exchange("HEAD", "/x", "head-1");
  EXPECT_TRUE(is_own_answer(head, "head-1", /*head=*/true));
  EXPECT_TRUE(cl.unread().empty());
  EXPECT_TRUE(is_own_answer(cl.exchange("GET", "/x", "head-2"), "head-2"));
  const Reply nm = cl.exchange("GET", "/x?do=not-modified", "nm-1", {{"If-None-Match", "\"v1\""}});
  EXPECT_EQ(nm.status, 304) << nm.error;
  EXPECT_EQ(nm.echo_id(), "nm-1");
  EXPECT_TRUE(cl.unread().empty());
  EXPECT_TRUE(is_own_answer(cl.exchange("GET", "/x", "nm-2"), "nm-2"));
  EXPECT_EQ(cl.connects(), 1);  // all on one keep-alive connection: the framing stayed intact
}

TEST(HostileUpstream, Status000AndUnrequested101Are502) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient a(gw.port), b(gw.port);
  for (const std::string kind : {"status000", "switch"}) {
    const std::string id = kind + "-1";
    const Reply r = a.exchange("GET", "/x?do=" + kind, id, {}, "", 5s);
    EXPECT_EQ(r.status, 502) << kind << ": " << r.error << " " << r.body.substr(0, 120);
    const std::string same = id + "-then", other = id + "-other";
    EXPECT_TRUE(is_own_answer(a.exchange("GET", "/x", same), same)) << kind;
    EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", other), other)) << kind;
  }
}

TEST(HostileUpstream, PipelinedRequestsAreAnsweredInOrder) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  // Four requests in one write; the first answer is the slowest (a 1xx, then a pause).
  ASSERT_TRUE(cl.send(request_text("GET", "/x?do=hints", "pipe-1") + request_text("GET", "/x", "pipe-2") +
                      request_text("HEAD", "/x", "pipe-3") + request_text("POST", "/x?do=long-body", "pipe-4", {}, "{}")));
  EXPECT_TRUE(is_own_answer(cl.read(), "pipe-1"));
  EXPECT_TRUE(is_own_answer(cl.read(), "pipe-2"));
  EXPECT_TRUE(is_own_answer(cl.read(true), "pipe-3", /*head=*/true));
  EXPECT_TRUE(is_own_answer(cl.read(), "pipe-4"));
  EXPECT_TRUE(cl.unread().empty());
  for (const char* id : {"pipe-1", "pipe-2", "pipe-3", "pipe-4"}) EXPECT_EQ(up.count(id), 1) << id;
}

TEST(HostileUpstream, ConnectionCloseFromEitherSide) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  {  // The client asks to close: answered, marked, and the gateway closes after the answer.
    RawClient cl(gw.port);
    const Reply r = cl.exchange("GET", "/x", "client-close", {{"Connection", "close"}});
    EXPECT_TRUE(is_own_answer(r, "client-close"));
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_TRUE(cl.closed_by_peer(5s));
  }
  // The upstream closes after every answer: each request gets its own on a fresh upstream
  // connection, and the client's keep-alive connection stays open.
  RawClient cl(gw.port);
  for (int i = 0; i < 10; ++i) {
    const std::string id = "upstream-close-" + std::to_string(i);
    const Reply r = cl.exchange(i % 2 == 0 ? "GET" : "POST", "/x?do=close", id, {}, i % 2 == 0 ? "" : "{}");
    EXPECT_TRUE(is_own_answer(r, id));
    EXPECT_NE(r.header("connection"), "close");
    EXPECT_EQ(up.count(id), 1);
  }
  EXPECT_EQ(cl.connects(), 1);
}

TEST(HostileUpstream, RequestBodyTheUpstreamDoesNotRead) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient a(gw.port), b(gw.port);
  const std::string big(512 * 1024, 'b');
  // Answered before the body was read, then the body is read and dropped: keep-alive holds.
  EXPECT_TRUE(is_own_answer(a.exchange("POST", "/x?do=no-read", "noread-1", {}, big), "noread-1"));
  EXPECT_TRUE(is_own_answer(a.exchange("GET", "/x", "noread-2"), "noread-2"));
  EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", "noread-3"), "noread-3"));
  // Answered, then closed with the body unread (the kernel resets the connection): the client
  // gets that answer or a 502, and the gateway goes on serving.
  for (int i = 0; i < 3; ++i) {
    const std::string id = "noread-close-" + std::to_string(i);
    EXPECT_TRUE(own_answer_or_gateway_error(a.exchange("POST", "/x?do=no-read-close", id, {}, big), id));
    const std::string next = id + "-then";
    EXPECT_TRUE(is_own_answer(b.exchange("GET", "/x", next), next));
  }
  EXPECT_EQ(up.count("noread-1"), 1);
}

// The upstream reads a request and closes without answering. On a reused connection that looks
// exactly like a keep-alive close racing the request, so an idempotent request is sent once more
// on a fresh connection: the upstream sees it twice (as with nginx's proxy_next_upstream). A POST
// is never repeated: 502.
TEST(HostileUpstream, DroppedRequestRetriedOnlyWhenIdempotent) {
  HostileUpstream up;
  GatewayProcess gw(hostile_config(up, /*pool_of_one=*/true));
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawClient cl(gw.port);
  ASSERT_TRUE(is_own_answer(cl.exchange("GET", "/x", "drop-warm-1"), "drop-warm-1"));  // one pooled connection
  EXPECT_TRUE(is_own_answer(cl.exchange("GET", "/x?do=drop-once", "drop-get"), "drop-get"));
  EXPECT_EQ(up.count("drop-get"), 2);  // observed: sent, dropped, sent again on a fresh connection
  ASSERT_TRUE(is_own_answer(cl.exchange("GET", "/x", "drop-warm-2"), "drop-warm-2"));
  const Reply post = cl.exchange("POST", "/x?do=drop-once", "drop-post", {}, "{}");
  EXPECT_EQ(post.status, 502) << post.error << " " << post.echo_id();
  EXPECT_EQ(up.count("drop-post"), 1);
  // Dropped every time: 502 after at most one more try, never a hang.
  const Reply always = cl.exchange("GET", "/x?do=drop", "drop-always", {}, "", 10s);
  EXPECT_EQ(always.status, 502) << always.error;
  EXPECT_LE(up.count("drop-always"), 2);
  EXPECT_TRUE(is_own_answer(cl.exchange("GET", "/x", "drop-after"), "drop-after"));
}

// ---- shutdown with a thousand held requests ---------------------------------------------------

struct HeldClients {
  std::vector<int> fds;
  ~HeldClients() {
    for (int fd : fds) ::close(fd);
  }
};

// What each held client got after the gateway went away.
struct Outcome {
  int answered = 0, closed = 0, partial = 0, hung = 0;
  std::map<int, int> statuses;
};

// Reads every socket until EOF/reset, all at once with poll(), with one deadline for all.
Outcome collect(const std::vector<int>& fds, std::chrono::milliseconds timeout) {
  Outcome o;
  std::vector<std::string> got(fds.size());
  std::vector<bool> done(fds.size(), false);
  std::size_t left = fds.size();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> ps;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (!done[i]) {
        ps.push_back({fds[i], POLLIN, 0});
        which.push_back(i);
      }
    if (::poll(ps.data(), ps.size(), 200) <= 0) continue;
    for (std::size_t k = 0; k < ps.size(); ++k) {
      if (ps[k].revents == 0) continue;
      const std::size_t i = which[k];
      char buf[4096];
      const ssize_t n = ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        got[i].append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      done[i] = true;  // EOF or reset
      --left;
    }
  }
  for (std::size_t i = 0; i < fds.size(); ++i) {
    const std::string& g = got[i];
    if (!done[i]) {
      ++o.hung;
    } else if (g.empty()) {
      ++o.closed;
    } else {
      // One complete response: its head, then exactly its Content-Length body or a whole chunked one.
      const auto end = g.find("\r\n\r\n");
      const std::string head = end == std::string::npos ? "" : g.substr(0, end);
      const auto cl_at = head.find("Content-Length: ");
      bool complete = false;
      if (head.rfind("HTTP/1.1 ", 0) == 0 && cl_at != std::string::npos)
        complete = g.size() == end + 4 + std::strtoul(head.c_str() + cl_at + 16, nullptr, 10);
      else if (head.rfind("HTTP/1.1 ", 0) == 0 && head.find("Transfer-Encoding: chunked") != std::string::npos)
        complete = g.size() >= end + 9 && g.compare(g.size() - 5, 5, "0\r\n\r\n") == 0;
      if (complete) {
        ++o.answered;
        ++o.statuses[std::atoi(g.substr(9, 3).c_str())];
      } else {
        ++o.partial;
      }
    }
  }
  return o;
}

// 1,200 clients each with a request held by a 20/s rule with a 60 s window (they fit: 20 x 60),
// the access log on, a 500 ms drain deadline (or none reached: a second signal). The gateway
// must exit 0, and every client must end up answered or closed, none half-answered or hanging.
void drain_at_scale(bool second_signal) {
  HostileUpstream up;
  ASSERT_GT(up.port, 0);
  const std::string dir = temp_dir();
  json c = base_config(up.port);
  up.into(c);
  c["limits"]["rules"] = json::array(
      {{{"configId", 1}, {"interfaceUrl", "/held"}, {"rateLimit", 20}, {"cache", 60}, {"burst", 1}, {"status", 1}}});
  c["proxy"]["drain_timeout_ms"] = second_signal ? 30000 : 500;
  c["proxy"]["max_held"] = 20000;
  c["proxy"]["max_held_per_bucket"] = 5000;
  c["proxy"]["max_connections_per_client"] = 0;  // 1,200 connections, all from 127.0.0.1
  c["access_log"] = dir + "/access.log";
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();

  constexpr int kClients = 1200;
  HeldClients held;
  for (int i = 0; i < kClients; ++i) {
    const int fd = connect_loopback(gw.port);
    ASSERT_GE(fd, 0) << "connection " << i;
    held.fds.push_back(fd);
    const std::string req = request_text("GET", "/api/held", "held-" + std::to_string(i));
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  }
  // Every request read and decided before the signal: held, or answered and logged (a client
  // still in the accept queue at the drain would have no request to log).
  auto logged = [&] {
    std::ifstream in(dir + "/access.log");
    return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
  };
  ASSERT_TRUE(eventually([&] { return metric_value(gw, "tollgate_held_requests") + logged() == kClients; }, 30s))
      << "held: " << metric_value(gw, "tollgate_held_requests") << ", logged: " << logged();
  const auto t = std::chrono::steady_clock::now();
  gw.proc->signal(SIGTERM);
  if (second_signal) {
    ASSERT_TRUE(gw.proc->wait_for_line("draining", 5s)) << gw.proc->output();
    gw.proc->signal(SIGTERM);
  }
  const auto code = gw.proc->wait_exit(20s);
  ASSERT_TRUE(code.has_value()) << "still running 20 s after SIGTERM\n" << gw.proc->output();
  EXPECT_EQ(*code, 0) << gw.proc->output();
  EXPECT_LT(std::chrono::steady_clock::now() - t, 10s);
  const Outcome o = collect(held.fds, 10s);
  EXPECT_EQ(o.hung, 0);
  EXPECT_EQ(o.partial, 0);
  EXPECT_EQ(o.answered + o.closed, kClients);
  std::string statuses;
  for (const auto& [s, n] : o.statuses) statuses += " " + std::to_string(s) + ":" + std::to_string(n);
  std::cout << "drain: " << o.answered << " answered (" << statuses << "), " << o.closed << " closed\n";
  // The access log is whole: one line per request, answered or closed at the exit (each request
  // id once), every line one JSON object, none torn.
  std::ifstream in(dir + "/access.log");
  std::string line;
  int lines = 0, bad = 0;
  std::set<std::string> ids;
  while (std::getline(in, line)) {
    ++lines;
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      ++bad;
      continue;
    }
    if (j.contains("path") && j["path"] == "/api/held" && j.contains("request_id")) ids.insert(j["request_id"].get<std::string>());
  }
  EXPECT_EQ(bad, 0) << "of " << lines << " access log lines";
  EXPECT_EQ(lines, kClients);
  EXPECT_EQ(static_cast<int>(ids.size()), kClients);
}

TEST(DrainAtScale, HeldRequestsPastTheDeadlineWithAccessLogExitZero) { drain_at_scale(false); }

TEST(DrainAtScale, SecondSignalWithHeldRequestsExitsZero) { drain_at_scale(true); }

}  // namespace
}  // namespace tollgate::testing

namespace tollgate::testing {
namespace {

// A config with the /shopping/search rule at 1/s and no wait (burst 1), and `upstream` as "ibe".
json one_per_second(const json& upstream) {
  json c = base_config(0);
  c["upstreams"]["ibe"] = upstream;
  c["limits"]["rules"][0]["rateLimit"] = 1;
  c["limits"]["rules"][0]["cache"] = 0;
  return c;
}

// No endpoint could take it (nothing listens): 502, and the permit goes back, so the next
// request is admitted (502 again) instead of refused 429; counted.
TEST(UpstreamPermits, APermitIsGivenBackWhenNoEndpointCouldTakeTheRequest) {
  const ClosedPort dead;
  GatewayProcess gw(one_per_second({{"urls", {"http://127.0.0.1:" + std::to_string(dead.port())}}}));
  ASSERT_GT(gw.port, 0);
  for (int i = 0; i < 3; ++i) {
    const HttpResponse r = http_get(gw.port, "/shopping/search");
    EXPECT_EQ(r.status, 502) << "request " << i << ": " << r.body;
    EXPECT_NE(r.body.find("upstream_unavailable"), std::string::npos) << r.body;
  }
  EXPECT_GE(metric_value(gw, "tollgate_permits_returned_total"), 3);
  // A live upstream: the bucket's one permit is there (given back each time), then 429.
  MockUpstream up;
  GatewayProcess live(one_per_second({{"url", "http://127.0.0.1:" + std::to_string(up.port)}}));
  EXPECT_EQ(http_get(live.port, "/shopping/search").status, 200);
  EXPECT_EQ(http_get(live.port, "/shopping/search").status, 429);
  EXPECT_EQ(metric_value(live, "tollgate_permits_returned_total"), 0);
}

// One endpoint dead, one live: every request is answered 200 by the live one, on its one permit.
TEST(UpstreamPermits, ADeadEndpointCostsNoPermitAndNoError) {
  MockUpstream up;
  const ClosedPort dead;
  json c = one_per_second({{"urls", {"http://127.0.0.1:" + std::to_string(dead.port()), "http://127.0.0.1:" + std::to_string(up.port)}},
                           {"eject", {{"consecutive_failures", 0}}}});
  c["limits"]["rules"][0]["rateLimit"] = 20;
  c["limits"]["rules"][0]["cache"] = 2;  // every request waits for its permit: none refused
  GatewayProcess gw(c);
  int ok = 0;
  for (int i = 0; i < 20; ++i) ok += http_get(gw.port, "/shopping/search").status == 200;
  EXPECT_EQ(ok, 20);
  EXPECT_EQ(up.count("/shopping/search"), 20);
  const std::string m = http_get(gw.admin_port, "/metrics").body;
  EXPECT_GE(metric_series(m, "tollgate_upstream_failovers_total", {{"upstream", "ibe"}}).value_or(0), 5);
  EXPECT_EQ(metric_value(gw, "tollgate_permits_returned_total"), 0);
}

// The upstream's base path, then the request's path; a stripping route drops its prefix first.
TEST(UpstreamPaths, BasePathAndStrippedPrefixFormTheUpstreamPath) {
  MockUpstream up;
  json c = base_config(up.port);
  c["upstreams"]["ibe"]["url"] = "http://127.0.0.1:" + std::to_string(up.port) + "/v2/";
  c["routes"] = json::parse(R"([{"prefix": "/nds/", "upstream": "ibe", "strip_prefix": true},
                               {"prefix": "/", "upstream": "ibe"}])");
  GatewayProcess gw(c);
  EXPECT_EQ(http_get(gw.port, "/shopping/search?x=1").status, 200);
  EXPECT_EQ(http_get(gw.port, "/nds/air/offers?y=2").status, 200);
  EXPECT_EQ(up.count("/v2/shopping/search"), 1);
  EXPECT_EQ(up.count("/v2/air/offers"), 1);
  EXPECT_EQ(up.count("/shopping/search"), 0);
  // The rule still matches the caller's path (/shopping/search), not the upstream's.
  const std::string m = http_get(gw.admin_port, "/metrics").body;
  EXPECT_GE(metric_series(m, "tollgate_bucket_requests_total", {{"bucket", "/shopping/search"}}).value_or(0), 1);
}

// An IPv6 literal upstream ([::1]), and the Host it is sent.
TEST(UpstreamPaths, Ipv6LiteralUpstream) {
  MockUpstream up({"--host", "::1"});
  ASSERT_GT(up.port, 0);
  json c = base_config(up.port);
  c["upstreams"]["ibe"]["url"] = "http://[::1]:" + std::to_string(up.port);
  GatewayProcess gw(c);
  const HttpResponse r = http_get(gw.port, "/echo?echo=1");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("[::1]:" + std::to_string(up.port)), std::string::npos) << r.body;  // Host
  // (The mock listens on ::1 only: its /__stats, asked over 127.0.0.1, is out of reach; the echo
  // above came from it.)
}

// Two routes to one slow upstream (300 ms): the one with a 100 ms response timeout gets 504, the
// other (its upstream's 1500 ms) the answer.
TEST(UpstreamPaths, EachRouteHasItsOwnResponseTimeout) {
  MockUpstream up({"--latency-ms", "300"});
  json c = base_config(up.port);
  c["routes"] = json::parse(R"([{"prefix": "/shop/", "upstream": "ibe", "response_timeout_ms": 100},
                               {"prefix": "/", "upstream": "ibe"}])");
  GatewayProcess gw(c);
  const HttpResponse shop = http_get(gw.port, "/shop/offers");
  EXPECT_EQ(shop.status, 504) << shop.body;
  EXPECT_NE(shop.body.find("upstream_timeout"), std::string::npos);
  EXPECT_EQ(http_get(gw.port, "/book/orders").status, 200);
}

// Warm pools: min_idle_conns connections per worker are open before any request, a request takes
// one instead of connecting (the mock holds every new connection 400 ms, as a distant supplier's
// round trips would), and the keeper replaces them before they grow stale.
TEST(WarmPools, ConnectionsAreOpenAheadOfRequestsAndKeptFresh) {
  MockUpstream up({"--connect-delay-ms", "400"});
  // The mock counts the connections of the test's own /__stats calls too (one each): not these.
  int stats_calls = 0;
  auto stats = [&] {
    ++stats_calls;
    return up.stats();
  };
  auto connections = [&] { return stats()["connections"].get<int>() - stats_calls; };
  json c = base_config(up.port);
  c["threads"] = 2;
  c["upstreams"]["ibe"]["min_idle_conns"] = 2;
  c["upstreams"]["ibe"]["idle_timeout_ms"] = 1200;  // replaced after 900 ms
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0);
  // Two per worker, with no request yet.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (connections() < 4 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
  EXPECT_GE(connections(), 4);
  EXPECT_FALSE(stats()["paths"].contains("/book/order"));
  // A request finds a warm connection: no 400 ms connect first.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(http_get(gw.port, "/book/order").status, 200);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 300ms) << "the request waited for a connection";
  // Replaced before they grow stale: more connections over time, with no traffic.
  const int before = connections();
  std::this_thread::sleep_for(2500ms);
  EXPECT_GE(connections(), before + 4);
  const std::string m = http_get(gw.admin_port, "/metrics").body;
  EXPECT_GE(metric_series(m, "tollgate_upstream_warm_connections_opened_total", {{"upstream", "ibe"}}).value_or(0), 8);
  // Without warm pools the first request pays for its connection.
  MockUpstream cold_up({"--connect-delay-ms", "400"});
  GatewayProcess cold(base_config(cold_up.port));
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(http_get(cold.port, "/book/order").status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - t1, 400ms);
}

}  // namespace
}  // namespace tollgate::testing

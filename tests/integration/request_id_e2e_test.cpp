// X-Request-Id end to end, with the real gateway process and the mock upstream (whose ?echo=1
// lists the fields it received, repeated ones included): a valid id is kept, anything else is
// replaced by a made one, and the one id is what the upstream saw, what the client got (once),
// what the access log wrote and what the gateway's own problem bodies name. W3C trace context
// passes through untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

bool is_made_id(const std::string& id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A response as it came on the wire: every field, repeated ones included.
struct RawReply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> fields;  // names lower-cased
  std::string body;
  std::vector<std::string> all(const std::string& name) const {
    std::vector<std::string> out;
    for (const auto& [n, v] : fields)
      if (n == name) out.push_back(v);
    return out;
  }
};

// The responses in `bytes`, each framed by its Content-Length.
std::vector<RawReply> parse_replies(std::string bytes) {
  std::vector<RawReply> out;
  while (!bytes.empty()) {
    const auto end = bytes.find("\r\n\r\n");
    if (end == std::string::npos || bytes.compare(0, 9, "HTTP/1.1 ") != 0) break;
    RawReply r;
    r.status = std::stoi(bytes.substr(9, 3));
    std::size_t at = bytes.find("\r\n") + 2;
    std::size_t length = 0;
    while (at < end) {
      const auto eol = bytes.find("\r\n", at);
      const std::string line = bytes.substr(at, eol - at);
      const auto colon = line.find(':');
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.fields.emplace_back(lower(line.substr(0, colon)), value);
      if (r.fields.back().first == "content-length") length = std::stoul(value);
      at = eol + 2;
    }
    r.body = bytes.substr(end + 4, length);
    bytes.erase(0, end + 4 + length);
    out.push_back(std::move(r));
  }
  return out;
}

// One request written as it is (Connection: close), its one response.
RawReply raw_request(int port, const std::string& target, const std::string& fields) {
  const std::string text = "GET " + target + " HTTP/1.1\r\nHost: gateway.test\r\n" + fields + "Connection: close\r\n\r\n";
  auto replies = parse_replies(raw_exchange(port, text));
  EXPECT_EQ(replies.size(), 1u) << text;
  return replies.empty() ? RawReply{} : replies.front();
}

// The values of `name` among the fields the upstream received (from ?echo=1), in order.
std::vector<std::string> upstream_saw(const std::string& echo_body, const std::string& name) {
  std::vector<std::string> out;
  const json echo = json::parse(echo_body);
  for (const auto& f : echo.at("fields"))
    if (lower(f[0].get<std::string>()) == name) out.push_back(f[1].get<std::string>());
  return out;
}

class RequestIdE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    up_ = new MockUpstream();
    dir_ = new std::string(temp_dir());
    json c = base_config(up_->port);
    // /ibe/ goes to the mock, /dead/ to a port nobody listens on; anything else has no route.
    dead_ = new ClosedPort();
    c["upstreams"]["dead"] = {{"url", "http://127.0.0.1:" + std::to_string(dead_->port())}};
    c["routes"] = json::array({{{"prefix", "/ibe/"}, {"upstream", "ibe"}}, {{"prefix", "/dead/"}, {"upstream", "dead"}}});
    // One request a second and no wait: the second of two in a row is refused.
    c["limits"]["rules"].push_back({{"configId", 2}, {"channelType", "IBE+"}, {"interfaceNo", "S02"},
                                    {"interfaceUrl", "/tight"}, {"rateLimit", 1}, {"cache", 0}, {"status", 1}});
    c["access_log"] = *dir_ + "/access.log";
    gw_ = new GatewayProcess(c);
  }
  static void TearDownTestSuite() {
    delete gw_;
    delete up_;
    delete dir_;
    delete dead_;
  }
  void SetUp() override {
    ASSERT_GT(up_->port, 0);
    ASSERT_GT(gw_->port, 0) << gw_->proc->output();
  }

  // The access log line naming `id` (it is written by a thread of its own: waited for).
  static std::optional<json> access_line_of(const std::string& id) {
    std::optional<json> found;
    eventually([&] {
      std::ifstream in(*dir_ + "/access.log");
      std::string line;
      while (std::getline(in, line)) {
        const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);  // a line being written
        if (j.is_object() && j.value("request_id", "") == id) found = j;
      }
      return found.has_value();
    }, 5s);
    return found;
  }

  // A problem body of the gateway's own naming the response's X-Request-Id.
  static void expect_own_answer_names_its_id(const RawReply& r, const std::string& code) {
    const auto ids = r.all("x-request-id");
    ASSERT_EQ(ids.size(), 1u) << r.body;
    EXPECT_EQ(r.all("x-tollgate-origin"), std::vector<std::string>{"gateway"});
    const json body = json::parse(r.body);
    EXPECT_EQ(body["error"], code) << r.body;
    EXPECT_EQ(body["request_id"], ids.front()) << r.body;
  }

  static MockUpstream* up_;
  static GatewayProcess* gw_;
  static std::string* dir_;
  static ClosedPort* dead_;
};
MockUpstream* RequestIdE2E::up_ = nullptr;
GatewayProcess* RequestIdE2E::gw_ = nullptr;
std::string* RequestIdE2E::dir_ = nullptr;
ClosedPort* RequestIdE2E::dead_ = nullptr;

TEST_F(RequestIdE2E, AValidIdIsKeptSentUpstreamReturnedAndLogged) {
  for (const std::string& id : std::vector<std::string>{"f47ac10b-58cc-4372-a567-0e02b2c3d479",
                                                        "svc.checkout@web-3:8080/r=1+x_y", std::string(128, 'k')}) {
    const RawReply r = raw_request(gw_->port, "/ibe/kept?echo=1", "X-Request-Id: " + id + "\r\n");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.all("x-request-id"), std::vector<std::string>{id});
    EXPECT_EQ(upstream_saw(r.body, "x-request-id"), std::vector<std::string>{id});
    const auto line = access_line_of(id);
    ASSERT_TRUE(line) << id;
    EXPECT_EQ((*line)["path"], "/ibe/kept");
    EXPECT_EQ((*line)["status"], 200);
  }
}

TEST_F(RequestIdE2E, AnInvalidOrRepeatedIdIsReplacedByAMadeOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"too long", "X-Request-Id: " + std::string(129, 'k') + "\r\n"},
      {"a space", "X-Request-Id: bad id\r\n"},
      {"a quote", "X-Request-Id: \"quoted\"\r\n"},
      {"a list", "X-Request-Id: one,two\r\n"},
      {"empty", "X-Request-Id:\r\n"},
      {"two of them", "X-Request-Id: one\r\nX-Request-Id: two\r\n"},
      {"the same twice", "X-Request-Id: same\r\nx-request-id: same\r\n"},
  };
  for (const auto& [why, fields] : cases) {
    const RawReply r = raw_request(gw_->port, "/ibe/replaced?echo=1", fields);
    ASSERT_EQ(r.status, 200) << why << ": " << r.body;  // replaced, never refused
    const auto got = r.all("x-request-id");
    ASSERT_EQ(got.size(), 1u) << why;
    EXPECT_TRUE(is_made_id(got.front())) << why << ": " << got.front();
    EXPECT_EQ(upstream_saw(r.body, "x-request-id"), got) << why;  // one, the same
  }
}

TEST_F(RequestIdE2E, AMadeIdIsTheSameUpstreamInTheResponseAndInTheLog) {
  const auto r = http_get(gw_->port, "/ibe/made?echo=1");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string id = r.header("x-request-id");
  EXPECT_TRUE(is_made_id(id)) << id;
  EXPECT_EQ(json::parse(r.body)["headers"]["X-Request-Id"], id);
  const auto line = access_line_of(id);
  ASSERT_TRUE(line) << id;
  EXPECT_EQ((*line)["path"], "/ibe/made");
  EXPECT_EQ((*line)["outcome"], "unmatched");
  // Another request gets another id.
  EXPECT_NE(http_get(gw_->port, "/ibe/made").header("x-request-id"), id);
}

TEST_F(RequestIdE2E, EachRequestOnAKeepAliveConnectionHasItsOwn) {
  const std::string text =
      "GET /ibe/a HTTP/1.1\r\nHost: gateway.test\r\nX-Request-Id: first\r\n\r\n"
      "GET /ibe/b HTTP/1.1\r\nHost: gateway.test\r\n\r\n"
      "GET /ibe/c HTTP/1.1\r\nHost: gateway.test\r\nX-Request-Id: third\r\nConnection: close\r\n\r\n";
  const auto replies = parse_replies(raw_exchange(gw_->port, text));
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].all("x-request-id"), std::vector<std::string>{"first"});
  ASSERT_EQ(replies[1].all("x-request-id").size(), 1u);
  EXPECT_TRUE(is_made_id(replies[1].all("x-request-id").front()));
  EXPECT_EQ(replies[2].all("x-request-id"), std::vector<std::string>{"third"});
}

TEST_F(RequestIdE2E, TheClientGetsTheGatewaysIdOnceWhateverTheUpstreamSent) {
  // The upstream answers with ids of its own (one, then two): the client gets the one the
  // upstream was sent, once.
  for (const std::string query : {"reply_request_id=upstream-own", "reply_request_id=upstream-own&reply_twice=1"}) {
    const RawReply kept = raw_request(gw_->port, "/ibe/echoed?" + query, "X-Request-Id: from-client\r\n");
    ASSERT_EQ(kept.status, 200) << kept.body;
    EXPECT_EQ(kept.all("x-request-id"), std::vector<std::string>{"from-client"}) << query;
    const RawReply made = raw_request(gw_->port, "/ibe/echoed?" + query, "");
    ASSERT_EQ(made.all("x-request-id").size(), 1u) << query;
    EXPECT_TRUE(is_made_id(made.all("x-request-id").front())) << query;
  }
  // Without the gateway in between the mock does send them (the check above means something).
  const auto direct = raw_request(up_->port, "/ibe/echoed?reply_request_id=upstream-own&reply_twice=1", "");
  EXPECT_EQ(direct.all("x-request-id"), (std::vector<std::string>{"upstream-own", "upstream-own-2"}));
}

TEST_F(RequestIdE2E, TraceContextReachesTheUpstreamByteForByte) {
  const std::string traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const std::string state1 = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
  const std::string state2 = "vendor@tenant=a b;c=\"d\" , x=y";  // odd but legal bytes, kept inside
  const RawReply r = raw_request(gw_->port, "/ibe/traced?echo=1",
                                 "traceparent: " + traceparent + "\r\ntracestate: " + state1 + "\r\nTraceState: " +
                                     state2 + "\r\nX-Request-Id: trace-1\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(upstream_saw(r.body, "traceparent"), std::vector<std::string>{traceparent});
  EXPECT_EQ(upstream_saw(r.body, "tracestate"), (std::vector<std::string>{state1, state2}));  // both, in order
  EXPECT_EQ(upstream_saw(r.body, "x-request-id"), std::vector<std::string>{"trace-1"});
}

TEST_F(RequestIdE2E, TheGatewaysOwnAnswersNameTheId) {
  // 404: no route. The caller's id, or a made one.
  RawReply r = raw_request(gw_->port, "/nowhere", "X-Request-Id: lost-1\r\n");
  EXPECT_EQ(r.status, 404);
  expect_own_answer_names_its_id(r, "no_route");
  EXPECT_EQ(r.all("x-request-id"), std::vector<std::string>{"lost-1"});
  r = raw_request(gw_->port, "/nowhere", "");
  EXPECT_EQ(r.status, 404);
  expect_own_answer_names_its_id(r, "no_route");
  EXPECT_TRUE(is_made_id(r.all("x-request-id").front()));
  const auto line = access_line_of(r.all("x-request-id").front());
  ASSERT_TRUE(line);
  EXPECT_EQ((*line)["status"], 404);

  // 429: refused by the rule; its problem body gains the member.
  std::optional<RawReply> refused;
  for (int i = 0; i < 5 && !refused; ++i) {
    RawReply t = raw_request(gw_->port, "/ibe/tight", "X-Request-Id: tight-" + std::to_string(i) + "\r\n");
    if (t.status == 429) refused = t;
  }
  ASSERT_TRUE(refused) << "no 429 from a 1/s rule";
  expect_own_answer_names_its_id(*refused, "rate_limited");
  EXPECT_EQ(refused->all("x-request-id").front().rfind("tight-", 0), 0u);
  EXPECT_EQ(json::parse(refused->body)["policy"], "/tight");  // the rest of the body as it was
  const auto refused_line = access_line_of(refused->all("x-request-id").front());
  ASSERT_TRUE(refused_line);
  EXPECT_EQ((*refused_line)["status"], 429);

  // 502: the upstream is down (answered from the upstream side of the gateway).
  r = raw_request(gw_->port, "/dead/x", "X-Request-Id: dead-1\r\n");
  EXPECT_EQ(r.status, 502);
  expect_own_answer_names_its_id(r, "upstream_unavailable");
  EXPECT_EQ(r.all("x-request-id"), std::vector<std::string>{"dead-1"});

  // 400 before any id could be read (a malformed head): a made one.
  const auto bad = parse_replies(raw_exchange(gw_->port, "GET /ibe/x HTTP/1.1\r\nHost: h\r\nBad Field: 1\r\n\r\n"));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].status, 400);
  expect_own_answer_names_its_id(bad[0], "bad_request");
  EXPECT_TRUE(is_made_id(bad[0].all("x-request-id").front()));

  // 405 once the head was read: the caller's.
  const auto trace = parse_replies(
      raw_exchange(gw_->port, "TRACE /ibe/x HTTP/1.1\r\nHost: h\r\nX-Request-Id: trace-2\r\nConnection: close\r\n\r\n"));
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0].status, 405);
  expect_own_answer_names_its_id(trace[0], "method_not_allowed");
  EXPECT_EQ(trace[0].all("x-request-id"), std::vector<std::string>{"trace-2"});
}

TEST(RequestIdE2EStandalone, TheConnectionCapsAnswerNamesAMadeId) {
  MockUpstream up;
  json c = base_config(up.port);
  c["proxy"]["max_connections"] = 1;
  GatewayProcess gw(c);
  ASSERT_GT(gw.port, 0) << gw.proc->output();
  RawConnection held(gw.port);
  ASSERT_TRUE(eventually([&] { return http_get(gw.admin_port, "/metrics").body.find("tollgate_connections 1") != std::string::npos; }, 5s));
  const auto replies = parse_replies(raw_exchange(gw.port, "GET /ibe/x HTTP/1.1\r\nHost: h\r\n\r\n"));
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].status, 429);
  const auto ids = replies[0].all("x-request-id");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_TRUE(is_made_id(ids.front())) << ids.front();
  const json body = json::parse(replies[0].body);
  EXPECT_EQ(body["error"], "too_many_connections");
  EXPECT_EQ(body["request_id"], ids.front());
  // Each refusal its own.
  const auto again = parse_replies(raw_exchange(gw.port, "GET /ibe/x HTTP/1.1\r\nHost: h\r\n\r\n"));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].all("x-request-id"), ids);
}

}  // namespace
}  // namespace tollgate::testing

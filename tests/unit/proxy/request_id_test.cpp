// X-Request-Id: which ids are kept, what a made one looks like, which one a request gets, and the
// places it is written (a problem body's member, the access log line).
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/http1.hpp"
#include "tollgate/proxy/json_text.hpp"
#include "tollgate/proxy/request_id.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {
namespace {

bool is_made_id(std::string_view id) {
  if (id.size() != kMadeRequestIdLength) return false;
  for (const char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string made_id() {
  char out[kMadeRequestIdLength];
  make_request_id(out);
  return {out, sizeof out};
}

TEST(RequestId, ValidIdsAreOneTo128OfTheDocumentedCharacters) {
  for (const char* ok : {"a", "0", "f47ac10b-58cc-4372-a567-0e02b2c3d479", "0123456789abcdef0123456789abcdef",
                         "01ARZ3NDEKTSV4RRFFQ69G5FAV", "dGVzdA+/==", "svc@host:8080", "a.b_c-d", "Root=1-5759e988"})
    EXPECT_TRUE(valid_request_id(ok)) << ok;
  EXPECT_TRUE(valid_request_id(std::string(kMaxRequestIdLength, 'x')));
  EXPECT_FALSE(valid_request_id(std::string(kMaxRequestIdLength + 1, 'x')));
  EXPECT_FALSE(valid_request_id(""));
  for (const char* bad : {"a b", "a,b", "a;b", "\"a\"", "a\\b", "a%20", "a\tb", "caf\xC3\xA9", "<id>", "a\r\nX: 1"})
    EXPECT_FALSE(valid_request_id(bad)) << bad;
  // Every byte: exactly A-Z a-z 0-9 . _ : + / = @ - are accepted.
  const std::string allowed = "._:+/=@-";
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const bool expect = (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') ||
                        allowed.find(c) != std::string::npos;
    EXPECT_EQ(valid_request_id(std::string_view(&c, 1)), expect) << "byte " << b;
  }
}

TEST(RequestId, MadeIdsAre32LowercaseHexAndDoNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 100'000; ++i) {
    const std::string id = made_id();
    ASSERT_TRUE(is_made_id(id)) << id;
    ASSERT_TRUE(valid_request_id(id)) << id;  // a made id is kept when passed on to another gateway
    ASSERT_TRUE(seen.insert(id).second) << "repeated: " << id;
  }
  // Each hex digit turns up in every position: the 128 bits are all used.
  for (std::size_t pos = 0; pos < kMadeRequestIdLength; ++pos) {
    std::set<char> digits;
    for (const std::string& id : seen) {
      digits.insert(id[pos]);
      if (digits.size() == 16) break;
    }
    EXPECT_EQ(digits.size(), 16u) << "position " << pos;
  }
}

TEST(RequestId, ThreadsMakeDifferentIds) {
  constexpr int kThreads = 4, kEach = 20'000;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&ids, t] {
      for (int i = 0; i < kEach; ++i) ids[t].push_back(made_id());
    });
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kEach));
}

// The id a request with these header lines gets.
std::string id_for(const std::string& fields) {
  static std::string text;  // the head's views point into it
  text = "GET / HTTP/1.1\r\nHost: h\r\n" + fields + "\r\n";
  auto head = std::make_unique<http1::RequestHead>();
  EXPECT_EQ(http1::parse_request_head(text, 8192, *head), http1::Error::none) << text;
  RequestId id;
  id.assign(*head);
  return std::string(id.view());
}

TEST(RequestId, TheCallersOneValidIdIsKept) {
  EXPECT_EQ(id_for("X-Request-Id: abc-123\r\n"), "abc-123");
  EXPECT_EQ(id_for("x-request-id:   f47ac10b-58cc-4372-a567-0e02b2c3d479  \r\n"), "f47ac10b-58cc-4372-a567-0e02b2c3d479");
  EXPECT_EQ(id_for("Accept: */*\r\nX-REQUEST-ID: svc@host:1\r\nX-Other: 1\r\n"), "svc@host:1");
  const std::string longest(kMaxRequestIdLength, 'z');
  EXPECT_EQ(id_for("X-Request-Id: " + longest + "\r\n"), longest);
}

TEST(RequestId, AnyOtherRequestGetsAMadeOne) {
  EXPECT_TRUE(is_made_id(id_for("")));
  EXPECT_TRUE(is_made_id(id_for("X-Request-Id:\r\n")));                                          // empty
  EXPECT_TRUE(is_made_id(id_for("X-Request-Id: " + std::string(kMaxRequestIdLength + 1, 'z') + "\r\n")));  // too long
  EXPECT_TRUE(is_made_id(id_for("X-Request-Id: a b\r\n")));                                      // a space
  EXPECT_TRUE(is_made_id(id_for("X-Request-Id: a,b\r\n")));                                      // a list
  EXPECT_TRUE(is_made_id(id_for("X-Request-Id: \"quoted\"\r\n")));
  // Two of them, even the same twice: which would the upstream believe? Neither.
  const std::string two = id_for("X-Request-Id: one\r\nX-Request-Id: two\r\n");
  EXPECT_TRUE(is_made_id(two)) << two;
  EXPECT_TRUE(is_made_id(id_for("X-Request-Id: same\r\nx-request-id: same\r\n")));
  // Not the same made id twice.
  EXPECT_NE(id_for(""), id_for(""));
}

TEST(RequestId, ClearedUntilAssignedOrMade) {
  RequestId id;
  EXPECT_TRUE(id.empty());
  id.make();
  EXPECT_TRUE(is_made_id(id.view()));
  id.clear();
  EXPECT_TRUE(id.empty());
  EXPECT_EQ(id.view(), "");
}

TEST(RequestId, TheFieldAsWrittenInAHead) {
  std::string head = "HTTP/1.1 200 OK\r\n";
  append_request_id_field(head, "abc-123");
  EXPECT_EQ(head, "HTTP/1.1 200 OK\r\nX-Request-Id: abc-123\r\n");
  const std::string longest(kMaxRequestIdLength, 'k');
  std::string field;
  append_request_id_field(field, longest);
  EXPECT_EQ(field, "X-Request-Id: " + longest + "\r\n");
}

TEST(RequestId, AddedToAProblemBodyAsAMember) {
  std::string body = problem_body(404, "Not Found", "no_route", "no route for this path");
  add_string_member(body, "request_id", "abc-123");
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["request_id"], "abc-123");
  EXPECT_EQ(j["error"], "no_route");
  EXPECT_EQ(j["status"], 404);
  EXPECT_EQ(body.substr(body.size() - 24), R"(,"request_id":"abc-123"})");

  std::string empty = "{}";
  add_string_member(empty, "k", "v\"");
  EXPECT_EQ(empty, R"({"k":"v\""})");
  std::string not_object = "[1]";
  add_string_member(not_object, "k", "v");
  EXPECT_EQ(not_object, "[1]");
  std::string nothing;
  add_string_member(nothing, "k", "v");
  EXPECT_EQ(nothing, "");
}

TEST(RequestId, WrittenInTheAccessLogLine) {
  AccessRecord r;
  r.request_id = "f47ac10b58cc4372a5670e02b2c3d479";
  r.client = "127.0.0.1";
  r.method = "GET";
  r.path = "/ibe/x";
  r.outcome = "forwarded";
  r.status = 200;
  const auto j = nlohmann::json::parse(access_line(r));
  EXPECT_EQ(j["request_id"], "f47ac10b58cc4372a5670e02b2c3d479");
  EXPECT_EQ(j["client"], "127.0.0.1");
  EXPECT_EQ(j["status"], 200);
  r.request_id = {};
  EXPECT_FALSE(nlohmann::json::parse(access_line(r)).contains("request_id"));
}

}  // namespace
}  // namespace tollgate::proxy

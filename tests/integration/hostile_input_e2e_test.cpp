// Hostile requests against the real gateway: other spellings of a limited path, malformed targets,
// Host and method abuse. The upstream is the mock; what reaches it is read from its stats.
#include <gtest/gtest.h>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// /shopping/search at 1/s with 3 stored permits and no wait: however a burst is spelled, at most
// 3 + 1/s * T (+1) of it may pass.
json search_rule(int upstream_port) {
  json c = base_config(upstream_port);
  c["limits"]["rules"] = json::array({{{"configId", 1}, {"channelType", "IBE+"}, {"interfaceUrl", "/shopping/search"},
                                       {"rateLimit", 1}, {"burst", 3}, {"cache", 0}, {"status", 1}}});
  return c;
}

std::string status_line(const std::string& raw) { return raw.substr(0, raw.find("\r\n")); }

TEST(HostileInput, OtherSpellingsOfALimitedPathAreLimitedAsIt) {
  MockUpstream up;
  GatewayProcess gw(search_rule(up.port));
  ASSERT_GT(gw.port, 0);
  const std::vector<std::string> spellings = {
      "/ibe/shopping/search/",     "/ibe//shopping/search", "/ibe/./shopping/search", "/ibe/x/../shopping/search",
      "/ibe/shopping/%73earch",    "/ibe/shopping/search;x", "//ibe/shopping/search", "/ibe/shopping/%2e/search",
      "/ibe/shopping;a=b/search",  "/ibe/x/..;/shopping/search"};
  int ok = 0, limited = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 2; ++round) {
    for (const auto& s : spellings) {
      const auto r = http_get(gw.port, s);
      ok += r.status == 200;
      limited += r.status == 429;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LE(ok, 3 + static_cast<int>(seconds) + 1) << "took " << seconds << " s";
  EXPECT_EQ(ok + limited, 20);
  // The upstream never sees a spelling the rules did not: dot segments, double slashes and
  // encoded unreserved characters are forwarded normalised.
  for (const char* p : {"/ibe//shopping/search", "/ibe/./shopping/search", "/ibe/x/../shopping/search",
                        "/ibe/shopping/%73earch", "//ibe/shopping/search", "/ibe/shopping/%2e/search"})
    EXPECT_EQ(up.count(p), 0) << p;
}

TEST(HostileInput, FragmentsAndEncodedSeparatorsAreRefusedNotForwarded) {
  MockUpstream up;
  GatewayProcess gw(search_rule(up.port));
  for (const char* target : {"/ibe/x#/shopping/search", "/ibe/shopping%2Fsearch", "/ibe/shopping%5csearch",
                             "/ibe/shopping/se%zzarch", "http://evil/ibe/shopping/search"}) {
    const std::string out = raw_exchange(gw.port, std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(status_line(out), "HTTP/1.1 400 Bad Request") << target << "\n" << out;
    EXPECT_NE(out.find("bad_target"), std::string::npos) << out;
  }
  EXPECT_EQ(up.stats()["total"], 0);
  // The normal path still works, and is limited.
  EXPECT_EQ(http_get(gw.port, "/ibe/shopping/search").status, 200);
}

TEST(HostileInput, HostHeaderMustBeThereOnceInHttp11) {
  MockUpstream up;
  GatewayProcess gw(base_config(up.port));
  std::string out = raw_exchange(gw.port, "GET /ibe/a HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_line(out), "HTTP/1.1 400 Bad Request") << out;
  EXPECT_NE(out.find("bad_host"), std::string::npos) << out;
  out = raw_exchange(gw.port, "GET /ibe/a HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_line(out), "HTTP/1.1 400 Bad Request") << out;
  EXPECT_EQ(up.stats()["total"], 0);
  // HTTP/1.0 needs none.
  out = raw_exchange(gw.port, "GET /ibe/a HTTP/1.0\r\n\r\n");
  EXPECT_EQ(status_line(out), "HTTP/1.0 200 OK") << out;
  EXPECT_EQ(up.count("/ibe/a"), 1);
}

TEST(HostileInput, ConnectAndTraceAre405UnlessTraceIsAllowed) {
  MockUpstream up;
  {
    GatewayProcess gw(base_config(up.port));
    std::string out = raw_exchange(gw.port, "TRACE /ibe/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(status_line(out), "HTTP/1.1 405 Method Not Allowed") << out;
    EXPECT_NE(out.find("Allow: GET"), std::string::npos) << out;
    out = raw_exchange(gw.port, "CONNECT /ibe/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(status_line(out), "HTTP/1.1 405 Method Not Allowed") << out;
    EXPECT_EQ(up.stats()["total"], 0);
  }
  json c = base_config(up.port);
  c["proxy"]["allow_trace"] = true;
  GatewayProcess gw(c);
  const std::string out = raw_exchange(gw.port, "TRACE /ibe/t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_line(out), "HTTP/1.1 200 OK") << out;
  EXPECT_EQ(up.count("/ibe/t"), 1);
}

}  // namespace
}  // namespace tollgate::testing

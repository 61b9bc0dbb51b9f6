// Spellings of a limited path that an upstream may read as that path, against the real gateway:
// another case (with limits.match.case "insensitive" or a rule's matchCase), a trailing '.', dot
// segments with ';' parameters. Each spelling draws from the rule's one bucket, so exhausting it
// with one spelling leaves none for another. Encoded NUL, control characters and a %20 at a
// segment's end are refused with 400 bad_target and never forwarded.
#include <gtest/gtest.h>

#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

using nlohmann::json;

// /shopping/search with 3 stored permits, one more every 100 s and no wait: the fourth request
// within a test is refused, whichever spelling it uses.
json spelling_config(int upstream_port, const json& match = nullptr) {
  json c = base_config(upstream_port);
  c["limits"]["rules"] = json::array(
      {{{"configId", 1}, {"channelType", "IBE+"}, {"interfaceUrl", "/shopping/search"}, {"rateLimit", 0.01},
        {"burst", 3}, {"cache", 0}, {"status", 1}},
       {{"configId", 2}, {"channelType", "IBE+"}, {"interfaceUrl", "/Pricing"}, {"rateLimit", 0.01}, {"burst", 1},
        {"cache", 0}, {"status", 1}, {"matchCase", "insensitive"}}});
  if (!match.is_null()) c["limits"]["match"] = match;
  return c;
}

std::string status_line(const std::string& raw) { return raw.substr(0, raw.find("\r\n")); }

int status_of(int port, const std::string& target) {
  const std::string out = raw_exchange(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string line = status_line(out);
  return line.size() >= 12 ? std::stoi(line.substr(9, 3)) : -1;
}

TEST(PathSpelling, CaseInsensitiveMatchingSharesTheBucketAcrossCases) {
  MockUpstream up;
  GatewayProcess gw(spelling_config(up.port, {{"case", "insensitive"}}));
  ASSERT_GT(gw.port, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(status_of(gw.port, "/ibe/SHOPPING/SEARCH"), 200) << i;
  for (const char* other : {"/ibe/shopping/search", "/ibe/Shopping/Search", "/SHOPPING/SEARCH.", "/shopping/search."})
    EXPECT_EQ(status_of(gw.port, other), 429) << other;
  EXPECT_EQ(up.count("/ibe/SHOPPING/SEARCH"), 3);
  EXPECT_EQ(up.count("/ibe/shopping/search"), 0);
  EXPECT_EQ(status_of(gw.port, "/ibe/other"), 200);  // unmatched, forwarded
}

TEST(PathSpelling, CaseSensitiveByDefaultAndPerRuleOverride) {
  MockUpstream up;
  GatewayProcess gw(spelling_config(up.port));
  ASSERT_GT(gw.port, 0);
  // Default "sensitive": another case is another path, forwarded unlimited (no rule matches it).
  for (int i = 0; i < 5; ++i) EXPECT_EQ(status_of(gw.port, "/ibe/SHOPPING/SEARCH"), 200) << i;
  // /Pricing has matchCase "insensitive" of its own: one permit for every case.
  EXPECT_EQ(status_of(gw.port, "/ibe/PRICING"), 200);
  EXPECT_EQ(status_of(gw.port, "/ibe/pricing"), 429);
  EXPECT_EQ(status_of(gw.port, "/ibe/Pricing"), 429);
  // The operator sees which rule matches how.
  const json rules = gw.admin_json("/admin/rules");  // named: a range-for over a temporary's member reads freed memory
  for (const json& r : rules["rules"])
    EXPECT_EQ(r["matchCase"], r["configId"] == 2 ? "insensitive" : "sensitive") << r.dump();
}

TEST(PathSpelling, TrailingDotsAndDotParametersShareTheBucket) {
  MockUpstream up;
  GatewayProcess gw(spelling_config(up.port));
  ASSERT_GT(gw.port, 0);
  EXPECT_EQ(status_of(gw.port, "/ibe/shopping/search."), 200);
  EXPECT_EQ(status_of(gw.port, "/ibe/shopping/search%2e"), 200);
  EXPECT_EQ(status_of(gw.port, "/ibe/x/%2e%2e;/shopping/search.."), 200);
  for (const char* other : {"/ibe/shopping/search", "/ibe/shopping/search.", "/ibe/shopping./search",
                            "/ibe/x/.;/../shopping/search", "/ibe/shopping/search.;jsessionid=1"})
    EXPECT_EQ(status_of(gw.port, other), 429) << other;
  // Forwarded as sent (normalised: %2e is '.'): the limit applied to them.
  EXPECT_EQ(up.count("/ibe/shopping/search."), 2);
  EXPECT_EQ(up.count("/ibe/x/..;/shopping/search.."), 1);
}

TEST(PathSpelling, EncodedControlsAndEdgeSpacesAreRefusedNotForwarded) {
  MockUpstream up;
  GatewayProcess gw(spelling_config(up.port));
  ASSERT_GT(gw.port, 0);
  for (const char* target : {"/ibe/shopping/search%00", "/ibe/shopping/search%00.json", "/ibe/shopping/search%09",
                             "/ibe/shopping/search%0A", "/ibe/shopping/search%7F", "/ibe/shopping/search%20",
                             "/ibe/shopping/search%20.", "/ibe/shopping/%20search", "/ibe/shopping/search%20;x"}) {
    const std::string out = raw_exchange(gw.port, std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(status_line(out), "HTTP/1.1 400 Bad Request") << target << "\n" << out;
    EXPECT_NE(out.find("bad_target"), std::string::npos) << out;
  }
  EXPECT_EQ(up.stats()["total"], 0);
  // A space inside a segment is a name like any other; an encoded NUL in the query is not the path.
  EXPECT_EQ(status_of(gw.port, "/ibe/files/my%20doc"), 200);
  EXPECT_EQ(status_of(gw.port, "/ibe/other?q=%00"), 200);
  // The rule's permits are all still there.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(status_of(gw.port, "/ibe/shopping/search"), 200) << i;
  EXPECT_EQ(status_of(gw.port, "/ibe/shopping/search"), 429);
}

}  // namespace
}  // namespace tollgate::testing

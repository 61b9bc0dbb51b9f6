#include "tollgate/proxy/request_target.hpp"

#include <gtest/gtest.h>

namespace tollgate::proxy {
namespace {

struct Case {
  const char* raw;
  const char* path;
  const char* match;
  const char* query;
};

TEST(RequestTarget, NormalFormsPassUntouched) {
  for (const char* raw : {"/", "/shopping/search", "/ibe/shopping/search?x=1&y=%2F", "/a.b/c-d_e~f", "/.well-known"}) {
    RequestTarget t;
    parse_target(raw, t);
    ASSERT_EQ(t.error, TargetError::none) << raw;
    const std::string_view r(raw);
    EXPECT_EQ(std::string(t.path) + std::string(t.query), r) << raw;
    EXPECT_FALSE(t.rewritten) << raw;
  }
}

// Every spelling of a limited path that an upstream may read as that path is matched as it.
TEST(RequestTarget, SpellingsOfOnePathMatchTheSame) {
  const Case cases[] = {
      {"/ibe/shopping/search", "/ibe/shopping/search", "/ibe/shopping/search", ""},
      {"/ibe/shopping/search/", "/ibe/shopping/search/", "/ibe/shopping/search", ""},
      {"/ibe//shopping///search", "/ibe/shopping/search", "/ibe/shopping/search", ""},
      {"//ibe/shopping/search", "/ibe/shopping/search", "/ibe/shopping/search", ""},
      {"/ibe/./shopping/search", "/ibe/shopping/search", "/ibe/shopping/search", ""},
      {"/ibe/x/../shopping/search", "/ibe/shopping/search", "/ibe/shopping/search", ""},
      {"/ibe/shopping/search/.", "/ibe/shopping/search/", "/ibe/shopping/search", ""},
      {"/ibe/shopping/%73earch", "/ibe/shopping/search", "/ibe/shopping/search", ""},
      {"/ibe/shopping/%2e/search", "/ibe/shopping/search", "/ibe/shopping/search", ""},
      {"/ibe/%7Eshop", "/ibe/~shop", "/ibe/~shop", ""},
      {"/ibe/shopping/search;x", "/ibe/shopping/search;x", "/ibe/shopping/search", ""},
      {"/ibe/shopping;jsessionid=1/search", "/ibe/shopping;jsessionid=1/search", "/ibe/shopping/search", ""},
      {"/ibe/x/..;/shopping/search", "/ibe/x/..;/shopping/search", "/ibe/shopping/search", ""},
      {"/ibe/shopping/search/?q=1", "/ibe/shopping/search/", "/ibe/shopping/search", "?q=1"},
      {"/../../etc", "/etc", "/etc", ""},
      {"/a/%c3%a9", "/a/%C3%A9", "/a/%C3%A9", ""},
      {"/a/b/..", "/a/", "/a", ""},
  };
  for (const auto& c : cases) {
    RequestTarget t;
    parse_target(c.raw, t);
    ASSERT_EQ(t.error, TargetError::none) << c.raw;
    EXPECT_EQ(t.path, c.path) << c.raw;
    EXPECT_EQ(t.match, c.match) << c.raw;
    EXPECT_EQ(t.query, c.query) << c.raw;
    EXPECT_EQ(t.rewritten, std::string_view(c.raw).substr(0, std::string_view(c.raw).find('?')) != c.path) << c.raw;
  }
}

TEST(RequestTarget, MalformedTargetsAreRefused) {
  const std::pair<const char*, TargetError> cases[] = {
      {"/ibe/x#/shopping/search", TargetError::fragment},
      {"/ibe/x?a=1#frag", TargetError::fragment},
      {"*", TargetError::not_origin_form},
      {"http://evil/shopping/search", TargetError::not_origin_form},
      {"", TargetError::not_origin_form},
      {"/a%2Fshopping", TargetError::encoded_separator},
      {"/a%2fb", TargetError::encoded_separator},
      {"/a%5Cb", TargetError::encoded_separator},
      {"/a\\b", TargetError::encoded_separator},
      {"/a%zzb", TargetError::bad_escape},
      {"/a%4", TargetError::bad_escape},
      {"/a%", TargetError::bad_escape},
      {"/a b", TargetError::control},
      {"/a\x01", TargetError::control},
      {"/a\xc3\xa9", TargetError::control},
  };
  for (const auto& [raw, err] : cases) {
    RequestTarget t;
    parse_target(raw, t);
    EXPECT_EQ(t.error, err) << raw;
    EXPECT_STRNE(target_error_detail(err), "");
  }
}

// A struct reused for the next request starts clean.
TEST(RequestTarget, ReuseResets) {
  RequestTarget t;
  parse_target("/a//b;x/", t);
  ASSERT_TRUE(t.rewritten);
  parse_target("/c", t);
  EXPECT_FALSE(t.rewritten);
  EXPECT_EQ(t.path, "/c");
  EXPECT_EQ(t.match, "/c");
  parse_target("/c#x", t);
  EXPECT_EQ(t.error, TargetError::fragment);
}

}  // namespace
}  // namespace tollgate::proxy

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

// The spellings an upstream may trim or cut: a trailing '.' on a segment (Windows, IIS, Spring's
// suffix pattern match), and the '.;' and '%2e%2e;' forms of dot segments with parameters. They are
// matched as the path itself and forwarded as sent (the limit applies to them).
TEST(RequestTarget, TrailingDotsAndDotParametersMatchThePathItself) {
  const Case cases[] = {
      {"/shopping/search.", "/shopping/search.", "/shopping/search", ""},
      {"/shopping/search..", "/shopping/search..", "/shopping/search", ""},
      {"/shopping/search%2e", "/shopping/search.", "/shopping/search", ""},
      {"/shopping/search%2E%2e?q=1", "/shopping/search..", "/shopping/search", "?q=1"},
      {"/shopping./search", "/shopping./search", "/shopping/search", ""},
      {"/shopping/search./", "/shopping/search./", "/shopping/search", ""},
      {"/shopping/search.;x", "/shopping/search.;x", "/shopping/search", ""},
      {"/shopping/search;x.", "/shopping/search;x.", "/shopping/search", ""},
      {"/x/.;/shopping/search", "/x/.;/shopping/search", "/x/shopping/search", ""},
      {"/x/%2e;/shopping/search", "/x/.;/shopping/search", "/x/shopping/search", ""},
      {"/x/%2e%2e;/shopping/search", "/x/..;/shopping/search", "/shopping/search", ""},
      {"/x/%2E%2E;a=b/shopping/search", "/x/..;a=b/shopping/search", "/shopping/search", ""},
      {"/x/.../shopping/search", "/x/.../shopping/search", "/x/shopping/search", ""},
      {"/a.b/c", "/a.b/c", "/a.b/c", ""},
      {"/.well-known/x", "/.well-known/x", "/.well-known/x", ""},
      {"/files/my%20doc", "/files/my%20doc", "/files/my%20doc", ""},
      {"/...", "/...", "/", ""},
  };
  for (const auto& c : cases) {
    RequestTarget t;
    parse_target(c.raw, t);
    ASSERT_EQ(t.error, TargetError::none) << c.raw;
    EXPECT_EQ(t.path, c.path) << c.raw;
    EXPECT_EQ(t.match, c.match) << c.raw;
    EXPECT_EQ(t.query, c.query) << c.raw;
  }
}

// An encoded NUL or control character in the path (some servers cut the path at a decoded NUL,
// others trim a tab or a line end) and an encoded space at either end of a segment (trimmed by
// Windows and by string trimming) are refused: 400 bad_target. A space inside a segment is a
// legitimate name and passes. The query is not the path: it is forwarded as sent.
TEST(RequestTarget, EncodedControlsAndEdgeSpacesAreRefused) {
  const std::pair<const char*, TargetError> cases[] = {
      {"/shopping/search%00", TargetError::encoded_control},
      {"/shopping/search%00.json", TargetError::encoded_control},
      {"/shopping/search%09", TargetError::encoded_control},
      {"/shopping/se%0Aarch", TargetError::encoded_control},
      {"/shopping/search%0d", TargetError::encoded_control},
      {"/shopping/search%1F", TargetError::encoded_control},
      {"/shopping/search%7f", TargetError::encoded_control},
      {"/shopping/search%20", TargetError::edge_space},
      {"/shopping/search%20/", TargetError::edge_space},
      {"/shopping/%20search", TargetError::edge_space},
      {"/shopping%20/search", TargetError::edge_space},
      {"/shopping/search%20.", TargetError::edge_space},
      {"/shopping/search.%20", TargetError::edge_space},
      {"/shopping/search%20;x", TargetError::edge_space},
      {"/shopping/search%20?q=1", TargetError::edge_space},
  };
  for (const auto& [raw, err] : cases) {
    RequestTarget t;
    parse_target(raw, t);
    EXPECT_EQ(t.error, err) << raw;
    EXPECT_STRNE(target_error_detail(err), "");
  }
  for (const char* ok : {"/shopping/search?q=%00", "/shopping/search?q=%20", "/files/a%20b", "/a/%C2%A0"}) {
    RequestTarget t;
    parse_target(ok, t);
    EXPECT_EQ(t.error, TargetError::none) << ok;
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
  parse_target("/c%20", t);
  EXPECT_EQ(t.error, TargetError::edge_space);
  parse_target("/c.", t);
  EXPECT_EQ(t.error, TargetError::none);
  EXPECT_EQ(t.path, "/c.");
  EXPECT_EQ(t.match, "/c");
}

}  // namespace
}  // namespace tollgate::proxy

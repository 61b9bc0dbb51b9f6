#include <gtest/gtest.h>

#include <cctype>

#include "tollgate/config/suffix_index.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::config {
namespace {

TEST(SuffixIndex, LongestSegmentSuffixWins) {
  SuffixIndex idx;
  idx.add("/search", 1);
  idx.add("/shopping/search", 2);
  EXPECT_EQ(idx.match("/api/v2/shopping/search"), 2u);
  EXPECT_EQ(idx.match("/shopping/search"), 2u);
  EXPECT_EQ(idx.match("/api/v2/other/search"), 1u);
  EXPECT_EQ(idx.match("/search"), 1u);
}

TEST(SuffixIndex, MatchesOnlyOnSegmentBoundaries) {
  SuffixIndex idx;
  idx.add("/search", 1);
  EXPECT_EQ(idx.match("/api/xsearch"), SuffixIndex::npos);
  EXPECT_EQ(idx.match("/api/search/"), SuffixIndex::npos);
  EXPECT_EQ(idx.match("/api/search/more"), SuffixIndex::npos);
  EXPECT_EQ(idx.match("search"), SuffixIndex::npos);
  EXPECT_EQ(idx.match(""), SuffixIndex::npos);
}

TEST(SuffixIndex, NoRulesNoMatch) {
  SuffixIndex idx;
  EXPECT_EQ(idx.match("/a/b"), SuffixIndex::npos);
}

TEST(SuffixIndex, QueryIsNotPartOfThePath) {
  SuffixIndex idx;
  idx.add("/pricing", 7);
  EXPECT_EQ(idx.match(proxy::path_of("/ibe/pricing?from=PEK&to=/pricing")), 7u);
  EXPECT_EQ(idx.match(proxy::path_of("/ibe/pricing#frag")), 7u);
}

TEST(SuffixIndex, DeepPathsOnlyProbeAsDeepAsTheDeepestRule) {
  SuffixIndex idx;
  idx.add("/a/b", 1);
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += "/x";
  EXPECT_EQ(idx.match(deep + "/a/b"), 1u);
  EXPECT_EQ(idx.match(deep), SuffixIndex::npos);
}

TEST(SuffixIndex, ManyRules) {
  SuffixIndex idx;
  for (std::size_t i = 0; i < 100000; ++i) idx.add("/svc" + std::to_string(i) + "/op", i);
  EXPECT_EQ(idx.size(), 100000u);
  EXPECT_EQ(idx.match("/gw/svc99999/op"), 99999u);
  EXPECT_EQ(idx.match("/gw/svc5/op"), 5u);
  EXPECT_EQ(idx.match("/gw/svc100000/op"), SuffixIndex::npos);
}

// A case-insensitive suffix matches its ASCII letters in any case, on segment boundaries and
// longest first like any other; a case-sensitive one still matches byte for byte.
TEST(SuffixIndex, FoldedSuffixesMatchAnyCase) {
  SuffixIndex idx;
  idx.add("/Shopping/Search", 1, true);
  idx.add("/pricing", 2);
  for (const char* p : {"/shopping/search", "/SHOPPING/SEARCH", "/ibe/ShOpPiNg/sEaRcH", "/IBE/Shopping/Search"})
    EXPECT_EQ(idx.match(p), 1u) << p;
  EXPECT_EQ(idx.match("/ibe/pricing"), 2u);
  EXPECT_EQ(idx.match("/ibe/PRICING"), SuffixIndex::npos);
  EXPECT_EQ(idx.match("/ibe/Pricing"), SuffixIndex::npos);
  EXPECT_EQ(idx.match("/ibe/SHOPPING/XSEARCH"), SuffixIndex::npos);
  EXPECT_EQ(idx.match("/ibe/SHOPPING/SEARCH/more"), SuffixIndex::npos);
  EXPECT_EQ(idx.size(), 2u);
}

TEST(SuffixIndex, FoldedAndExactSuffixesLongestWins) {
  SuffixIndex idx;
  idx.add("/search", 1, true);
  idx.add("/shopping/search", 2);
  idx.add("/a/b/c/d", 3, true);
  EXPECT_EQ(idx.match("/ibe/shopping/search"), 2u);
  EXPECT_EQ(idx.match("/ibe/shopping/SEARCH"), 1u);  // the exact suffix does not match this case
  EXPECT_EQ(idx.match("/ibe/Shopping/search"), 1u);
  EXPECT_EQ(idx.match("/x/A/B/C/D"), 3u);
  EXPECT_EQ(idx.match("/A/B/C/D"), 3u);
  EXPECT_EQ(idx.match("/B/C/D"), SuffixIndex::npos);
}

// Escapes compare as written (upper-case hex after normalisation); only letters outside them fold.
TEST(SuffixIndex, FoldedSuffixesWithEscapesAndLongPaths) {
  SuffixIndex idx;
  idx.add("/caf%C3%A9/menu", 1, true);
  EXPECT_EQ(idx.match("/CAF%C3%A9/MENU"), 1u);
  EXPECT_EQ(idx.match("/x/Caf%C3%A9/Menu"), 1u);
  // A path far longer than any suffix: only its tail is lowered.
  std::string deep;
  for (int i = 0; i < 2000; ++i) deep += "/SEG";
  EXPECT_EQ(idx.match(deep + "/CAF%C3%A9/MENU"), 1u);
  EXPECT_EQ(idx.match(deep), SuffixIndex::npos);
  // A suffix longer than the stack buffer still matches.
  std::string long_suffix;
  for (int i = 0; i < 60; ++i) long_suffix += "/Seg" + std::to_string(i);
  idx.add(long_suffix, 2, true);
  std::string upper = long_suffix;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(idx.match("/gw" + upper), 2u);
  EXPECT_EQ(idx.match(upper), 2u);
}

}  // namespace
}  // namespace tollgate::config

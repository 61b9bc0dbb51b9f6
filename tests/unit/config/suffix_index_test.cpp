#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tollgate::config

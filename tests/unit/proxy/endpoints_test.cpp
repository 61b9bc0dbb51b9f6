// An upstream's endpoints: least-outstanding balancing with round robin on ties, passive
// ejection (threshold, growing duration, max_percent) on a manual clock, the set kept across
// resolutions, and how the upstream's path is joined.
#include <gtest/gtest.h>

#include "proxy/endpoints.hpp"
#include "tollgate/proxy/request_target.hpp"

namespace tollgate::proxy {
namespace {

tcp::endpoint ep(const char* ip, unsigned short port = 8080) { return {net::ip::make_address(ip), port}; }

EndpointSet set_of(std::initializer_list<const char*> ips) {
  EndpointSet s;
  for (const char* ip : ips) s.endpoints.push_back(std::make_shared<UpstreamEndpoint>(ep(ip), "h", 1));
  return s;
}

TEST(Balancing, FewestOutstandingWinsAndTiesGoRoundRobin) {
  EndpointSet s = set_of({"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  std::uint32_t rr = 0;
  std::vector<std::size_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(pick_endpoint(s, rr, 0, nullptr, 0));
  EXPECT_EQ(picks, (std::vector<std::size_t>{0, 1, 2, 0, 1, 2}));
  s.endpoints[0]->outstanding = 2;
  s.endpoints[1]->outstanding = 1;
  s.endpoints[2]->outstanding = 3;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pick_endpoint(s, rr, 0, nullptr, 0), 1u);
}

TEST(Balancing, EjectedAndTriedEndpointsAreSkipped) {
  EndpointSet s = set_of({"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  std::uint32_t rr = 0;
  s.endpoints[0]->ejected_until_us = 1000;
  const UpstreamEndpoint* tried[] = {s.endpoints[1].get()};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pick_endpoint(s, rr, 999, tried, 1), 2u);
  // Its ejection over, it is used again.
  for (int i = 0; i < 4; ++i) EXPECT_NE(pick_endpoint(s, rr, 1000, tried, 1), 1u);
  const UpstreamEndpoint* all[] = {s.endpoints[0].get(), s.endpoints[1].get(), s.endpoints[2].get()};
  EXPECT_EQ(pick_endpoint(s, rr, 0, all, 3), kNoEndpoint);
  EXPECT_EQ(pick_endpoint(EndpointSet{}, rr, 0, nullptr, 0), kNoEndpoint);
}

TEST(Balancing, WhenEveryUntriedOneIsEjectedOneIsPickedAnyway) {
  EndpointSet s = set_of({"10.0.0.1", "10.0.0.2"});
  s.endpoints[0]->ejected_until_us = 5000;
  s.endpoints[1]->ejected_until_us = 5000;
  std::uint32_t rr = 0;
  EXPECT_NE(pick_endpoint(s, rr, 0, nullptr, 0), kNoEndpoint);
}

TEST(Ejection, AfterConsecutiveFailuresForBaseTimesTheRunOfEjections) {
  EndpointSet s = set_of({"10.0.0.1", "10.0.0.2"});
  UpstreamEndpoint& e = *s.endpoints[0];
  const EjectPolicy p{3, 1'000'000, 50};
  EXPECT_FALSE(note_failure(s, e, p, 0));
  EXPECT_FALSE(note_failure(s, e, p, 0));
  note_success(e, p);  // a success breaks the run
  EXPECT_FALSE(note_failure(s, e, p, 0));
  EXPECT_FALSE(note_failure(s, e, p, 0));
  EXPECT_TRUE(note_failure(s, e, p, 10));
  EXPECT_EQ(e.ejected_until_us.load(), 1'000'010);
  // Back, failing again: twice as long, then three times.
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(note_failure(s, e, p, 2'000'000));
  EXPECT_TRUE(note_failure(s, e, p, 2'000'000));
  EXPECT_EQ(e.ejected_until_us.load(), 4'000'000);
  // As many successes in a row as the threshold end the run: base time again.
  for (int i = 0; i < 3; ++i) note_success(e, p);
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(note_failure(s, e, p, 5'000'000));
  EXPECT_TRUE(note_failure(s, e, p, 5'000'000));
  EXPECT_EQ(e.ejected_until_us.load(), 6'000'000);
}

TEST(Ejection, LastsAtMostTenTimesBase) {
  EndpointSet s = set_of({"10.0.0.1", "10.0.0.2"});
  UpstreamEndpoint& e = *s.endpoints[0];
  const EjectPolicy p{1, 1000, 50};
  std::int64_t now = 0;
  for (int i = 0; i < 15; ++i) {
    ASSERT_TRUE(note_failure(s, e, p, now));
    now = e.ejected_until_us.load();
  }
  EXPECT_TRUE(note_failure(s, e, p, now));
  EXPECT_EQ(e.ejected_until_us.load() - now, 10'000);
}

TEST(Ejection, NeverMoreThanMaxPercentOut) {
  EndpointSet s = set_of({"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  const EjectPolicy p{1, 1'000'000, 34};  // one of three is 33%: one at most
  EXPECT_TRUE(note_failure(s, *s.endpoints[0], p, 0));
  EXPECT_FALSE(note_failure(s, *s.endpoints[1], p, 0));
  EXPECT_FALSE(note_failure(s, *s.endpoints[2], p, 0));
  EXPECT_EQ(s.endpoints[1]->ejected_until_us.load(), 0);
  // Once the first is back, another may go.
  EXPECT_TRUE(note_failure(s, *s.endpoints[1], p, 1'000'000));
  // A single endpoint is never ejected under 100%; consecutive_failures 0 never ejects.
  EndpointSet one = set_of({"10.0.0.9"});
  EXPECT_FALSE(note_failure(one, *one.endpoints[0], EjectPolicy{1, 1000, 99}, 0));
  EXPECT_TRUE(note_failure(one, *one.endpoints[0], EjectPolicy{1, 1000, 100}, 0));
  EXPECT_FALSE(note_failure(s, *s.endpoints[2], EjectPolicy{0, 1000, 100}, 5'000'000));
}

TEST(EndpointSets, AnAnswerKeepsTheEndpointsStillInItAndDropsTheOthers) {
  Metrics metrics;
  config::UpstreamConfig conf;
  conf.name = "s";
  conf.targets.push_back({"http://a.example:8080", "a.example", 8080, false, "a.example:8080"});
  UpstreamEndpoints up(conf, 2, metrics, metrics.upstream("s"));
  EXPECT_FALSE(up.resolved());
  const std::uint64_t v0 = up.version();
  ASSERT_TRUE(up.set_addresses(0, {ep("10.0.0.1"), ep("10.0.0.2"), ep("10.0.0.1")}));
  EXPECT_TRUE(up.resolved());
  EXPECT_GT(up.version(), v0);
  std::uint64_t v = 0;
  auto first = up.current(v);
  ASSERT_EQ(first->endpoints.size(), 2u);  // the repeated address once
  EXPECT_EQ(first->endpoints[0]->label, "10.0.0.1:8080");
  EXPECT_EQ(first->endpoints[0]->host_header, "a.example:8080");
  EXPECT_FALSE(up.set_addresses(0, {ep("10.0.0.1"), ep("10.0.0.2")}));  // the same: no new set
  ASSERT_TRUE(up.set_addresses(0, {ep("10.0.0.2"), ep("10.0.0.3")}));
  auto second = up.current(v);
  ASSERT_EQ(second->endpoints.size(), 2u);
  EXPECT_EQ(second->endpoints[0], first->endpoints[1]);  // 10.0.0.2 kept, with its health and sessions
  EXPECT_FALSE(first->endpoints[0]->in_set.load());      // 10.0.0.1 left: its pooled connections go
  EXPECT_TRUE(first->endpoints[1]->in_set.load());
  EXPECT_EQ(second->endpoints[1]->label, "10.0.0.3:8080");
  const std::string text = metrics.render();
  EXPECT_EQ(text.find("endpoint=\"10.0.0.1:8080\",upstream=\"s\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("tollgate_upstream_endpoint_up{endpoint=\"10.0.0.3:8080\",upstream=\"s\"} 1"), std::string::npos);
  EXPECT_NE(text.find("tollgate_upstream_unresolved{upstream=\"s\"} 0"), std::string::npos);
}

// A resolver that rotates its answer order gives the same set: no new set, nothing to log. A name
// whose answers keep changing leaves no series behind for the addresses it no longer gives: after
// nine sets of 50, /metrics holds the last set's series only.
TEST(EndpointSets, ARotatedAnswerIsTheSameSetAndLeftAddressesLeaveNoSeries) {
  Metrics metrics;
  config::UpstreamConfig conf;
  conf.name = "s";
  conf.targets.push_back({"http://a.example:8080", "a.example", 8080, false, "a.example:8080"});
  UpstreamEndpoints up(conf, 2, metrics, metrics.upstream("s"));
  ASSERT_TRUE(up.set_addresses(0, {ep("10.0.0.1"), ep("10.0.0.2"), ep("10.0.0.3")}));
  const std::uint64_t v = up.version();
  EXPECT_FALSE(up.set_addresses(0, {ep("10.0.0.2"), ep("10.0.0.3"), ep("10.0.0.1")}));
  EXPECT_FALSE(up.set_addresses(0, {ep("10.0.0.3"), ep("10.0.0.1"), ep("10.0.0.2")}));
  EXPECT_EQ(up.version(), v);
  for (int set = 0; set < 9; ++set) {
    std::vector<tcp::endpoint> answer;
    for (int i = 0; i < 50; ++i) answer.push_back(ep(("10.1." + std::to_string(set) + "." + std::to_string(i)).c_str()));
    ASSERT_TRUE(up.set_addresses(0, answer));
    // An ejection on each set: its counter exists while the address is in the answers.
    std::uint64_t version = 0;
    up.mark_ejected(*up.current(version)->endpoints[0]);
  }
  const std::string text = metrics.render();
  auto count = [&](const std::string& name) {
    std::size_t n = 0;
    for (std::size_t at = text.find("\n" + name + "{"); at != std::string::npos; at = text.find("\n" + name + "{", at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("tollgate_upstream_endpoint_up"), 50u);
  EXPECT_LE(count("tollgate_upstream_ejections_total"), 50u);
  EXPECT_NE(text.find("tollgate_upstream_ejections_total{endpoint=\"10.1.8.0:8080\",upstream=\"s\"} 1"),
            std::string::npos);
  EXPECT_EQ(text.find("10.1.7."), std::string::npos);
}

TEST(UpstreamTarget, BasePathAndStrippedPrefixJoinWithOneSlash) {
  EXPECT_EQ(upstream_target("", "", "/a/b?q=1"), "/a/b?q=1");
  EXPECT_EQ(upstream_target("/v2", "", "/a/b?q=1"), "/v2/a/b?q=1");
  EXPECT_EQ(upstream_target("/v2", "/supplier", "/supplier/a?q"), "/v2/a?q");
  EXPECT_EQ(upstream_target("/v2", "/supplier", "/supplier"), "/v2/");
  EXPECT_EQ(upstream_target("", "/supplier", "/supplier?q"), "/?q");
  EXPECT_EQ(upstream_target("", "/sup", "/supplier"), "/plier");
  EXPECT_EQ(upstream_target("/v2", "/supplier/", "/supplier/a"), "/v2/a");
}

}  // namespace
}  // namespace tollgate::proxy

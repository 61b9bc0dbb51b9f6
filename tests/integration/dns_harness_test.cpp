// The test harness's own checks: the dnsmasq helper (support/dns.hpp) answers what it was told,
// changes its answers when told, over UDP and TCP, and goes silent when stopped; metric_series
// (support/stack.hpp) reads labelled Prometheus series.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "support/dns.hpp"
#include "support/stack.hpp"

namespace tollgate::testing {
namespace {

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

class DnsmasqHarness : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Dnsmasq::available()) {
      // scripts/test.sh installs it: under CI a missing dnsmasq is a failure, not a silent skip.
      if (std::getenv("CI")) FAIL() << "dnsmasq is not installed (scripts/deps.sh test installs dnsmasq-base)";
      GTEST_SKIP() << "dnsmasq is not installed (scripts/deps.sh test installs dnsmasq-base)";
    }
  }
};

TEST_F(DnsmasqHarness, AnswersFromItsHostsFileWithOneSecondTtlAndNxdomainOtherwise) {
  Dnsmasq dns("supplier.test", {"127.0.0.2", "127.0.0.3"});
  ASSERT_GT(dns.port(), 0);
  EXPECT_EQ(dns.server(), "127.0.0.1:" + std::to_string(dns.port()));

  const auto a = dns_query(dns.port(), "supplier.test");
  ASSERT_TRUE(a) << dns.output();
  EXPECT_EQ(a->rcode, 0);
  EXPECT_EQ(sorted(a->addresses), std::vector<std::string>({"127.0.0.2", "127.0.0.3"}));
  EXPECT_EQ(a->min_ttl, 1u);  // a resolver honouring TTLs asks again within a second
  EXPECT_FALSE(a->truncated);

  // The name has no IPv6 address: an empty answer, not an error.
  const auto aaaa = dns_query(dns.port(), "supplier.test", kDnsTypeAAAA);
  ASSERT_TRUE(aaaa);
  EXPECT_EQ(aaaa->rcode, 0);
  EXPECT_TRUE(aaaa->addresses.empty());

  // Anything else does not exist (and nothing is forwarded to the machine's resolvers).
  for (const char* other : {"other.test", "localhost", "example.com"}) {
    const auto r = dns_query(dns.port(), other);
    ASSERT_TRUE(r) << other;
    EXPECT_EQ(r->rcode, 3) << other;
    EXPECT_TRUE(r->addresses.empty()) << other;
  }
}

TEST_F(DnsmasqHarness, SetChangesTheAnswersAtOnceOverUdpAndTcp) {
  Dnsmasq dns;
  EXPECT_EQ(dns_query(dns.port(), "supplier.test")->rcode, 3);

  dns.set("supplier.test", {"127.0.0.2"});
  auto udp = dns_query(dns.port(), "supplier.test");
  auto tcp = dns_query_tcp(dns.port(), "supplier.test");
  ASSERT_TRUE(udp);
  ASSERT_TRUE(tcp) << "no answer over TCP: " << dns.output();
  EXPECT_EQ(udp->addresses, std::vector<std::string>({"127.0.0.2"}));
  EXPECT_EQ(tcp->addresses, std::vector<std::string>({"127.0.0.2"}));

  dns.set("supplier.test", {"127.0.0.3", "127.0.0.4"});
  dns.set("v6.test", {"::1"});
  udp = dns_query(dns.port(), "supplier.test");
  tcp = dns_query_tcp(dns.port(), "supplier.test");
  ASSERT_TRUE(udp && tcp);
  EXPECT_EQ(sorted(udp->addresses), std::vector<std::string>({"127.0.0.3", "127.0.0.4"}));
  EXPECT_EQ(sorted(tcp->addresses), std::vector<std::string>({"127.0.0.3", "127.0.0.4"}));
  const auto v6 = dns_query(dns.port(), "v6.test", kDnsTypeAAAA);
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->addresses, std::vector<std::string>({"::1"}));

  dns.set("supplier.test", {});  // removed
  EXPECT_EQ(dns_query(dns.port(), "supplier.test")->rcode, 3);
  EXPECT_EQ(dns_query(dns.port(), "v6.test", kDnsTypeAAAA)->addresses, std::vector<std::string>({"::1"}));
}

TEST_F(DnsmasqHarness, StoppedServerAnswersNothing) {
  Dnsmasq dns("supplier.test", {"127.0.0.2"});
  ASSERT_TRUE(dns_query(dns.port(), "supplier.test"));
  dns.stop();
  EXPECT_FALSE(dns.running());
  EXPECT_FALSE(dns_query(dns.port(), "supplier.test", kDnsTypeA, std::chrono::milliseconds(300)));
  EXPECT_FALSE(dns_query_tcp(dns.port(), "supplier.test", kDnsTypeA, std::chrono::milliseconds(300)));
  EXPECT_THROW(dns.set("supplier.test", {"127.0.0.3"}), std::runtime_error);
}

TEST_F(DnsmasqHarness, TwoServersRunSideBySide) {
  Dnsmasq one("supplier.test", {"127.0.0.2"});
  Dnsmasq two("supplier.test", {"127.0.0.3"});
  ASSERT_NE(one.port(), two.port());
  EXPECT_EQ(dns_query(one.port(), "supplier.test")->addresses, std::vector<std::string>({"127.0.0.2"}));
  EXPECT_EQ(dns_query(two.port(), "supplier.test")->addresses, std::vector<std::string>({"127.0.0.3"}));
}

TEST(MetricSeries, MatchesLabelsInAnyOrderAndSumsTheMatchingSeries) {
  const std::string text =
      "# HELP tollgate_upstream_endpoint_up 1 in use, 0 ejected\n"
      "# TYPE tollgate_upstream_endpoint_up gauge\n"
      "tollgate_upstream_endpoint_up{endpoint=\"127.0.0.2:8080\",upstream=\"ibe\"} 1\n"
      "tollgate_upstream_endpoint_up{upstream=\"ibe\",endpoint=\"127.0.0.3:8080\"} 0\n"
      "tollgate_upstream_endpoint_up_extra{upstream=\"ibe\",endpoint=\"127.0.0.3:8080\"} 7\n"
      "tollgate_upstream_dns_failures_total{upstream=\"a \\\"quoted\\\" name\"} 2\n"
      "tollgate_plain 5\n";
  EXPECT_EQ(metric_series(text, "tollgate_upstream_endpoint_up", {{"upstream", "ibe"}, {"endpoint", "127.0.0.3:8080"}}), 0.0);
  EXPECT_EQ(metric_series(text, "tollgate_upstream_endpoint_up", {{"endpoint", "127.0.0.2:8080"}}), 1.0);
  EXPECT_EQ(metric_series(text, "tollgate_upstream_endpoint_up", {{"upstream", "ibe"}}), 1.0);  // 1 + 0
  EXPECT_EQ(metric_series(text, "tollgate_upstream_endpoint_up", {{"upstream", "other"}}), std::nullopt);
  EXPECT_EQ(metric_series(text, "tollgate_upstream_dns_failures_total", {{"upstream", "a \"quoted\" name"}}), 2.0);
  EXPECT_EQ(metric_series(text, "tollgate_plain", {}), 5.0);
  EXPECT_EQ(metric_series(text, "tollgate_missing", {}), std::nullopt);
}

}  // namespace
}  // namespace tollgate::testing

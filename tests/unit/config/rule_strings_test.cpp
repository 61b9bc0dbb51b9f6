// Rule strings reach response headers, headers to the upstream, problem bodies and log lines: a
// row whose strings could break one of them is rejected by field, in a file and from a table alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "support/fake_source.hpp"
#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/app/gateway.hpp"
#include "tollgate/config/config_manager.hpp"
#include "support/config_text.hpp"
#include "tollgate/config/config_source.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::config {
namespace {

using testing::FakeSource;

using testing::error_of;
using testing::with_rules;

bool visible_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

RawRow interface_row(std::int64_t id, std::string url, std::string channel_type = "IBE+") {
  RawRow r = FakeSource::row(id, std::move(url), 5);
  r.channel_type = std::move(channel_type);
  return r;
}

TEST(RuleStrings, InjectedChannelTypeIsRejectedInAFile) {
  // The reported row: a channel limit whose name would have put an X-Inj line into every response.
  EXPECT_EQ(error_of(with_rules(
                R"([{"configId":7,"channelType":"Z\r\nX-Inj: 1","scope":"channel","rateLimit":5,"status":1}])")),
            "limits.rules[0].channelType: must be a token of letters, digits and !#$%&'*+-.^_`|~; found control "
            "character 0x0D (character 2) (configId 7)");
  // An interface row's channelType names the channel it draws from: the same rule.
  EXPECT_EQ(error_of(with_rules(
                R"([{"configId":8,"channelType":"Z\nX-Inj: 1","interfaceUrl":"/a","rateLimit":5,"status":1}])")),
            "limits.rules[0].channelType: must be a token of letters, digits and !#$%&'*+-.^_`|~; found control "
            "character 0x0A (character 2) (configId 8)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":9,"channelType":"IBE \"x\"","scope":"channel","rateLimit":5,"status":1}])")),
            "limits.rules[0].channelType: must be a token of letters, digits and !#$%&'*+-.^_`|~; found a space "
            "(character 4) (configId 9)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":9,"channelType":"a{b}","scope":"channel","rateLimit":5,"status":1}])")),
            "limits.rules[0].channelType: must be a token of letters, digits and !#$%&'*+-.^_`|~; found '{' "
            "(character 2) (configId 9)");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":9,"channelType":"ABCDEFGHIJKLMNOPQRSTUVWXY","scope":"channel","rateLimit":5,"status":1}])")),
            "limits.rules[0].channelType: must be at most 24 characters (configId 9)");
  // The shipped spelling and an empty (no channel) value stay valid.
  EXPECT_EQ(error_of(with_rules(R"([{"configId":1,"channelType":"IBE+","scope":"channel","rateLimit":5,"status":1},
                                    {"configId":2,"channelType":"","interfaceUrl":"/a","rateLimit":5,"status":1}])")),
            "");
}

TEST(RuleStrings, InterfaceUrlIsAPathOfUrlCharacters) {
  const std::string prefix = "limits.rules[0].interfaceUrl: must be a URL path of letters, digits, '/' and "
                             "-._~!$&'()*+,=:@ or %XX; found ";
  auto url_error = [](const std::string& json_url) {
    return error_of(with_rules(R"([{"configId":3,"interfaceUrl":")" + json_url + R"(","rateLimit":5,"status":1}])"));
  };
  EXPECT_EQ(url_error(R"(/pricing\r\nX-Inj: 1)"), prefix + "control character 0x0D (character 9) (configId 3)");
  EXPECT_EQ(url_error(R"(/a\u0000b)"), prefix + "control character 0x00 (character 3) (configId 3)");
  EXPECT_EQ(url_error(R"(/a\"b)"), prefix + "'\"' (character 3) (configId 3)");
  EXPECT_EQ(url_error(R"(/a\\b)"), prefix + "'\\' (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a b"), prefix + "a space (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a?b"), prefix + "'?' (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a#b"), prefix + "'#' (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a{b}"), prefix + "'{' (character 3) (configId 3)");
  EXPECT_EQ(url_error(R"(/caf\u00e9)"), prefix + "non-ASCII byte 0xC3 (character 5) (configId 3)");
  EXPECT_EQ(url_error("/50%"), "limits.rules[0].interfaceUrl: must write '%' only as %XX with two hex digits "
                               "(character 4) (configId 3)");
  EXPECT_EQ(url_error("/a%zz"), "limits.rules[0].interfaceUrl: must write '%' only as %XX with two hex digits "
                                "(character 3) (configId 3)");
  // Request paths are matched in their normal form: a URL spelled otherwise could never match.
  EXPECT_EQ(url_error("/a;v=1"), prefix + "';' (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a%3a"), "limits.rules[0].interfaceUrl: must write an escape with upper-case hex digits, as "
                                "requests are matched (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a%41"), "limits.rules[0].interfaceUrl: must not escape a letter, digit or -._~ (requests "
                                "are matched with it decoded) (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a%2Fb"), "limits.rules[0].interfaceUrl: must not contain an encoded '/' or '\\' (such "
                                 "requests are refused) (character 3) (configId 3)");
  EXPECT_EQ(url_error("/a/../b"), "limits.rules[0].interfaceUrl: must not contain a '.' or '..' segment (requests "
                                  "are matched with them resolved) (configId 3)");
  EXPECT_EQ(url_error("/."), "limits.rules[0].interfaceUrl: must not contain a '.' or '..' segment (requests are "
                             "matched with them resolved) (configId 3)");
  // Everything else RFC 3986 allows in a path segment is accepted (a %20 and dots inside a
  // segment; at its ends they would be a spelling no request is matched with).
  EXPECT_EQ(url_error("/a-b_c.d~e/f,v=1/@x:y/!$&'()*+=/y%20z%C3%A9/...x"), "");
  EXPECT_EQ(check_interface_url("/shopping/search"), "");
}

TEST(RuleStrings, QuotaNamesAndKeyHeadersCarryNothingButVisibleAscii) {
  // A quota's name is "<bucket>#q<quotaId>": a channel whose name could break a header is refused
  // before any quota is named after it.
  EXPECT_EQ(error_of(with_rules(R"([{"configId":5,"channelType":"C\r\nX: 1","scope":"channel","status":1,
      "quotas":[{"quotaId":1,"periodSeconds":60,"limitCount":5}]}])")),
            "limits.rules[0].channelType: must be a token of letters, digits and !#$%&'*+-.^_`|~; found control "
            "character 0x0D (character 2) (configId 5)");
  // A keyBy header name is a token: a NUL byte is not one.
  EXPECT_NE(error_of(with_rules(R"([{"configId":5,"interfaceUrl":"/a","rateLimit":5,"status":1,
      "keyBy":"header:X-Key\u0000Y"}])"))
                .find("limits.rules[0].keyBy: header:<Name> needs a header name"),
            std::string::npos);
  EXPECT_NE(error_of(with_rules(R"([{"configId":5,"interfaceUrl":"/a","status":1,
      "quotas":[{"quotaId":1,"periodSeconds":60,"limitCount":5,"keyBy":"header:X\u0000"}]}])"))
                .find("limits.rules[0].quotas[0].keyBy: header:<Name> needs a header name"),
            std::string::npos);
  // What an accepted rule with quotas says in its headers.
  const GatewayConfig c = parse_gateway_config(with_rules(R"([{"configId":5,"channelType":"IBE+","scope":"channel",
      "rateLimit":4,"status":1,"quotas":[{"quotaId":1,"periodSeconds":60,"limitCount":5}]}])"));
  const LoadResult r = FileSource::from_rows(c.limits.rows, c.limits.switch_mode);
  ASSERT_EQ(r.rules.rules.size(), 1u);
  EXPECT_EQ(r.rules.rules[0].quotas.at(0).name, "channel:IBE+#q1");
  EXPECT_EQ(proxy::rule_policies(r.rules.rules[0]), "\"channel:IBE+\";q=4;w=1;burst=4, \"channel:IBE+#q1\";q=5;w=60");
}

TEST(RuleStrings, InterfaceNoHasNoControlCharacters) {
  EXPECT_EQ(error_of(with_rules(R"([{"configId":4,"interfaceNo":"S01\r\nX","interfaceUrl":"/a","rateLimit":5,"status":1}])")),
            "limits.rules[0].interfaceNo: must not contain control characters; found control character 0x0D "
            "(character 4) (configId 4)");
  // Informational text: anything printable (UTF-8 too) up to 96 bytes.
  EXPECT_EQ(error_of(with_rules(R"j([{"configId":4,"interfaceNo":"S01 (Suche \u00fcber \"alle\")","interfaceUrl":"/a","rateLimit":5,"status":1}])j")),
            "");
  EXPECT_EQ(error_of(with_rules(R"([{"configId":4,"interfaceNo":")" + std::string(97, 'x') +
                                R"(","interfaceUrl":"/a","rateLimit":5,"status":1}])")),
            "limits.rules[0].interfaceNo: must be at most 96 bytes (configId 4)");
}

TEST(RuleStrings, ARejectionIsOneLogLineWhateverTheFieldName) {
  // An unknown field's name comes from the file: it must not split the message into two log lines.
  const std::string e = error_of(with_rules(R"([{"configId":1,"interfaceUrl":"/a","rateLimit":5,"status":1,"x\r\ny":2}])"));
  EXPECT_EQ(e, "limits.rules[0].x\\x0D\\x0Ay: unknown field (configId 1)");
}

TEST(RuleStrings, CheckRefusesTheFile) {
  // What `tollgate --check` runs: read the file, then build the gateway from it (which validates
  // the rules and throws before anything is started).
  char path[] = "/tmp/tollgate-check-XXXXXX.json";
  const int fd = mkstemps(path, 5);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream out(path);
    out << with_rules(R"([{"configId":1,"channelType":"IBE+","interfaceUrl":"/shopping/search","rateLimit":5,"status":1},
                          {"configId":2,"channelType":"Z\r\nX-Inj: 1","scope":"channel","rateLimit":5,"status":1}])");
  }
  std::string error;
  try {
    app::Gateway gw(load_gateway_config(path));
  } catch (const ConfigError& e) {
    error = e.what();
  }
  std::remove(path);
  EXPECT_EQ(error,
            "limits.rules[1].channelType: must be a token of letters, digits and !#$%&'*+-.^_`|~; found control "
            "character 0x0D (character 2) (configId 2)");
}

TEST(RuleStrings, ATableRowIsHeldToTheSameRulesAndKeepsItsLastGoodVersion) {
  // The MySQL source hands its rows to the same validation; a bad edit keeps the last good version.
  auto source = std::make_shared<FakeSource>();
  SnapshotHolder snaps;
  SwitchState sw{SwitchMode::enforce, "file"};
  ConfigManager mgr{source, snaps, sw, std::chrono::milliseconds(1000)};
  RawRow channel;
  channel.config_id = 7;
  channel.channel_type = "IBE+";
  channel.scope = "channel";
  channel.rate_limit = 12;
  channel.status = 1;
  channel.origin = "t_ratelimite_conf[configId=7]";
  source->rows = {interface_row(1, "/pricing"), channel};
  ASSERT_TRUE(mgr.reload().ok);
  ASSERT_TRUE(snaps.get()->rejected.empty());

  source->rows[1].channel_type = "Z\r\nX-Inj: 1";
  source->rows[0].interface_url = "/pricing\r\nX-Inj: 1";
  ASSERT_TRUE(mgr.reload().ok);
  const auto snap = snaps.get();
  ASSERT_EQ(snap->rejected.size(), 2u);
  EXPECT_EQ(snap->rejected[0].field, "interfaceUrl");
  EXPECT_TRUE(snap->rejected[0].kept_previous);
  EXPECT_EQ(snap->rejected[1].message(),
            "t_ratelimite_conf[configId=7].channelType: must be a token of letters, digits and !#$%&'*+-.^_`|~; "
            "found control character 0x0D (character 2); its last valid version stays in force");
  // In force: the last good versions, whose header strings are clean.
  const Rule* pricing = snap->match("/x/pricing");
  ASSERT_NE(pricing, nullptr);
  EXPECT_EQ(pricing->interface_url, "/pricing");
  ASSERT_NE(snap->channel_of(*pricing), nullptr);
  EXPECT_EQ(snap->channel_of(*pricing)->channel_type, "IBE+");
  EXPECT_EQ(proxy::request_policies(*pricing, snap->channel_of(*pricing)), "\"/pricing\";q=5;w=1;burst=5, \"channel:IBE+\";q=12;w=1;burst=12");
  for (const Rule& r : snap->rules) {
    EXPECT_TRUE(visible_ascii(r.bucket)) << r.bucket;
    EXPECT_TRUE(visible_ascii(r.channel_type)) << r.channel_type;
    const std::string policies = proxy::request_policies(r, r.enabled ? snap->channel_of(r) : nullptr);
    EXPECT_TRUE(visible_ascii(policies)) << policies;
  }
  for (const RejectedRow& r : snap->rejected) EXPECT_TRUE(visible_ascii(r.message())) << r.message();
}

TEST(SfString, EscapesQuoteAndBackslashAndNeverEmitsAControlCharacter) {
  using proxy::ratelimit_policy;
  using proxy::sf_string;
  EXPECT_EQ(sf_string("/a\"b\\c"), "\"/a\\\"b\\\\c\"");
  EXPECT_EQ(sf_string(""), "\"\"");
  EXPECT_EQ(sf_string(" ~"), "\" ~\"");
  // RFC 8941 allows only 0x20-0x7E in an sf-string; CR and LF would end the header line.
  EXPECT_EQ(sf_string("a\r\nX-Inj: 1"), "\"a??X-Inj: 1\"");
  EXPECT_EQ(sf_string(std::string("a\0b\x7f\xc3\xa9", 6)), "\"a?b???\"");
  EXPECT_EQ(ratelimit_policy("/a\"b\\", 5, 5), "\"/a\\\"b\\\\\";q=5;w=1;burst=5");
  // The RateLimit field of a rule that somehow carried such a name (validation refuses it).
  Rule rule;
  rule.bucket = "/x\"y\r\n";
  limiter::Decision d;
  d.granted = false;
  d.remaining = 0;
  d.retry_after_us = 1'500'000;
  EXPECT_EQ(proxy::ratelimit_header(rule, d), "\"/x\\\"y??\";r=0;t=2");
}

// Row 2 limits /pricing at 10/s. An edit makes its rate invalid and row 14 is enabled for /pricing
// at 1000/s in the same change: row 2's kept version still holds /pricing, so row 14 is the
// duplicate, and stays the duplicate once row 2 is fixed.
TEST(KeptVersion, HoldsItsUrlAgainstALaterDuplicate) {
  auto source = std::make_shared<FakeSource>();
  SnapshotHolder snaps;
  SwitchState sw{SwitchMode::enforce, "file"};
  ConfigManager mgr{source, snaps, sw, std::chrono::milliseconds(1000)};
  source->rows = {FakeSource::row(2, "/pricing", 10), FakeSource::row(14, "/pricing", 1000, 0)};
  ASSERT_TRUE(mgr.reload().ok);
  ASSERT_EQ(snaps.get()->match("/pricing")->config_id, 2);

  source->rows = {FakeSource::row(2, "/pricing", -1), FakeSource::row(14, "/pricing", 1000)};
  ASSERT_TRUE(mgr.reload().ok);
  auto snap = snaps.get();
  const Rule* r = snap->match("/api/pricing");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->config_id, 2);
  EXPECT_DOUBLE_EQ(r->rate_limit, 10);
  ASSERT_EQ(snap->rejected.size(), 2u);
  EXPECT_EQ(snap->rejected[0].message(), "fake[2].rateLimit: must be > 0 (configId 2); its last valid version stays in force");
  EXPECT_EQ(*snap->rejected[1].config_id, 14);
  EXPECT_EQ(snap->rejected[1].field, "interfaceUrl");
  EXPECT_EQ(snap->rejected[1].reason,
            "another enabled row (configId 2) already limits /pricing (its last valid version, in force while its "
            "edit is rejected)");
  // Row 14's own last valid version (disabled) is what stays of it.
  EXPECT_TRUE(snap->rejected[1].kept_previous);
  EXPECT_EQ(std::count_if(snap->rules.begin(), snap->rules.end(), [](const Rule& x) { return x.enabled; }), 1);

  source->rows[0] = FakeSource::row(2, "/pricing", 20);
  ASSERT_TRUE(mgr.reload().ok);
  snap = snaps.get();
  r = snap->match("/pricing");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->config_id, 2);
  EXPECT_DOUBLE_EQ(r->rate_limit, 20);
  ASSERT_EQ(snap->rejected.size(), 1u);
  EXPECT_EQ(*snap->rejected[0].config_id, 14);
  EXPECT_EQ(snap->rejected[0].reason, "another enabled row (configId 2) already limits /pricing");
}

TEST(KeptVersion, ANewDuplicateOfAKeptRowIsRejectedEvenWithoutAPreviousVersion) {
  // Row 14 is new (nothing of it to keep): it limits nothing, and row 2's kept version limits /pricing.
  const auto prev = make_snapshot(validate_rows({FakeSource::row(2, "/pricing", 10)}), 1, "test");
  ValidatedRules next = validate_rows({FakeSource::row(2, "/pricing", 0), FakeSource::row(14, "/pricing", 1000)});
  keep_last_good(next, *prev);
  const auto snap = make_snapshot(std::move(next), 2, "test");
  ASSERT_NE(snap->match("/pricing"), nullptr);
  EXPECT_EQ(snap->match("/pricing")->config_id, 2);
  EXPECT_DOUBLE_EQ(snap->match("/pricing")->rate_limit, 10);
  ASSERT_EQ(snap->rules.size(), 1u);
  ASSERT_EQ(snap->rejected.size(), 2u);
  EXPECT_TRUE(snap->rejected[0].kept_previous);
  EXPECT_EQ(snap->rejected[1].field, "interfaceUrl");
  EXPECT_FALSE(snap->rejected[1].kept_previous);
  EXPECT_NE(snap->rejected[1].reason.find("configId 2"), std::string::npos);
}

TEST(KeptVersion, AppliesToChannelLimitsToo) {
  auto channel = [](std::int64_t id, double rate) {
    RawRow r;
    r.config_id = id;
    r.channel_type = "IBE+";
    r.scope = "channel";
    r.rate_limit = rate;
    r.status = 1;
    r.origin = "fake[" + std::to_string(id) + "]";
    return r;
  };
  const auto prev = make_snapshot(validate_rows({channel(3, 12)}), 1, "test");
  ValidatedRules next = validate_rows({channel(3, -1), channel(30, 500)});
  keep_last_good(next, *prev);
  const auto snap = make_snapshot(std::move(next), 2, "test");
  ASSERT_EQ(snap->channels.count("IBE+"), 1u);
  EXPECT_EQ(snap->rules[snap->channels.at("IBE+")].config_id, 3);
  ASSERT_EQ(snap->rejected.size(), 2u);
  EXPECT_EQ(snap->rejected[1].field, "channelType");
  EXPECT_NE(snap->rejected[1].reason.find("(configId 3) already limits channel IBE+"), std::string::npos);
}

TEST(KeptVersion, TheLowestRowStillWinsAsIfTheBadEditHadNotBeenMade) {
  // Row 20 held /x; it is edited badly while row 14 (earlier in the table) is enabled for /x. Had
  // row 20 not been edited, row 14 would hold /x and row 20 would be the duplicate: so it is here,
  // and row 20's old version is not kept (it would be a second limit on /x).
  const auto prev = make_snapshot(validate_rows({FakeSource::row(20, "/x", 5)}), 1, "test");
  ValidatedRules next = validate_rows({FakeSource::row(14, "/x", 7), FakeSource::row(20, "/x", 0)});
  keep_last_good(next, *prev);
  const auto snap = make_snapshot(std::move(next), 2, "test");
  ASSERT_NE(snap->match("/x"), nullptr);
  EXPECT_EQ(snap->match("/x")->config_id, 14);
  ASSERT_EQ(snap->rejected.size(), 1u);
  EXPECT_EQ(*snap->rejected[0].config_id, 20);
  EXPECT_FALSE(snap->rejected[0].kept_previous);
}

}  // namespace
}  // namespace tollgate::config

// What an upstream advertises it has left (read_advert): the IETF RateLimit and RateLimit-Policy
// fields with several policies, the older RateLimit-Limit/-Remaining/-Reset, X-RateLimit-*, custom
// names, a count in one field (Sforce-Limit-Info), every reset unit, and the IETF rules: malformed,
// contradictory and absurd fields are ignored, never a crash or a pause of a day.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <random>

#include "tollgate/proxy/upstream_signal.hpp"

namespace tollgate::proxy {
namespace {

using Style = config::RateFieldsConfig::Style;
using Unit = config::RateFieldsConfig::ResetUnit;
using Fields = std::vector<HeaderView>;

constexpr std::int64_t kJune2024 = 1'717'200'000;  // 2024-06-01 00:00:00 GMT, a Saturday
constexpr std::string_view kJune2024Date = "Sat, 01 Jun 2024 00:00:00 GMT";
constexpr std::int64_t kS = 1'000'000;

config::RateFieldsConfig style(Style s, Unit u = Unit::automatic) {
  config::RateFieldsConfig c;
  c.style = s;
  c.reset_unit = u;
  return c;
}

struct Read {
  AdvertRead got;
  Advert advert;
};

// Reads with the gateway's clock at kJune2024 and no Date unless given.
Read read(const config::RateFieldsConfig& cfg, const Fields& fields, std::optional<std::string_view> date = std::nullopt,
          std::int64_t now = kJune2024) {
  Read r;
  r.got = read_advert(cfg, fields, date, now, r.advert);
  return r;
}

TEST(RateLimitPolicyList, QuotaWindowAndUnit) {
  int skipped = 0;
  const auto p = parse_ratelimit_policy(
      "\"burst\";q=100;w=1, daily;q=1000;w=86400;qu=\"requests\";pk=:YQ==:, bad;q=-1, str;q=\"1\", u;qu=5, "
      "\"rt\";r=-1;t=x",
      &skipped);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(skipped, 3);
  EXPECT_EQ(p[0].name, "burst");
  EXPECT_EQ(p[0].q, 100.0);
  EXPECT_EQ(p[0].w, 1.0);
  EXPECT_EQ(p[0].qu, "");
  EXPECT_EQ(p[1].q, 1000.0);
  EXPECT_EQ(p[1].w, 86400.0);
  EXPECT_EQ(p[1].qu, "requests");
  EXPECT_EQ(p[2].name, "rt");  // r and t are not RateLimit-Policy's: not read, not judged
  EXPECT_FALSE(p[2].r);
  EXPECT_FALSE(p[2].q);
  // And RateLimit's list does not read (or judge) q and w.
  skipped = 0;
  const auto r = parse_ratelimit("a;r=1;q=-5;w=x", &skipped);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(skipped, 0);
  EXPECT_EQ(r[0].r, 1.0);
  EXPECT_FALSE(r[0].q);
}

TEST(Advert, IetfFieldsWithTheirPolicy) {
  const Read r = read({}, {{"RateLimit-Policy", "\"default\";q=100;w=60"}, {"RateLimit", "\"default\";r=50;t=30"}});
  ASSERT_EQ(r.got, AdvertRead::ok);
  EXPECT_EQ(r.advert.remaining, 50);
  EXPECT_EQ(r.advert.limit, 100);
  EXPECT_EQ(r.advert.reset_us, 30 * kS);
  EXPECT_EQ(r.advert.window_us, 60 * kS);
  EXPECT_EQ(r.advert.ignored, 0);

  // Without RateLimit-Policy: no limit, the configured window; decimals as RFC 8941 writes them.
  config::RateFieldsConfig cfg;
  cfg.window_s = 10;
  const Read bare = read(cfg, {{"RateLimit", "default;r=2.5;t=0.25"}});
  ASSERT_EQ(bare.got, AdvertRead::ok);
  EXPECT_EQ(bare.advert.remaining, 2.5);
  EXPECT_EQ(bare.advert.limit, 0);
  EXPECT_EQ(bare.advert.reset_us, 250'000);
  EXPECT_EQ(bare.advert.window_us, 10 * kS);

  // A policy without the quota in requests (bytes) is not ours to follow: nothing read, no fault.
  EXPECT_EQ(read({}, {{"RateLimit", "\"b\";r=1000;t=1"}, {"RateLimit-Policy", "\"b\";q=5000;qu=\"content-bytes\""}}).got,
            AdvertRead::none);
  const Read req = read({}, {{"RateLimit", "\"b\";r=10;t=1"}, {"RateLimit-Policy", "\"b\";q=50;qu=\"requests\""}});
  ASSERT_EQ(req.got, AdvertRead::ok);
  EXPECT_EQ(req.advert.limit, 50);
}

TEST(Advert, SeveralPoliciesTheMostRestrictiveOrTheNamedOne) {
  // A burst policy with 5 of 10 left for a second, an hourly one with 100 of 1000 for 30 minutes:
  // the hourly one lets 0.06 a second go, the burst 5: the hourly one is followed.
  const Fields fields = {{"RateLimit-Policy", "\"burst\";q=10;w=1, \"hourly\";q=1000;w=3600"},
                         {"RateLimit", "\"burst\";r=5;t=1, \"hourly\";r=100;t=1800"}};
  const Read r = read({}, fields);
  ASSERT_EQ(r.got, AdvertRead::ok);
  EXPECT_EQ(r.advert.remaining, 100);
  EXPECT_EQ(r.advert.limit, 1000);
  EXPECT_EQ(r.advert.reset_us, 1800 * kS);
  EXPECT_EQ(r.advert.window_us, 3600 * kS);

  config::RateFieldsConfig named;
  named.policy = "burst";
  const Read b = read(named, fields);
  ASSERT_EQ(b.got, AdvertRead::ok);
  EXPECT_EQ(b.advert.remaining, 5);
  EXPECT_EQ(b.advert.limit, 10);
  EXPECT_EQ(b.advert.reset_us, 1 * kS);
  EXPECT_EQ(b.advert.window_us, 1 * kS);

  // The named policy absent: nothing to follow, counted.
  named.policy = "daily";
  const Read d = read(named, fields);
  EXPECT_EQ(d.got, AdvertRead::malformed);

  // Equal pace (1 a second): the fewer left. Nothing left: followed whatever the other says.
  const Read tie = read({}, {{"RateLimit", "a;r=10;t=10, b;r=5;t=5"}});
  ASSERT_EQ(tie.got, AdvertRead::ok);
  EXPECT_EQ(tie.advert.remaining, 5);
  const Read empty = read({}, {{"RateLimit", "a;r=1000;t=1, b;r=0;t=2, c;r=0;t=7"}});
  ASSERT_EQ(empty.got, AdvertRead::ok);
  EXPECT_EQ(empty.advert.remaining, 0);
  EXPECT_EQ(empty.advert.reset_us, 7 * kS);  // of two empty ones, the later reset

  // Several field lines are one list; an item without t is paced over its policy's window.
  const Read lines = read({}, {{"RateLimit", "m;r=30"},
                               {"ratelimit", "s;r=5;t=1"},
                               {"RateLimit-Policy", "m;q=60;w=60"},
                               {"RateLimit-Policy", "s;q=5;w=1"}});
  ASSERT_EQ(lines.got, AdvertRead::ok);
  EXPECT_EQ(lines.advert.remaining, 30);  // 30 over 60 s is slower than 5 in 1 s
  EXPECT_EQ(lines.advert.limit, 60);
  EXPECT_EQ(lines.advert.reset_us, 0);  // not said
}

TEST(Advert, IetfMalformedAndAbsurdItemsAreIgnored) {
  // Each bad item is left out and counted; the good one is read.
  const Read r = read({}, {{"RateLimit",
                            "neg;r=-1;t=1, str;r=\"5\";t=1, nor;t=1, huge;r=2000000000000;t=1, day;r=1;t=86401, "
                            "over;r=11;t=1, ok;r=7;t=3"},
                           {"RateLimit-Policy", "over;q=10;w=1, ok;q=9;w=3"}});
  ASSERT_EQ(r.got, AdvertRead::ok);
  EXPECT_EQ(r.advert.remaining, 7);
  EXPECT_EQ(r.advert.limit, 9);
  EXPECT_EQ(r.advert.ignored, 6);

  // Nothing usable left: malformed, never a pause of a day.
  for (const char* bad : {"x;r=-1", "x;r=abc", "x;r=1;t=90000", "x;r=1e3", "x", "x;t=5", ";;;", "\"unterminated;r=1"})
    EXPECT_EQ(read({}, {{"RateLimit", bad}}).got, AdvertRead::malformed) << bad;
  // A reset of exactly a day is the longest believed.
  const Read day = read({}, {{"RateLimit", "x;r=0;t=86400"}});
  ASSERT_EQ(day.got, AdvertRead::ok);
  EXPECT_EQ(day.advert.reset_us, kMaxPauseUs);
  // A policy of an absurd quota is left out; its item is read without a limit.
  const Read q = read({}, {{"RateLimit", "x;r=3;t=1"}, {"RateLimit-Policy", "x;q=2000000000000"}});
  ASSERT_EQ(q.got, AdvertRead::ok);
  EXPECT_EQ(q.advert.limit, 0);
  EXPECT_EQ(q.advert.ignored, 1);
  // An empty field says nothing.
  EXPECT_EQ(read({}, {{"RateLimit", "  "}}).got, AdvertRead::none);
}

TEST(Advert, LegacyRateLimitFields) {
  const Read r = read({}, {{"RateLimit-Limit", "100"}, {"RateLimit-Remaining", "42"}, {"RateLimit-Reset", "17"}});
  ASSERT_EQ(r.got, AdvertRead::ok);
  EXPECT_EQ(r.advert.remaining, 42);
  EXPECT_EQ(r.advert.limit, 100);
  EXPECT_EQ(r.advert.reset_us, 17 * kS);
  EXPECT_EQ(r.advert.window_us, 0);

  // The early drafts' limit with its quota policies: the window of the limit's own policy.
  const Read p = read(style(Style::legacy),
                      {{"RateLimit-Limit", "100, 10;w=1, 100;w=60"}, {"RateLimit-Remaining", "99"}});
  ASSERT_EQ(p.got, AdvertRead::ok);
  EXPECT_EQ(p.advert.limit, 100);
  EXPECT_EQ(p.advert.window_us, 60 * kS);
  EXPECT_EQ(p.advert.reset_us, 0);

  // GitLab's RateLimit-Reset is a Unix time: "auto" tells it by its size.
  const Read unix = read({}, {{"RateLimit-Remaining", "3"}, {"RateLimit-Reset", std::to_string(kJune2024 + 45)}},
                         kJune2024Date);
  ASSERT_EQ(unix.got, AdvertRead::ok);
  EXPECT_EQ(unix.advert.reset_us, 45 * kS);
}

TEST(Advert, XRateLimitFieldsGithubStyleUnixReset) {
  const std::string reset = std::to_string(kJune2024 + 1800);  // outlives the views on it
  const Fields fields = {{"X-RateLimit-Limit", "5000"},
                         {"X-RateLimit-Remaining", "4987"},
                         {"X-RateLimit-Used", "13"},
                         {"X-RateLimit-Reset", reset}};
  const Read r = read({}, fields, kJune2024Date);
  ASSERT_EQ(r.got, AdvertRead::ok);
  EXPECT_EQ(r.advert.remaining, 4987);
  EXPECT_EQ(r.advert.limit, 5000);
  EXPECT_EQ(r.advert.reset_us, 1800 * kS);
  // Said to be Unix seconds: the same.
  EXPECT_EQ(read(style(Style::x, Unit::unix), fields, kJune2024Date).advert.reset_us, 1800 * kS);
  // Said to be seconds from now, a Unix time is an absurd delay: the reset is left out, the rest read.
  const Read delta = read(style(Style::x, Unit::seconds), fields, kJune2024Date);
  ASSERT_EQ(delta.got, AdvertRead::ok);
  EXPECT_EQ(delta.advert.reset_us, 0);
  EXPECT_EQ(delta.advert.ignored, 1);
  EXPECT_EQ(delta.advert.remaining, 4987);
}

TEST(Advert, UnixTimesAreReadAgainstTheAnswersDate) {
  const std::string reset = std::to_string(kJune2024 + 10);
  const Fields fields = {{"X-RateLimit-Remaining", "5"}, {"X-RateLimit-Reset", reset}};
  // The supplier's clock (its Date) says the reset is 10 s away, whatever the gateway's says.
  EXPECT_EQ(read({}, fields, kJune2024Date, kJune2024 + 3600).advert.reset_us, 10 * kS);
  EXPECT_EQ(read({}, fields, kJune2024Date, kJune2024 - 3600).advert.reset_us, 10 * kS);
  // Without a (usable) Date, the gateway's clock.
  EXPECT_EQ(read({}, fields, std::nullopt, kJune2024 + 4).advert.reset_us, 6 * kS);
  EXPECT_EQ(read({}, fields, "yesterday", kJune2024 + 4).advert.reset_us, 6 * kS);
  // A reset already past is 0.
  const Read past = read({}, fields, "Sat, 01 Jun 2024 00:01:00 GMT");
  ASSERT_EQ(past.got, AdvertRead::ok);
  EXPECT_EQ(past.advert.reset_us, 0);
  // More than a day ahead is absurd: left out.
  const Read far = read({}, {{"X-RateLimit-Remaining", "5"}, {"X-RateLimit-Reset", std::to_string(kJune2024 + 90'000)}},
                        kJune2024Date);
  ASSERT_EQ(far.got, AdvertRead::ok);
  EXPECT_EQ(far.advert.reset_us, 0);
  EXPECT_EQ(far.advert.ignored, 1);
}

TEST(Advert, UnixMillisecondsAndHttpDates) {
  const std::string ms_reset = std::to_string(kJune2024 * 1000 + 2500);
  const Fields ms = {{"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", ms_reset}};
  EXPECT_EQ(read({}, ms, kJune2024Date).advert.reset_us, 2'500'000);
  EXPECT_EQ(read(style(Style::x, Unit::unix_ms), ms, kJune2024Date).advert.reset_us, 2'500'000);
  // Fractional Unix seconds (some suppliers send them).
  const std::string frac_reset = std::to_string(kJune2024 + 1) + ".5";
  const Fields frac = {{"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", frac_reset}};
  EXPECT_EQ(read({}, frac, kJune2024Date).advert.reset_us, 1'500'000);

  const Fields date = {{"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", "Sat, 01 Jun 2024 00:01:00 GMT"}};
  EXPECT_EQ(read(style(Style::x, Unit::http_date), date, kJune2024Date).advert.reset_us, 60 * kS);
  EXPECT_EQ(read({}, date, kJune2024Date).advert.reset_us, 60 * kS);         // "auto" knows a date
  EXPECT_EQ(read({}, date, std::nullopt, kJune2024 + 20).advert.reset_us, 40 * kS);  // against our clock
  // A number where a date is said: left out.
  const Read wrong = read(style(Style::x, Unit::http_date), ms, kJune2024Date);
  ASSERT_EQ(wrong.got, AdvertRead::ok);
  EXPECT_EQ(wrong.advert.reset_us, 0);
  EXPECT_EQ(wrong.advert.ignored, 1);
}

TEST(Advert, DeltaSecondsUnderAutoAndExplicit) {
  const Fields f = {{"X-RateLimit-Remaining", "8"}, {"X-RateLimit-Reset", "59"}};
  EXPECT_EQ(read({}, f, kJune2024Date).advert.reset_us, 59 * kS);
  EXPECT_EQ(read(style(Style::x, Unit::seconds), f).advert.reset_us, 59 * kS);
  // Said to be a Unix time, 59 is long past: 0.
  EXPECT_EQ(read(style(Style::x, Unit::unix), f, kJune2024Date).advert.reset_us, 0);
  EXPECT_EQ(read({}, {{"X-RateLimit-Remaining", "8"}, {"X-RateLimit-Reset", "0.75"}}).advert.reset_us, 750'000);
}

TEST(Advert, MalformedContradictoryAndAbsurdNamedFields) {
  for (const char* bad : {"-1", "abc", "1e3", "", "+5", "5 5", "0x10", "2000000000000", "1.", ".5", "5, 6"}) {
    const Read r = read({}, {{"X-RateLimit-Remaining", bad}, {"X-RateLimit-Limit", "10"}});
    EXPECT_EQ(r.got, AdvertRead::malformed) << bad;
    EXPECT_EQ(r.advert.remaining, 0) << "out is written only when read";
  }
  // More left than the limit: neither is believed.
  EXPECT_EQ(read({}, {{"X-RateLimit-Remaining", "11"}, {"X-RateLimit-Limit", "10"}}).got, AdvertRead::malformed);
  // Two lines that disagree; two that agree are one.
  EXPECT_EQ(read({}, {{"X-RateLimit-Remaining", "3"}, {"X-RateLimit-Remaining", "4"}}).got, AdvertRead::malformed);
  EXPECT_EQ(read({}, {{"X-RateLimit-Remaining", "3"}, {"x-ratelimit-remaining", " 3 "}}).got, AdvertRead::ok);
  // A limit that cannot be read is left out; the remaining stands.
  const Read l = read({}, {{"X-RateLimit-Remaining", "3"}, {"X-RateLimit-Limit", "lots"}});
  ASSERT_EQ(l.got, AdvertRead::ok);
  EXPECT_EQ(l.advert.limit, 0);
  EXPECT_EQ(l.advert.ignored, 1);
  // A limit or a reset without a remaining says nothing about what is left.
  EXPECT_EQ(read({}, {{"X-RateLimit-Limit", "10"}, {"X-RateLimit-Reset", "5"}}).got, AdvertRead::none);
  EXPECT_EQ(read({}, {}).got, AdvertRead::none);
  EXPECT_EQ(read({}, {{"Content-Type", "text/plain"}}).got, AdvertRead::none);
}

TEST(Advert, FieldNamesInAnyCase) {
  const Read x = read({}, {{"x-ratelimit-remaining", "4"}, {"X-RATELIMIT-LIMIT", "9"}, {"X-RateLimit-reset", "2"}});
  ASSERT_EQ(x.got, AdvertRead::ok);
  EXPECT_EQ(x.advert.remaining, 4);
  EXPECT_EQ(x.advert.limit, 9);
  EXPECT_EQ(x.advert.reset_us, 2 * kS);
  const Read ietf = read({}, {{"ratelimit", "p;r=1;t=1"}, {"RATELIMIT-POLICY", "p;q=2"}});
  ASSERT_EQ(ietf.got, AdvertRead::ok);
  EXPECT_EQ(ietf.advert.limit, 2);
  config::RateFieldsConfig custom = style(Style::custom);
  custom.remaining_field = "X-Quota-Left";
  EXPECT_EQ(read(custom, {{"x-quota-left", "6"}}).advert.remaining, 6);
}

TEST(Advert, AutoPrefersIetfThenLegacyThenX) {
  const Fields all = {{"X-RateLimit-Remaining", "30"}, {"RateLimit-Remaining", "20"}, {"RateLimit", "p;r=10;t=1"}};
  EXPECT_EQ(read({}, all).advert.remaining, 10);
  EXPECT_EQ(read({}, {all[0], all[1]}).advert.remaining, 20);
  EXPECT_EQ(read({}, {all[0]}).advert.remaining, 30);
  // A malformed preferred form gives way to a usable one, counted.
  const Read fallback = read({}, {{"RateLimit", "p;r=-3"}, {"X-RateLimit-Remaining", "30"}});
  ASSERT_EQ(fallback.got, AdvertRead::ok);
  EXPECT_EQ(fallback.advert.remaining, 30);
  EXPECT_EQ(fallback.advert.ignored, 1);
  // Each style reads its own fields only.
  EXPECT_EQ(read(style(Style::x), all).advert.remaining, 30);
  EXPECT_EQ(read(style(Style::legacy), all).advert.remaining, 20);
  EXPECT_EQ(read(style(Style::ietf), all).advert.remaining, 10);
  EXPECT_EQ(read(style(Style::ietf), {all[0], all[1]}).got, AdvertRead::none);
  EXPECT_EQ(read(style(Style::none), all).got, AdvertRead::none);
}

TEST(Advert, CustomNames) {
  config::RateFieldsConfig c = style(Style::custom, Unit::unix);
  c.limit_field = "X-Quota-Limit";
  c.remaining_field = "X-Quota-Left";
  c.reset_field = "X-Quota-Reset";
  c.window_s = 3600;
  const Read r = read(c, {{"X-Quota-Limit", "5000"},
                          {"X-Quota-Left", "100"},
                          {"X-Quota-Reset", std::to_string(kJune2024 + 600)},
                          {"X-RateLimit-Remaining", "1"}},
                      kJune2024Date);
  ASSERT_EQ(r.got, AdvertRead::ok);
  EXPECT_EQ(r.advert.remaining, 100);
  EXPECT_EQ(r.advert.limit, 5000);
  EXPECT_EQ(r.advert.reset_us, 600 * kS);
  EXPECT_EQ(r.advert.window_us, 3600 * kS);
  EXPECT_EQ(read(c, {{"X-RateLimit-Remaining", "1"}}).got, AdvertRead::none);
}

TEST(Advert, UsageInOneFieldSalesforceStyle) {
  config::RateFieldsConfig c = style(Style::custom);
  c.usage_field = "Sforce-Limit-Info";
  c.usage_key = "api-usage";
  c.window_s = 86'400;
  const Read r = read(c, {{"Sforce-Limit-Info", "api-usage=10018/100000"}});
  ASSERT_EQ(r.got, AdvertRead::ok);
  EXPECT_EQ(r.advert.remaining, 89'982);
  EXPECT_EQ(r.advert.limit, 100'000);
  EXPECT_EQ(r.advert.reset_us, 0);  // not said
  EXPECT_EQ(r.advert.window_us, 86'400 * kS);
  // Used beyond the limit: nothing left, not a negative count.
  EXPECT_EQ(read(c, {{"sforce-limit-info", "api-usage=100010/100000"}}).advert.remaining, 0);
  // The member by its key among others; a note after the limit.
  const Fields two = {{"Sforce-Limit-Info", "per-app-api-usage=17/250(appName=sample); api-usage=18/5000"}};
  EXPECT_EQ(read(c, two).advert.remaining, 4982);
  c.usage_key = "per-app-api-usage";
  EXPECT_EQ(read(c, two).advert.remaining, 233);
  EXPECT_EQ(read(c, two).advert.limit, 250);
  // No key: the whole value; a reset field, when named.
  c.usage_key = "";
  c.reset_field = "X-Usage-Reset";
  const Read whole = read(c, {{"Sforce-Limit-Info", "25/50"}, {"X-Usage-Reset", "30"}});
  ASSERT_EQ(whole.got, AdvertRead::ok);
  EXPECT_EQ(whole.advert.remaining, 25);
  EXPECT_EQ(whole.advert.reset_us, 30 * kS);
  // Malformed: the key absent, no slash, not numbers, absurd.
  c.usage_key = "api-usage";
  for (const char* bad : {"other=1/2", "api-usage=12", "api-usage=a/b", "api-usage=-1/5", "api-usage=1/2000000000000",
                          "api-usage", ""})
    EXPECT_EQ(read(c, {{"Sforce-Limit-Info", bad}}).got, AdvertRead::malformed) << bad;
  EXPECT_EQ(read(c, {}).got, AdvertRead::none);
}

// Never a crash, an out-of-range reset or a count that is not a number, whatever the supplier sends
// (a small fuzz in the unit suite: no fuzz target reads upstream signals).
TEST(Advert, AnyBytesGiveASaneAnswer) {
  std::mt19937 rng(48);
  // Values made of pieces of real ones, so that many are read, and of junk, so that many are not.
  const char* pieces[] = {"p", "\"p\"", "q", ";r=", ";t=", ";q=", ";w=", ";qu=", "0", "1", "17", "0.5", "86400",
                          "1717200000", "1717200002500", "999999999999999", "-", ".", ",", ";", "=", "/", " ", "\t",
                          "api-usage=", "(", ")", "\"", "?1", ":YQ==:", "Sat, 01 Jun 2024 00:01:00 GMT", "\x01",
                          "\xff"};
  const char* names[] = {"RateLimit", "RateLimit-Policy", "RateLimit-Remaining", "RateLimit-Limit", "RateLimit-Reset",
                         "X-RateLimit-Remaining", "X-RateLimit-Limit", "X-RateLimit-Reset", "U"};
  config::RateFieldsConfig usage = style(Style::custom);
  usage.usage_field = "U";
  usage.reset_field = "X-RateLimit-Reset";
  const config::RateFieldsConfig cfgs[] = {{}, style(Style::x, Unit::http_date), style(Style::legacy, Unit::unix_ms),
                                           usage};
  int read_ok = 0;
  for (int i = 0; i < 50'000; ++i) {
    std::vector<std::string> values;
    Fields fields;
    const int n = static_cast<int>(rng() % 5);
    for (int k = 0; k < n; ++k) {
      std::string v;
      for (std::size_t len = rng() % 6; len > 0; --len) v += pieces[rng() % std::size(pieces)];
      values.push_back(v);
    }
    for (int k = 0; k < n; ++k) fields.push_back({names[rng() % std::size(names)], values[static_cast<std::size_t>(k)]});
    for (const auto& cfg : cfgs) {
      Advert a;
      if (read_advert(cfg, fields, kJune2024Date, kJune2024, a) != AdvertRead::ok) continue;
      ++read_ok;
      ASSERT_TRUE(std::isfinite(a.remaining) && a.remaining >= 0 && a.remaining <= 1e12);
      ASSERT_TRUE(std::isfinite(a.limit) && a.limit >= 0 && a.limit <= 1e12);
      ASSERT_TRUE(a.reset_us >= 0 && a.reset_us <= kMaxPauseUs);
      ASSERT_TRUE(a.window_us >= 0 && a.window_us <= kMaxPauseUs);
    }
  }
  EXPECT_GT(read_ok, 1000);  // the readers were reached, not only refused
}

}  // namespace
}  // namespace tollgate::proxy

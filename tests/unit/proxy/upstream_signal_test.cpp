// An upstream's throttle signals: HTTP-dates, Retry-After, RateLimit lists, the classification of
// a response, and the RateLimit value a client is given when both sides sent one.
#include <gtest/gtest.h>

#include "tollgate/proxy/upstream_signal.hpp"

namespace tollgate::proxy {
namespace {

constexpr std::int64_t kJune2024 = 1'717'200'000;  // 2024-06-01 00:00:00 GMT
constexpr std::int64_t kS = 1'000'000;

TEST(HttpDate, TheThreeForms) {
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), 784'111'777);
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), 784'111'777);
  EXPECT_EQ(parse_http_date("Sun Nov  6 08:49:37 1994"), 784'111'777);
  EXPECT_EQ(parse_http_date("Sun Nov 06 08:49:37 1994"), 784'111'777);
  EXPECT_EQ(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
  EXPECT_EQ(parse_http_date("Wed, 31 Dec 1969 23:59:59 GMT"), -1);
  EXPECT_EQ(parse_http_date("Tue, 19 Jan 2038 03:14:08 GMT"), 2'147'483'648);  // past 32 bits
  EXPECT_EQ(parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT"), 253'402'300'799);
  EXPECT_EQ(parse_http_date("Fri Dec 31 23:59:59 1999"), 946'684'799);
  // A leap second reads as the next minute's first.
  EXPECT_EQ(parse_http_date("Fri, 31 Dec 1999 23:59:60 GMT"), 946'684'800);
}

TEST(HttpDate, LeapYears) {
  EXPECT_EQ(parse_http_date("Thu, 29 Feb 1996 00:00:00 GMT"), 825'552'000);
  EXPECT_EQ(parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT"), 951'782'400);  // divisible by 400
  EXPECT_EQ(parse_http_date("Tue Feb 29 00:00:00 2000"), 951'782'400);
  EXPECT_FALSE(parse_http_date("Thu, 29 Feb 1900 00:00:00 GMT"));  // divisible by 100: not leap
  EXPECT_FALSE(parse_http_date("Mon, 29 Feb 2100 00:00:00 GMT"));
  EXPECT_FALSE(parse_http_date("Sat, 29 Feb 2003 00:00:00 GMT"));
  EXPECT_FALSE(parse_http_date("Mon, 30 Feb 2004 00:00:00 GMT"));
  EXPECT_FALSE(parse_http_date("Thu, 31 Apr 2024 00:00:00 GMT"));
}

TEST(HttpDate, WrongFormsAreRefused) {
  for (const char* bad : {
           "",
           "Sun, 06 Nov 1994 08:49:37 UTC",      // GMT only
           "sun, 06 Nov 1994 08:49:37 GMT",      // case-sensitive
           "Sun, 06 nov 1994 08:49:37 GMT",
           "Sux, 06 Nov 1994 08:49:37 GMT",      // no such day
           "Mon, 06 Nov 1994 08:49:37 GMT",      // 1994-11-06 was a Sunday
           "Sun, 06 Nov 1994 08:49:37 GMT ",     // trailing junk
           " Sun, 06 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nov 1994 08:49:37 GMTx",
           "Sun, 6 Nov 1994 08:49:37 GMT",       // two-digit day
           "Sun,  6 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nov 94 08:49:37 GMT",        // four-digit year
           "Sun, 06 Nov 1994 24:00:00 GMT",      // out of range
           "Sun, 06 Nov 1994 08:60:00 GMT",
           "Sun, 06 Nov 1994 08:49:61 GMT",
           "Sun, 00 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nov 1994 8:49:37  GMT",
           "Sun, 06 Nov 1994 08-49-37 GMT",
           "Sun, +6 Nov 1994 08:49:37 GMT",      // digits only, no sign
           "Sun, 06 Nov -994 08:49:37 GMT",
           "Sun, 06 Nov 1994 08:49:37 +0000",
           "Sun 06 Nov 1994 08:49:37 GMT",
           "Sun, 06-Nov-94 08:49:37 GMT",        // RFC 850 wants the long day name
           "Sunday, 06-Nov-1994 08:49:37 GMT",
           "Sunday, 06 Nov 94 08:49:37 GMT",
           "Sunday, 06-Nov-94 08:49:37 GMT junk",
           "Sonntag, 06-Nov-94 08:49:37 GMT",
           "Sun Nov  6 08:49:37 1994 GMT",       // asctime has no zone
           "Sun Nov 6 08:49:37 1994",
           "Sun Nov  6 08:49:37 94",
           "Sun Nov _6 08:49:37 1994",
           "1994-11-06T08:49:37Z",
           "784111777",
       })
    EXPECT_FALSE(parse_http_date(bad, kJune2024)) << bad;
}

TEST(HttpDate, TwoDigitYearsMoreThanFiftyYearsAheadAreInThePastCentury) {
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", kJune2024), 784'111'777);
  EXPECT_EQ(parse_http_date("Saturday, 01-Jan-00 00:00:00 GMT", kJune2024), 946'684'800);
  EXPECT_EQ(parse_http_date("Friday, 31-May-24 00:00:00 GMT", kJune2024), 1'717'113'600);
  // 2074-06-01 00:00:00 is exactly 50 years ahead: still this century. A second later is more than
  // 50 years ahead: 1974 (a Saturday).
  EXPECT_EQ(parse_http_date("Friday, 01-Jun-74 00:00:00 GMT", kJune2024), 3'295'036'800);
  EXPECT_EQ(parse_http_date("Saturday, 01-Jun-74 00:00:01 GMT", kJune2024), 139'276'801);
  EXPECT_FALSE(parse_http_date("Friday, 01-Jun-74 00:00:01 GMT", kJune2024));  // 1974-06-01: a Saturday
  EXPECT_EQ(parse_http_date("Sunday, 01-Jun-75 00:00:00 GMT", kJune2024), 170'812'800);
  // Near the end of a century, small years are in the next one.
  const std::int64_t june2090 = *parse_http_date("Thu, 01 Jun 2090 00:00:00 GMT");
  EXPECT_EQ(parse_http_date("Saturday, 01-Jan-01 00:00:00 GMT", june2090),
            parse_http_date("Sat, 01 Jan 2101 00:00:00 GMT"));
  // 29 February picks its century first, then is checked against it.
  EXPECT_EQ(parse_http_date("Tuesday, 29-Feb-00 00:00:00 GMT", kJune2024), 951'782'400);
}

TEST(UpstreamSignal, RetryAfterSeconds) {
  EXPECT_EQ(retry_after_us("120", std::nullopt), 120 * kS);
  EXPECT_EQ(retry_after_us("0", std::nullopt), 0);
  EXPECT_EQ(retry_after_us("007", std::nullopt), 7 * kS);  // 1*DIGIT: leading zeros are fine
  EXPECT_EQ(retry_after_us("86400", std::nullopt), kMaxPauseUs);
  EXPECT_EQ(retry_after_us("86401", std::nullopt), kMaxPauseUs);  // capped at a day
  EXPECT_EQ(retry_after_us("99999999999999999999999999999999", std::nullopt), kMaxPauseUs);  // no overflow
  EXPECT_EQ(retry_after_us(" 5\t", std::nullopt), 5 * kS);  // OWS around a field value is not part of it
  for (const char* bad : {"", "   ", "-1", "+1", "1.5", "1e3", "1 0", "0x10", "5s", "soon"})
    EXPECT_FALSE(retry_after_us(bad, std::nullopt)) << bad;
}

TEST(UpstreamSignal, RetryAfterDateIsReadAgainstTheResponsesDate) {
  const std::string_view date = "Sun, 06 Nov 1994 08:49:37 GMT";
  EXPECT_EQ(retry_after_us("Sun, 06 Nov 1994 08:50:07 GMT", date), 30 * kS);
  EXPECT_EQ(retry_after_us("Sunday, 06-Nov-94 08:50:07 GMT", date), 30 * kS);
  EXPECT_EQ(retry_after_us("Sun Nov  6 08:50:07 1994", date), 30 * kS);
  EXPECT_EQ(retry_after_us("Sun, 06 Nov 1994 08:49:37 GMT", date), 0);
  EXPECT_EQ(retry_after_us("Sun, 06 Nov 1994 08:00:00 GMT", date), 0);        // already past
  EXPECT_EQ(retry_after_us("Mon, 06 Nov 1995 08:49:37 GMT", date), kMaxPauseUs);  // a year: capped
  EXPECT_EQ(retry_after_us("Sun, 06 Nov 1994 08:50:07 GMT", std::string_view(" Sun, 06 Nov 1994 08:49:37 GMT ")),
            30 * kS);
  // Without a usable Date there is nothing to compare with (our own clock is not the upstream's).
  EXPECT_FALSE(retry_after_us("Sun, 06 Nov 1994 08:50:07 GMT", std::nullopt));
  EXPECT_FALSE(retry_after_us("Sun, 06 Nov 1994 08:50:07 GMT", std::string_view("")));
  EXPECT_FALSE(retry_after_us("Sun, 06 Nov 1994 08:50:07 GMT", std::string_view("yesterday")));
  EXPECT_FALSE(retry_after_us("Sun, 06 Nov 1994 08:50:07 GMX", date));
}

TEST(RateLimitList, ItemsNamesAndParameters) {
  const auto items = parse_ratelimit(R"("supplier";r=0;t=5, "other";r=3;t=1)");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].name, "supplier");
  EXPECT_EQ(items[0].r, 0.0);
  EXPECT_EQ(items[0].t, 5.0);
  EXPECT_EQ(items[1].name, "other");
  EXPECT_EQ(items[1].r, 3.0);
  EXPECT_EQ(items[1].t, 1.0);

  // Tokens, escapes, no parameters, unknown parameters of every kind, spaces after ';', decimals,
  // a repeated key (the last counts), field lines joined with ", ".
  const auto more = parse_ratelimit(
      "day;r=10;t=3600;pk=:cHJpdmF0ZQ==:, \"a\\\"b\\\\c\";r=1.5;t=0.25,\"x,y\";q=\"s;t=9\";flag;w=?1;t=2"
      ", bare ,*tok/en:1;r=1;r=2; t=4;z=-3.5;n=tok");
  ASSERT_EQ(more.size(), 5u);
  EXPECT_EQ(more[0].name, "day");
  EXPECT_EQ(more[0].r, 10.0);
  EXPECT_EQ(more[0].t, 3600.0);
  EXPECT_EQ(more[1].name, "a\"b\\c");
  EXPECT_EQ(more[1].r, 1.5);
  EXPECT_EQ(more[1].t, 0.25);
  EXPECT_EQ(more[2].name, "x,y");
  EXPECT_FALSE(more[2].r);
  EXPECT_EQ(more[2].t, 2.0);
  EXPECT_EQ(more[3].name, "bare");
  EXPECT_FALSE(more[3].r);
  EXPECT_FALSE(more[3].t);
  EXPECT_EQ(more[4].name, "*tok/en:1");
  EXPECT_EQ(more[4].r, 2.0);
  EXPECT_EQ(more[4].t, 4.0);

  EXPECT_TRUE(parse_ratelimit("").empty());
  EXPECT_TRUE(parse_ratelimit("  ,  , ").empty());
}

TEST(RateLimitList, MalformedItemsAreSkippedTheOthersKept) {
  const auto items = parse_ratelimit(
      "\"ok1\";r=1"
      ", \"neg\";r=-1"               // negative
      ", \"str\";r=\"0\""            // r not a number
      ", \"bool\";r"                 // r without a value (boolean true)
      ", \"huge\";t=1234567890123456"  // 16 digits
      ", \"frac\";t=1.1234567890"    // 10 fraction digits
      ", \"dot\";t=1."
      ", 1abc;r=0"                   // a token starts with a letter or '*'
      ", \"bad\\n\";r=0"             // only \" and \\ are escapes
      ", \"junk\";r=0 trailing"
      ", \"space\" ;r=0"             // no space before ';'
      ", (\"inner\" \"list\");r=0"
      ", \"Key\";R=0"                // keys are lower case: malformed
      ", \"a,b\";r=oops"             // a comma inside the junk item's string does not split it
      ", ;r=0"
      ", stray\"quote;r=0"          // a quote where no string may start does not swallow what follows
      ", \"ok2\";r=2;t=3"
      ", \"unterminated;r=0, \"lost\";r=0");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].name, "ok1");
  EXPECT_EQ(items[1].name, "ok2");
  EXPECT_EQ(items[1].t, 3.0);
  // Bytes outside 0x20-0x7E are never part of a name.
  EXPECT_TRUE(parse_ratelimit("\"caf\xc3\xa9\";r=0").empty());
  // The bounds themselves are fine.
  const auto edge = parse_ratelimit("e;r=999999999999999;t=0.123456789");
  ASSERT_EQ(edge.size(), 1u);
  EXPECT_EQ(edge[0].r, 999'999'999'999'999.0);
}

TEST(UpstreamSignal, ClassifyThrottles) {
  // A 429: with a Retry-After, the delay.
  auto s = classify_response(429, std::string_view("7"), std::nullopt, "");
  EXPECT_TRUE(s.throttled);
  EXPECT_EQ(s.cause, "429");
  EXPECT_EQ(s.pause_us, 7 * kS);
  // A bare 429: a throttle without a pause.
  s = classify_response(429, std::nullopt, std::nullopt, "");
  EXPECT_TRUE(s.throttled);
  EXPECT_EQ(s.pause_us, 0);
  // The longer of Retry-After and the t of the exhausted items; items with units left do not count.
  s = classify_response(429, std::string_view("2"), std::nullopt, R"("a";r=0;t=5, "b";r=0;t=3, "c";r=4;t=60)");
  EXPECT_EQ(s.pause_us, 5 * kS);
  s = classify_response(429, std::string_view("9"), std::nullopt, R"("a";r=0;t=5)");
  EXPECT_EQ(s.pause_us, 9 * kS);
  // A 503 with Retry-After (an HTTP-date against Date) or with a RateLimit field.
  s = classify_response(503, std::string_view("Sun, 06 Nov 1994 08:50:37 GMT"),
                        std::string_view("Sun, 06 Nov 1994 08:49:37 GMT"), "");
  EXPECT_TRUE(s.throttled);
  EXPECT_EQ(s.cause, "503");
  EXPECT_EQ(s.pause_us, 60 * kS);
  s = classify_response(503, std::nullopt, std::nullopt, R"("pool";r=5;t=1)");
  EXPECT_TRUE(s.throttled);
  EXPECT_EQ(s.cause, "503");
  EXPECT_EQ(s.pause_us, 0);
  s = classify_response(503, std::nullopt, std::nullopt, R"("pool";r=0;t=4)");
  EXPECT_EQ(s.cause, "503");
  EXPECT_EQ(s.pause_us, 4 * kS);
  // A Retry-After date without Date: still a throttle, its pause unknown.
  s = classify_response(503, std::string_view("Sun, 06 Nov 1994 08:50:37 GMT"), std::nullopt, "");
  EXPECT_TRUE(s.throttled);
  EXPECT_EQ(s.pause_us, 0);
  // A 2xx whose RateLimit says nothing is left: a throttle that lasts its t (rounded up to a µs).
  s = classify_response(200, std::nullopt, std::nullopt, R"("supplier";r=0;t=5, "other";r=3;t=1)");
  EXPECT_TRUE(s.throttled);
  EXPECT_EQ(s.cause, "ratelimit_r0");
  EXPECT_EQ(s.pause_us, 5 * kS);
  s = classify_response(200, std::nullopt, std::nullopt, R"("s";r=0.5;t=0.0000015)");
  EXPECT_EQ(s.cause, "ratelimit_r0");
  EXPECT_EQ(s.pause_us, 2);
  s = classify_response(204, std::nullopt, std::nullopt, R"("s";r=0;t=999999999)");
  EXPECT_EQ(s.pause_us, kMaxPauseUs);
}

TEST(UpstreamSignal, ClassifyNonThrottles) {
  // A plain 503 is an outage, a 500 an error, a 200 with units left just information.
  for (int status : {503, 500, 502, 200, 404}) {
    const auto s = classify_response(status, std::nullopt, std::nullopt, "");
    EXPECT_FALSE(s.throttled) << status;
    EXPECT_EQ(s.pause_us, 0);
    EXPECT_TRUE(s.cause.empty());
  }
  EXPECT_FALSE(classify_response(503, std::string_view("  "), std::nullopt, " ").throttled);
  EXPECT_FALSE(classify_response(500, std::string_view("30"), std::nullopt, R"("a";r=2)").throttled);
  EXPECT_FALSE(classify_response(200, std::nullopt, std::nullopt, R"("a";r=1;t=5, "b";t=9)").throttled);
  EXPECT_FALSE(classify_response(200, std::nullopt, std::nullopt, R"("a";r=0;t=5 junk)").throttled);
}

TEST(RestrictRateLimit, UpstreamItemsAreMadeAtLeastAsRestrictiveAsOurs) {
  const std::string ours = R"("/ibe/login";r=3;t=0)";
  // More permissive upstream: clamped to our r.
  EXPECT_EQ(restrict_ratelimit(ours, R"("supplier";r=50;t=0)"), R"("/ibe/login";r=3;t=0, "supplier";r=3;t=0)");
  // More restrictive: passed on as is.
  EXPECT_EQ(restrict_ratelimit(ours, R"("supplier";r=0;t=5)"), R"("/ibe/login";r=3;t=0, "supplier";r=0;t=5)");
  // Several of ours: the smallest r and the largest t count; tokens are written as sf-strings,
  // escapes kept, unknown parameters dropped, r rounded down and t up.
  EXPECT_EQ(restrict_ratelimit(R"("a";r=3;t=0, "b";r=7;t=2)", R"(up;r=5.9;t=1.2;pk=:eA==:, "q\"x";r=1.5;t=0.1)"),
            R"("a";r=3;t=0, "b";r=7;t=2, "up";r=3;t=2, "q\"x";r=1;t=2)");
  // Upstream items without r or t get ours.
  EXPECT_EQ(restrict_ratelimit(ours, R"("s")"), R"("/ibe/login";r=3;t=0, "s";r=3;t=0)");
  // Junk is dropped, never passed on unclamped.
  EXPECT_EQ(restrict_ratelimit(ours, R"("s";r=-5, bad"item;r=0, "t";r=9;t=1)"),
            R"("/ibe/login";r=3;t=0, "t";r=3;t=1)");
  EXPECT_EQ(restrict_ratelimit(ours, "garbage(("), ours);
  // Nothing from upstream: ours unchanged.
  EXPECT_EQ(restrict_ratelimit(ours, ""), ours);
  EXPECT_EQ(restrict_ratelimit(ours, "  "), ours);
  // Huge numbers stay within an sf-integer's 15 digits.
  EXPECT_EQ(restrict_ratelimit("", R"("s";r=999999999999999;t=999999999999999.5)"),
            R"("s";r=999999999999999;t=999999999999999)");
}

}  // namespace
}  // namespace tollgate::proxy

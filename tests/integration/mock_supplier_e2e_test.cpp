// The mock supplier itself (tools/mock_upstream.cpp), no gateway in front: its windows start where
// it is told and last as long as it is told, its clock is off by what it is told, and the
// rate-limit fields it advertises say what it does. The gateway's tests against it (and the bench)
// are only as good as that.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "support/stack.hpp"

using nlohmann::json;
using namespace std::chrono_literals;

namespace tollgate::testing {
namespace {

std::int64_t wall_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

// One request, with the wall-clock times it was sent and answered: the mock decided it in between.
struct Timed {
  HttpResponse r;
  std::int64_t sent_us = 0, got_us = 0;
};
Timed timed_get(int port, const std::string& target) {
  Timed t;
  t.sent_us = wall_us();
  t.r = http_get(port, target);
  t.got_us = wall_us();
  return t;
}

// Sleeps until the wall clock is `at_ms` into a period of `period_ms` (the next time it is).
void sleep_to_phase(std::int64_t period_ms, std::int64_t at_ms) {
  const std::int64_t now_ms = wall_us() / 1000;
  std::this_thread::sleep_for(std::chrono::milliseconds(((at_ms - now_ms % period_ms) + 2 * period_ms) % period_ms));
}

// A window of `w_ms` starting `offset_ms` past its multiples: its index at wall time `us`.
std::int64_t window_at(std::int64_t us, std::int64_t w_ms, std::int64_t offset_ms) {
  return (us - offset_ms * 1000) / (w_ms * 1000);
}

// An HTTP-date (IMF-fixdate) as Unix seconds, or -1.
std::int64_t unix_of_date(const std::string& date) {
  std::tm tm{};
  const char* end = strptime(date.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return end && *end == '\0' ? static_cast<std::int64_t>(timegm(&tm)) : -1;
}

// A member of an IETF structured-field item ("default";r=3;t=1.250): the text after "<key>=".
std::string member(const std::string& field, const std::string& key) {
  const auto at = field.find(";" + key + "=");
  if (at == std::string::npos) return "";
  const auto from = at + key.size() + 2;
  return field.substr(from, field.find(';', from) - from);
}

// Seconds rounded up, as the mock (and the draft) round a reset.
std::int64_t ceil_s(std::int64_t us) { return (us + 999'999) / 1'000'000; }

int put_limits(const MockUpstream& m, const json& limits) {
  return http_request(m.port, {"PUT", "/__limits", {}, limits.dump()}).status;
}

// Three limits whose one-second windows all start at 600 ms past the wall clock's second, each
// said another way: an offset, a supplier clock 400 ms ahead, an offset of 100 ms on a clock
// 500 ms behind. Three requests fill a window just after 600 ms; a fourth just after the whole
// second is still in it (refused: a window on the calendar second would have let it through),
// and a fifth after 600 ms again starts the next. A run whose timing a loaded machine spoiled
// (a request straddling a boundary it should not) is tried again, at most three times.
TEST(MockSupplier, WindowsStartAtTheirOffsetOnTheSuppliersClock) {
  MockUpstream m;
  ASSERT_GT(m.port, 0) << m.proc->output();
  const json limits = {
      {"/a", {{"rate", 3}, {"kind", "fixed_window"}, {"offset_ms", 600}, {"advertise", "ietf_ms"}}},
      {"/b", {{"rate", 3}, {"kind", "fixed_window"}, {"clock_offset_ms", 400}}},
      {"/c", {{"rate", 3}, {"kind", "fixed_window"}, {"offset_ms", 100}, {"clock_offset_ms", -500}}}};
  const char* paths[] = {"/p/a", "/p/b", "/p/c"};
  bool timed_well = false;
  for (int attempt = 0; attempt < 3 && !timed_well; ++attempt) {
    ASSERT_EQ(put_limits(m, json::object()), 200);  // new limits start full
    ASSERT_EQ(put_limits(m, limits), 200);
    std::vector<Timed> fill, early, next;
    sleep_to_phase(1000, 650);
    for (const char* p : paths)
      for (int i = 0; i < 3; ++i) fill.push_back(timed_get(m.port, p));
    sleep_to_phase(1000, 100);
    for (const char* p : paths) early.push_back(timed_get(m.port, p));
    sleep_to_phase(1000, 650);
    for (const char* p : paths) next.push_back(timed_get(m.port, p));
    // The timing held: the fill and the early ones in one window (the early ones in the next
    // calendar second), the next ones in the window after.
    const std::int64_t w = window_at(fill.front().sent_us, 1000, 600);
    timed_well = true;
    for (const auto& t : fill) timed_well &= window_at(t.got_us, 1000, 600) == w;
    for (const auto& t : early)
      timed_well &= window_at(t.got_us, 1000, 600) == w && t.sent_us / 1'000'000 > fill.back().got_us / 1'000'000;
    for (const auto& t : next) timed_well &= window_at(t.sent_us, 1000, 600) == w + 1 && window_at(t.got_us, 1000, 600) == w + 1;
    if (!timed_well) continue;
    for (const auto& t : fill) EXPECT_EQ(t.r.status, 200) << t.r.body;
    for (const auto& t : early) EXPECT_EQ(t.r.status, 429) << t.r.body;
    for (const auto& t : next) EXPECT_EQ(t.r.status, 200) << t.r.body;
    // The refusal's t points at 600 ms: what was left of the window as it was refused.
    const double t = std::stod(member(early[0].r.header("ratelimit"), "t"));
    const std::int64_t end_us = (w + 1) * 1'000'000 + 600'000;
    EXPECT_GE(t, static_cast<double>(end_us - early[0].got_us) / 1e6 - 0.0005) << early[0].r.header("ratelimit");
    EXPECT_LE(t, static_cast<double>(end_us - early[0].sent_us) / 1e6 + 0.0005) << early[0].r.header("ratelimit");
    EXPECT_EQ(early[0].r.header("retry-after"), "1");
    EXPECT_EQ(early[0].r.header("ratelimit-policy"), "\"default\";q=3;w=1");
    const json got = json::parse(http_get(m.port, "/__limits").body);
    for (const char* s : {"/a", "/b", "/c"}) {
      EXPECT_EQ(got[s]["accepted"], 4) << s;
      EXPECT_EQ(got[s]["refused"], 1) << s;
      EXPECT_EQ(got[s]["max_in_window"], 3) << s;
    }
  }
  ASSERT_TRUE(timed_well) << "three runs in a row missed their window boundaries (a machine far too loaded)";
}

// A ten-second window allows its rate times ten, refuses the rest until the window's end (said
// with the window's length), "per_window" sets an allowance outright, and a minute's window
// advertises its own q and w. The windows start a second before the test, so nine are left.
TEST(MockSupplier, LongWindowsAllowTheirWholeAllowanceAndSaySo) {
  MockUpstream m;
  ASSERT_GT(m.port, 0) << m.proc->output();
  const std::int64_t start_us = wall_us();
  const std::int64_t offset_ms = (start_us / 1000 - 1000) % 10000;
  const std::int64_t end_us = (start_us / 1000 + 9000) * 1000;
  ASSERT_EQ(put_limits(m, {{"/ten", {{"rate", 5}, {"kind", "fixed_window"}, {"window_ms", 10000}, {"offset_ms", offset_ms}}},
                           {"/seven", {{"rate", 1}, {"kind", "fixed_window"}, {"window_ms", 10000}, {"offset_ms", offset_ms},
                                       {"per_window", 7}}},
                           {"/minute", {{"rate", 2}, {"kind", "fixed_window"}, {"window_ms", 60000}, {"advertise", "ietf"}}}}),
            200);
  int ok = 0, refused = 0;
  Timed last;
  for (int i = 0; i < 55; ++i) {
    last = timed_get(m.port, "/p/ten");
    ok += last.r.status == 200;
    refused += last.r.status == 429;
  }
  int seven = 0;
  for (int i = 0; i < 9; ++i) seven += http_get(m.port, "/p/seven").status == 200;
  ASSERT_LT(last.got_us, end_us) << "the requests took more than eight seconds";
  EXPECT_EQ(ok, 50);
  EXPECT_EQ(refused, 5);
  EXPECT_EQ(seven, 7);
  EXPECT_GE(std::stoll(last.r.header("retry-after")), ceil_s(end_us - last.got_us));
  EXPECT_LE(std::stoll(last.r.header("retry-after")), ceil_s(end_us - last.sent_us));
  EXPECT_EQ(last.r.header("ratelimit-policy"), "\"supplier\";q=50;w=10");
  const json got = json::parse(http_get(m.port, "/__limits").body);
  EXPECT_EQ(got["/ten"]["per_window"], 50);
  EXPECT_EQ(got["/ten"]["window_ms"], 10000);
  EXPECT_EQ(got["/ten"]["offset_ms"], offset_ms);
  EXPECT_EQ(got["/ten"]["tokens"], 0);
  EXPECT_EQ(got["/ten"]["accepted"], 50);
  EXPECT_EQ(got["/ten"]["refused"], 5);
  EXPECT_EQ(got["/ten"]["max_in_window"], 50);
  EXPECT_EQ(got["/seven"]["per_window"], 7);
  EXPECT_EQ(got["/seven"]["max_in_window"], 7);
  const HttpResponse minute = http_get(m.port, "/p/minute");
  EXPECT_EQ(minute.header("ratelimit-policy"), "\"default\";q=120;w=60");
  EXPECT_EQ(member(minute.header("ratelimit"), "r"), "119") << minute.header("ratelimit");
  // A window needs a length, and an offset inside it.
  EXPECT_EQ(put_limits(m, {{"/x", {{"rate", 1}, {"kind", "fixed_window"}, {"window_ms", 10000}, {"offset_ms", 10000}}}}), 400);
}

// The reset a style sends, checked against the window's end as the mock saw it (between the
// request's sending and its answer).
void expect_reset(const std::string& style, const Timed& t, std::int64_t end_us) {
  const HttpResponse& r = t.r;
  const std::int64_t date = unix_of_date(r.header("date"));
  if (style == "ietf" || style == "legacy" || style == "x_delta") {
    const std::string v = style == "ietf" ? member(r.header("ratelimit"), "t")
                          : style == "legacy" ? r.header("ratelimit-reset") : r.header("x-ratelimit-reset");
    ASSERT_FALSE(v.empty()) << style;
    EXPECT_EQ(v.find('.'), std::string::npos) << style << ": " << v;  // whole seconds
    EXPECT_GE(std::stoll(v), ceil_s(end_us - t.got_us)) << style;
    EXPECT_LE(std::stoll(v), ceil_s(end_us - t.sent_us)) << style;
  } else if (style == "ietf_ms") {
    const std::string v = member(r.header("ratelimit"), "t");
    ASSERT_EQ(v.size() - v.find('.'), 4u) << v;  // three decimals
    EXPECT_GE(std::stod(v), static_cast<double>(end_us - t.got_us) / 1e6 - 0.0005) << v;
    EXPECT_LE(std::stod(v), static_cast<double>(end_us - t.sent_us) / 1e6 + 0.0005) << v;
  } else {
    // A Unix time: the window's end itself, rounded up, and as far past the Date as the end is
    // from now (Date is in whole seconds, rounded down).
    const std::int64_t reset = std::stoll(r.header("x-ratelimit-reset"));
    const std::int64_t reset_us = style == "x" ? reset * 1'000'000 : reset * 1000;
    EXPECT_EQ(reset, style == "x" ? ceil_s(end_us) : (end_us + 999) / 1000) << style;
    ASSERT_GT(date, 0) << style << ": " << r.header("date");
    EXPECT_GE(date, t.sent_us / 1'000'000) << style;
    EXPECT_LE(date, t.got_us / 1'000'000) << style;
    EXPECT_GE(reset_us - date * 1'000'000, end_us - t.got_us) << style;
    EXPECT_LT(reset_us - date * 1'000'000, end_us - t.sent_us + 2'000'000) << style;
  }
}

// Every style's fields on every answer: four allowed per ten-second window, the window ending
// about six seconds after the test starts; what is left goes 3, 2, 1, 0 and stays 0 on the
// refusal, and every reset points at the window's end. A token bucket says its whole tokens and
// when it is full again; a lying supplier claims what it is told and still refuses.
TEST(MockSupplier, EachAdvertiseStyleSaysWhatIsLeftAndWhenTheWindowEnds) {
  MockUpstream m;
  ASSERT_GT(m.port, 0) << m.proc->output();
  const std::int64_t start_us = wall_us();
  const std::int64_t offset_ms = (start_us / 1000 + 6000) % 10000;
  const std::int64_t end_us = (start_us / 1000 + 6000) * 1000;
  const char* styles[] = {"ietf", "ietf_ms", "legacy", "x", "x_delta", "x_ms"};
  json limits = {{"/bucket", {{"rate", 4}, {"advertise", "ietf_ms"}}},
                 {"/lie", {{"rate", 1}, {"kind", "fixed_window"}, {"window_ms", 10000}, {"offset_ms", offset_ms},
                           {"per_window", 2}, {"advertise", "x"}, {"advertise_lie", {{"remaining", 7}}}}}};
  for (const char* s : styles)
    limits[std::string("/") + s] = {{"rate", 1}, {"kind", "fixed_window"}, {"window_ms", 10000},
                                    {"offset_ms", offset_ms}, {"per_window", 4}, {"advertise", s}};
  ASSERT_EQ(put_limits(m, limits), 200);
  for (const std::string style : styles) {
    for (int i = 0; i < 5; ++i) {
      const Timed t = timed_get(m.port, "/p/" + style);
      ASSERT_LT(t.got_us, end_us) << "the requests took more than five seconds";
      EXPECT_EQ(t.r.status, i < 4 ? 200 : 429) << style << " " << i;
      const std::string left = std::to_string(i < 4 ? 3 - i : 0);
      if (style.starts_with("ietf")) {
        EXPECT_EQ(t.r.header("ratelimit-policy"), "\"default\";q=4;w=10") << style;
        EXPECT_EQ(member(t.r.header("ratelimit"), "r"), left) << style << ": " << t.r.header("ratelimit");
      } else {
        const std::string prefix = style == "legacy" ? "ratelimit-" : "x-ratelimit-";
        EXPECT_EQ(t.r.header(prefix + "limit"), "4") << style;
        EXPECT_EQ(t.r.header(prefix + "remaining"), left) << style;
      }
      expect_reset(style, t, end_us);
    }
  }
  // A token bucket of 4 a second: r whole tokens, t until it holds 4 again.
  for (int i = 0; i < 4; ++i) {
    const HttpResponse r = http_get(m.port, "/p/bucket");
    EXPECT_EQ(r.header("ratelimit-policy"), "\"default\";q=4;w=1");
    const int left = std::stoi(member(r.header("ratelimit"), "r"));
    const double t = std::stod(member(r.header("ratelimit"), "t"));
    EXPECT_LE(left, 3) << r.header("ratelimit");  // one just taken (it refills as it goes)
    EXPECT_GT(t, (3.0 - left) / 4 - 0.0005) << r.header("ratelimit");
    EXPECT_LE(t, (4.0 - left) / 4 + 0.0005) << r.header("ratelimit");
  }
  // The liar: 7 left on every answer, refused after its real 2.
  for (int i = 0; i < 3; ++i) {
    const HttpResponse r = http_get(m.port, "/p/lie");
    EXPECT_EQ(r.status, i < 2 ? 200 : 429) << i;
    EXPECT_EQ(r.header("x-ratelimit-remaining"), "7") << i;
  }
  const json got = json::parse(http_get(m.port, "/__limits").body);
  EXPECT_EQ(got["/lie"]["advertise_lie"], json({{"remaining", 7}}));
  EXPECT_EQ(got["/lie"]["accepted"], 2);
  EXPECT_EQ(got["/lie"]["refused"], 1);
  EXPECT_EQ(got["/x_ms"]["advertise"], "x_ms");
  EXPECT_EQ(put_limits(m, {{"/y", {{"rate", 1}, {"advertise_lie", 7}}}}), 400);
  EXPECT_EQ(put_limits(m, {{"/y", {{"rate", 1}, {"advertise", "x_us"}}}}), 400);
}

// A supplier clock three seconds ahead or behind sends a Date that far off (its windows move with
// it: WindowsStartAtTheirOffsetOnTheSuppliersClock), and so does its Unix reset: X-RateLimit-Reset
// is the end of its ten-second window by its clock. A path under no limit sends no Date.
TEST(MockSupplier, AClockOffsetShiftsItsDateAndItsUnixReset) {
  MockUpstream m;
  ASSERT_GT(m.port, 0) << m.proc->output();
  ASSERT_EQ(put_limits(m, {{"/ahead", {{"rate", 100}, {"clock_offset_ms", 3000}}},
                           {"/behind", {{"rate", 100}, {"clock_offset_ms", -3000}}},
                           {"/true", {{"rate", 100}, {"advertise", "legacy"}}},
                           {"/x", {{"rate", 1}, {"kind", "fixed_window"}, {"window_ms", 10000}, {"per_window", 5},
                                   {"clock_offset_ms", 2500}, {"advertise", "x"}}}}),
            200);
  for (const auto& [path, off_us] : {std::pair<const char*, std::int64_t>{"/p/ahead", 3'000'000},
                                     {"/p/behind", -3'000'000}, {"/p/true", 0}, {"/p/x", 2'500'000}}) {
    const Timed t = timed_get(m.port, path);
    EXPECT_EQ(t.r.status, 200) << path;
    const std::int64_t date = unix_of_date(t.r.header("date"));
    ASSERT_GT(date, 0) << path << ": " << t.r.header("date");
    EXPECT_GE(date, (t.sent_us + off_us) / 1'000'000) << path;
    EXPECT_LE(date, (t.got_us + off_us) / 1'000'000) << path;
    if (off_us != 2'500'000) continue;
    // By its clock, its window ends at the next multiple of ten seconds.
    const std::int64_t reset = std::stoll(t.r.header("x-ratelimit-reset"));
    const std::int64_t lo = ((t.sent_us + off_us) / 10'000'000 + 1) * 10, hi = ((t.got_us + off_us) / 10'000'000 + 1) * 10;
    EXPECT_GE(reset, lo);
    EXPECT_LE(reset, hi);
    EXPECT_EQ(t.r.header("x-ratelimit-remaining"), "4");
  }
  EXPECT_EQ(http_get(m.port, "/p/unlimited").header("date"), "");
}

}  // namespace
}  // namespace tollgate::testing

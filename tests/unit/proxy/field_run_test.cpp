// FieldRun copies adjacent, already canonical field lines of a parsed head as one block: its output
// must be byte for byte what append_field per field writes, whatever spacing the sender used and
// whichever fields the caller skips.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proxy/http_io.hpp"

namespace tollgate::proxy {
namespace {

// Both ways over the fields of `head`, keeping those `keep` says yes to (by index).
void expect_same(const std::string& head, const std::vector<bool>& keep) {
  http1::RequestHead h;
  ASSERT_EQ(http1::parse_request_head(head, 8192, h), http1::Error::none) << head;
  std::string by_field, by_run;
  FieldRun run;
  std::size_t i = 0;
  for (const http1::Field& f : h.all()) {
    const bool kept = i < keep.size() ? keep[i] : true;
    ++i;
    if (!kept) continue;
    append_field(by_field, f.name, f.value);
    run.add(by_run, f);
  }
  run.flush(by_run);
  EXPECT_EQ(by_run, by_field) << head;
}

TEST(FieldRun, CanonicalLinesGoAsTheyCame) {
  expect_same("GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: x/1\r\nAccept: */*\r\n\r\n", {});
}

TEST(FieldRun, SkippedFieldsSplitTheRun) {
  const std::string head = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n";
  expect_same(head, {true, false, true, true, false});
  expect_same(head, {false, true, false, true, true});
  expect_same(head, {false, false, false, false, false});
}

TEST(FieldRun, OtherSpellingsAreWrittenCanonically) {
  // No space after the colon, two, a tab, trailing spaces, an empty value with and without one.
  expect_same("GET / HTTP/1.1\r\nA:1\r\nB:  2\r\nC:\t3\r\nD: 4  \r\nE: 5\r\nF:\r\nG: \r\nH: 8\r\n\r\n", {});
  expect_same("GET / HTTP/1.1\r\nA: 1\r\nB:2\r\nC: 3\r\n\r\n", {true, false, true});
}

TEST(FieldRun, WritesWhatAppendFieldWrites) {
  http1::RequestHead h;
  ASSERT_EQ(http1::parse_request_head("GET / HTTP/1.1\r\nX-A: b\r\nX-C:d\r\n\r\n", 8192, h), http1::Error::none);
  std::string out = "start\r\n";
  FieldRun run;
  for (const http1::Field& f : h.all()) run.add(out, f);
  run.flush(out);
  EXPECT_EQ(out, "start\r\nX-A: b\r\nX-C: d\r\n");
}

}  // namespace
}  // namespace tollgate::proxy

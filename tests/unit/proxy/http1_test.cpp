#include <utility>

#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tollgate/proxy/http1.hpp"

namespace tollgate::proxy::http1 {
namespace {

namespace bhttp = boost::beast::http;

// Heads are ~4 KiB each (the field array): on the heap, one per test.
template <class H>
std::unique_ptr<H> make() {
  return std::make_unique<H>();
}

// Parse a copy kept until the next call: the views into it stay valid for the checks after it,
// whatever temporary the test built the input in.
Error req(std::string_view s, RequestHead& h, std::size_t max = 8192) {
  static std::string keep;
  keep.assign(s);
  return parse_request_head(keep, max, h);
}
Error res(std::string_view s, ResponseHead& h, std::size_t max = 8192) {
  static std::string keep;
  keep.assign(s);
  return parse_response_head(keep, max, h);
}

// Everything a parse produced, as text, to compare two parses.
std::string dump(const Head& h) {
  std::string s = "v1." + std::to_string(h.version_minor) + " bytes=" + std::to_string(h.head_bytes) +
                  " chunked=" + std::to_string(h.chunked) + " otherte=" + std::to_string(h.other_transfer_encoding) +
                  " cl=" + (h.content_length ? std::to_string(*h.content_length) : "-") +
                  " clign=" + std::to_string(h.content_length_ignored) + " ka=" + std::to_string(h.keep_alive) +
                  " close=" + std::to_string(h.connection_close) + " upg=" + std::to_string(h.connection_upgrade) +
                  " named=" + std::to_string(h.connection_names_other) + " 100c=" + std::to_string(h.expect_continue) +
                  " expo=" + std::to_string(h.expect_other) + " hosts=" + std::to_string(h.host_count) +
                  " present=" + std::to_string(h.present) + "\n";
  for (const Field& f : h)
    s += std::string(f.name) + "=[" + std::string(f.value) + "] " + std::to_string(static_cast<int>(f.id)) + "\n";
  return s;
}
std::string dump(const RequestHead& h) {
  return std::string(h.method_text) + " " + std::to_string(static_cast<int>(h.method)) + " " + std::string(h.target) +
         " " + dump(static_cast<const Head&>(h));
}
std::string dump(const ResponseHead& h) {
  return std::to_string(h.status) + " [" + std::string(h.reason) + "] " + dump(static_cast<const Head&>(h));
}

const std::string kGet = "GET /search?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/1.0\r\nAccept: */*\r\n\r\n";

// ---------------------------------------------------------------- request line

TEST(Http1Request, ParsesARequest) {
  auto h = make<RequestHead>();
  const std::string buf = kGet + "next bytes";
  ASSERT_EQ(parse_request_head(buf, 8192, *h), Error::none);
  EXPECT_EQ(h->method, Method::get);
  EXPECT_EQ(h->method_text, "GET");
  EXPECT_EQ(h->target, "/search?q=1");
  EXPECT_EQ(h->version_minor, 1);
  EXPECT_EQ(h->head_bytes, kGet.size());
  ASSERT_EQ(h->count, 3u);
  EXPECT_EQ(h->fields[0].name, "Host");
  EXPECT_EQ(h->fields[0].value, "example.com");
  EXPECT_EQ(h->fields[0].id, Name::host);
  EXPECT_EQ(h->fields[1].name, "User-Agent");
  EXPECT_EQ(h->fields[1].value, "t/1.0");
  EXPECT_EQ(h->fields[1].id, Name::other);
  EXPECT_EQ(h->fields[2].value, "*/*");
  EXPECT_EQ(h->host_count, 1u);
  EXPECT_TRUE(h->keep_alive);
  EXPECT_FALSE(h->chunked);
  EXPECT_FALSE(h->content_length.has_value());
  EXPECT_EQ(request_body(*h).kind, BodyKind::none);
  // Views point into the buffer.
  EXPECT_EQ(h->target.data(), buf.data() + 4);
}

// RequestHead::underscore_names (proxy.underscores_in_headers): names of every length up to and
// past a word, '_' at each place, the last field just before the head's end (where a word read
// would pass it), a '_' only in a value or past the name.
TEST(Http1Request, UnderscoreNamesAreFoundWhereverTheyAre) {
  auto h = make<RequestHead>();
  const auto marked = [&](const std::string& fields) {
    EXPECT_EQ(req("GET / HTTP/1.1\r\nHost: a\r\n" + fields + "\r\n", *h), Error::none) << fields;
    return h->underscore_names;
  };
  for (std::size_t len = 1; len <= 19; ++len) {
    for (std::size_t at = 0; at < len; ++at) {
      std::string name(len, 'x');
      name[at] = '_';
      EXPECT_TRUE(marked(name + ": v\r\n")) << name;                    // the last field
      EXPECT_TRUE(marked(name + ":\r\n")) << name;                      // an empty value: the end is nearest
      EXPECT_TRUE(marked(name + ": v\r\nAccept: */*\r\n")) << name;  // not the last
    }
    EXPECT_FALSE(marked(std::string(len, 'x') + ":\r\n")) << len;
    EXPECT_FALSE(marked(std::string(len, 'x') + ": a_b\r\nX-Y: _\r\n")) << len;  // in values only
  }
  EXPECT_FALSE(marked("X-Api-Key: k\r\nUser-Agent: t\r\n"));
  EXPECT_TRUE(marked("X-Api-Key: k\r\nX_Api_Key: k\r\nUser-Agent: t\r\n"));
  EXPECT_FALSE(marked("Accept: */*\r\n"));  // a parse after one that had it starts afresh
}

// The name scan stops at a '_' and goes on from there (http1.cpp, name_after_stop): the name is
// kept whole, and what follows the '_' is checked as any name's bytes are.
TEST(Http1Request, ANameWithUnderscoreIsKeptWholeAndChecked) {
  auto h = make<RequestHead>();
  for (const char* name : {"_", "X_", "_X", "X_A_b", "__x-Y__", "a_b.c~d"}) {
    ASSERT_EQ(req("GET / HTTP/1.1\r\nHost: a\r\n" + std::string(name) + ": v\r\n\r\n", *h), Error::none) << name;
    ASSERT_EQ(h->count, 2u);
    EXPECT_EQ((h->begin() + 1)->name, name);
    EXPECT_EQ((h->begin() + 1)->value, "v");
    EXPECT_EQ((h->begin() + 1)->id, Name::other);
    EXPECT_TRUE(h->underscore_names);
  }
  for (const char* line : {"X_A : b", "X_A\t: b", "X_(a): b", "X_A", "X_\xc3\xa9: b", "_\x01: b", "X_\x7f: b"})
    EXPECT_EQ(req("GET / HTTP/1.1\r\n" + std::string(line) + "\r\nHost: x\r\n\r\n", *h), Error::bad_field) << line;
  auto r = make<ResponseHead>();
  EXPECT_EQ(res("HTTP/1.1 200 OK\r\nX_A : b\r\n\r\n", *r), Error::bad_field);
  ASSERT_EQ(res("HTTP/1.1 200 OK\r\nX_A: b\r\nContent-Length: 0\r\n\r\n", *r), Error::none);
  EXPECT_EQ(r->begin()->name, "X_A");
  EXPECT_EQ(r->content_length.value_or(99), 0u);
}

TEST(Http1Request, MethodsAreRecognisedCaseSensitively) {
  const std::pair<const char*, Method> cases[] = {
      {"GET", Method::get},         {"HEAD", Method::head},       {"POST", Method::post},
      {"PUT", Method::put},         {"DELETE", Method::delete_},  {"OPTIONS", Method::options},
      {"PATCH", Method::patch},     {"TRACE", Method::trace},     {"CONNECT", Method::connect},
      {"get", Method::other},       {"PROPFIND", Method::other},  {"M-SEARCH", Method::other},
      {"GETS", Method::other},      {"DELETED", Method::other},   {"!#$%&'*+-.^_`|~", Method::other},
  };
  auto h = make<RequestHead>();
  for (auto [m, want] : cases) {
    const std::string buf = std::string(m) + " / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(req(buf, *h), Error::none) << m;
    EXPECT_EQ(h->method, want) << m;
    EXPECT_EQ(h->method_text, m);
  }
}

TEST(Http1Request, BadMethod) {
  auto h = make<RequestHead>();
  for (const char* line : {" / HTTP/1.1", "GE(T / HTTP/1.1", "GET\t/ HTTP/1.1", "\x01GET / HTTP/1.1", "G\xc3\x89T / HTTP/1.1",
                           "GET", "GET:/ HTTP/1.1"}) {
    EXPECT_EQ(req(std::string(line) + "\r\nHost: x\r\n\r\n", *h), Error::bad_method) << line;
  }
}

TEST(Http1Request, BadTarget) {
  auto h = make<RequestHead>();
  for (const char* line : {"GET  / HTTP/1.1", "GET /a\x7f HTTP/1.1", "GET /\xc3\xa9 HTTP/1.1", "GET /a\tb HTTP/1.1",
                           "GET /a\x01 HTTP/1.1", "GET /"}) {
    EXPECT_EQ(req(std::string(line) + "\r\nHost: x\r\n\r\n", *h), Error::bad_target) << line;
  }
  // A byte outside visible ASCII at every position of a long target (the word-at-a-time scan).
  const std::string good(40, 'a');
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (char bad : {'\0', '\x1f', '\x7f', '\x80', '\xff', '\t'}) {
      std::string t = "/" + good;
      t[i + 1] = bad;
      EXPECT_EQ(req("GET " + t + " HTTP/1.1\r\nHost: x\r\n\r\n", *h), Error::bad_target) << i << " " << int(bad);
    }
    std::string t = "/" + good;
    t[i + 1] = '~';
    EXPECT_EQ(req("GET " + t + " HTTP/1.1\r\nHost: x\r\n\r\n", *h), Error::none) << i;
    EXPECT_EQ(h->target, t);
  }
  // The parser does not validate targets further: the proxy does.
  ASSERT_EQ(req("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", *h), Error::none);
  EXPECT_EQ(h->target, "*");
  ASSERT_EQ(req("CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", *h), Error::none);
  EXPECT_EQ(h->target, "example.com:443");
}

TEST(Http1Request, BadVersion) {
  auto h = make<RequestHead>();
  for (const char* v : {"HTTP/1.2", "HTTP/2.0", "HTTP/0.9", "http/1.1", "HTTP/1.1 ", "HTTP/1.10", "HTTP/1", "HTTP/1.",
                        "HTTPS/1.1", "HTTP/11", "XTTP/1.1"}) {
    EXPECT_EQ(req("GET / " + std::string(v) + "\r\nHost: x\r\n\r\n", *h), Error::bad_version) << v;
  }
  ASSERT_EQ(req("GET / HTTP/1.0\r\n\r\n", *h), Error::none);
  EXPECT_EQ(h->version_minor, 0);
  EXPECT_EQ(h->count, 0u);
}

// ---------------------------------------------------------------- line endings

TEST(Http1Request, LinesMustEndInCrLf) {
  auto h = make<RequestHead>();
  const char* cases[] = {
      "GET / HTTP/1.1\nHost: x\r\n\r\n",         // bare LF after the request line
      "GET / HTTP/1.1\r\nHost: x\n\r\n",         // bare LF after a field
      "GET / HTTP/1.1\r\nHost: x\r\n\n",         // bare LF as the empty line
      "GET / HTTP/1.1\n\n",                      // bare LFs only
      "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",       // CR inside a value
      "GET / HTTP/1.1\r\nX: a\r\r\n\r\n",        // CR CR LF
      "GET / HTTP/1.1\r\n\rX: y\r\n\r\n",        // CR at a line start
      "GET / HTTP/1.1\rX: y\r\n\r\n",            // CR without LF after the version
      "\nGET / HTTP/1.1\r\n\r\n",                // LF before the request line
  };
  for (const char* c : cases) EXPECT_EQ(req(c, *h), Error::bad_line_ending) << c;
  // A bare LF is refused at once, not after waiting for the end of the head.
  EXPECT_EQ(req("GET / HTTP/1.1\nHost", *h), Error::bad_line_ending);
  // A CR at the end of what arrived is not an error yet.
  EXPECT_EQ(req("GET / HTTP/1.1\r", *h), Error::need_more);
  EXPECT_EQ(req("GET / HTTP/1.1\r\nHost: x\r\n\r", *h), Error::need_more);
}

TEST(Http1Request, LeadingEmptyLinesAreSkipped) {
  auto h = make<RequestHead>();
  // RFC 9112 2.2: an empty line before a request line (a client's extra CRLF after a body).
  const std::string one = "\r\n" + kGet;
  ASSERT_EQ(req(one, *h), Error::none);
  EXPECT_EQ(h->head_bytes, one.size());
  EXPECT_EQ(h->target, "/search?q=1");
  std::string eight;
  for (int i = 0; i < 8; ++i) eight += "\r\n";
  ASSERT_EQ(req(eight + kGet, *h), Error::none);
  EXPECT_EQ(h->head_bytes, eight.size() + kGet.size());
  // More is not a client being robust.
  EXPECT_EQ(req(eight + "\r\n" + kGet, *h), Error::bad_method);
  EXPECT_EQ(req("\r\n", *h), Error::need_more);
  EXPECT_EQ(req("\r\n\r\n", *h), Error::need_more);
  // A response gets no such leniency.
  auto r = make<ResponseHead>();
  EXPECT_EQ(res("\r\nHTTP/1.1 200 OK\r\n\r\n", *r), Error::bad_version);
}

// ---------------------------------------------------------------- fields

TEST(Http1Fields, BadFieldLines) {
  auto h = make<RequestHead>();
  const char* cases[] = {
      "X-A : b",      // whitespace before the colon
      "X-A\t: b",     // a tab too
      ": b",          // empty name
      " X-A: b",      // obs-fold at the first field line
      "X(a): b",      // not a token
      "X-A",          // no colon
      "X\xc3\xa9: b", // non-ASCII name
      "X-A: a\x01",   // control character
      "X-A: a\x7f",   // DEL
  };
  for (const char* c : cases) EXPECT_EQ(req("GET / HTTP/1.1\r\n" + std::string(c) + "\r\nHost: x\r\n\r\n", *h), Error::bad_field) << c;
  // Obsolete line folding after a field.
  EXPECT_EQ(req("GET / HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n", *h), Error::bad_field);
  EXPECT_EQ(req("GET / HTTP/1.1\r\nX-A: b\r\n\tc\r\n\r\n", *h), Error::bad_field);
  // NUL, by length.
  const std::string nul("GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n", 28);
  EXPECT_EQ(req(nul, *h), Error::bad_field);
}

TEST(Http1Fields, ValueBytesAtEveryPosition) {
  auto h = make<RequestHead>();
  const std::string good = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH";
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (char bad : {'\0', '\x01', '\x08', '\x0b', '\x1f', '\x7f'}) {
      std::string v = good;
      v[i] = bad;
      EXPECT_EQ(req("GET / HTTP/1.1\r\nX: " + v + "\r\n\r\n", *h), Error::bad_field) << i << " " << int(bad);
    }
    for (char ok : {'\t', ' ', '~', '!', '\x80', '\xff', '"'}) {
      std::string v = good;
      v[i] = ok;
      ASSERT_EQ(req("GET / HTTP/1.1\r\nX: " + v + "\r\n\r\n", *h), Error::none) << i << " " << int(ok);
      // SP and HTAB at either end are OWS, trimmed.
      const bool edge = (ok == ' ' || ok == '\t') && (i == 0 || i + 1 == good.size());
      EXPECT_EQ(h->fields[0].value, edge ? (i == 0 ? v.substr(1) : v.substr(0, v.size() - 1)) : v) << i;
    }
  }
}

TEST(Http1Fields, ValuesAreTrimmed) {
  auto h = make<RequestHead>();
  ASSERT_EQ(req("GET / HTTP/1.1\r\nA:   a b \t \r\nB:\r\nC: \t \r\nD:x\r\nE:\t\"q\"\t\r\n\r\n", *h), Error::none);
  ASSERT_EQ(h->count, 5u);
  EXPECT_EQ(h->fields[0].value, "a b");
  EXPECT_EQ(h->fields[1].value, "");
  EXPECT_EQ(h->fields[2].value, "");
  EXPECT_EQ(h->fields[3].value, "x");
  EXPECT_EQ(h->fields[4].value, "\"q\"");
  EXPECT_EQ(h->fields[0].name, "A");
}

TEST(Http1Fields, NamesAreRecognisedCaseInsensitively) {
  auto h = make<RequestHead>();
  for (std::size_t i = 1; i < kNameCount; ++i) {
    const Name n = static_cast<Name>(i);
    const std::string canon(canonical(n));
    ASSERT_FALSE(canon.empty()) << i;
    std::string lowered = canon, upper = canon, mixed = canon;
    for (std::size_t k = 0; k < canon.size(); ++k) {
      lowered[k] = static_cast<char>(std::tolower(static_cast<unsigned char>(canon[k])));
      upper[k] = static_cast<char>(std::toupper(static_cast<unsigned char>(canon[k])));
      mixed[k] = k % 2 ? upper[k] : lowered[k];
    }
    for (const std::string& spelled : {canon, lowered, upper, mixed}) {
      EXPECT_EQ(name_of(spelled), n) << spelled;
      // Through the parser too (a value that is valid for every one of them).
      const std::string v = n == Name::content_length ? "0" : n == Name::transfer_encoding ? "chunked" : "1";
      ASSERT_EQ(req("POST / HTTP/1.1\r\n" + spelled + ": " + v + "\r\n\r\n", *h), Error::none) << spelled;
      EXPECT_EQ(h->fields[0].id, n) << spelled;
      EXPECT_EQ(h->fields[0].name, spelled);
      EXPECT_TRUE(h->has(n));
    }
    // Near misses.
    EXPECT_EQ(name_of(canon + "x"), Name::other) << canon;
    EXPECT_EQ(name_of(canon.substr(0, canon.size() - 1)), Name::other) << canon;
    std::string changed = canon;
    changed.back() = changed.back() == 'z' ? 'y' : 'z';
    EXPECT_EQ(name_of(changed), Name::other) << changed;
  }
  EXPECT_EQ(name_of("content-LENGTH"), Name::content_length);
  EXPECT_EQ(name_of("content_length"), Name::other);
  EXPECT_EQ(name_of("content\rlength"), Name::other);  // OR-ing 0x20 would make '\r' a '-'
  EXPECT_EQ(name_of("x-forwarded-fo^"), Name::other);  // and '^' a '~'
  EXPECT_EQ(name_of(""), Name::other);
  EXPECT_EQ(canonical(Name::other), "");
}

TEST(Http1Fields, MaxFields) {
  auto h = make<RequestHead>();
  std::string buf = "GET / HTTP/1.1\r\n";
  for (std::size_t i = 0; i < kMaxFields; ++i) buf += "X-" + std::to_string(i) + ": v" + std::to_string(i) + "\r\n";
  ASSERT_EQ(req(buf + "\r\n", *h, 1 << 20), Error::none);
  EXPECT_EQ(h->count, kMaxFields);
  EXPECT_EQ(h->fields[kMaxFields - 1].value, "v99");
  EXPECT_EQ(req(buf + "X-Last: 1\r\n\r\n", *h, 1 << 20), Error::too_many_fields);
}

// A response is bounded by its bytes only: an upstream's answer with many fields is relayed,
// not turned into a 502 after the upstream did the work (the proxy's limit is 64 KiB of head).
TEST(Http1Fields, AResponseHasNoFieldCountOnlyItsBytes) {
  auto r = make<ResponseHead>();
  std::string buf = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; i < 3000; ++i) buf += "X-" + std::to_string(i) + ": v\r\n";
  ASSERT_EQ(res(buf + "Content-Length: 0\r\n\r\n", *r, 64 * 1024), Error::none);
  EXPECT_EQ(r->count, 3001u);
  EXPECT_EQ(r->fields[2999].name, "X-2999");
  EXPECT_EQ(r->content_length.value_or(99), 0u);
  EXPECT_EQ(res(buf + "\r\n", *r, 16 * 1024), Error::header_too_large);
  // The next, small head on the same object: its own fields only, and the big slots let go.
  ASSERT_EQ(res("HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", *r), Error::none);
  EXPECT_EQ(r->count, 1u);
  EXPECT_EQ(r->fields[0].value, "1");
}

// Past FieldList::kInline fields the list moves to the heap; the next, smaller head on the same
// object is back in the inline slots, and each head sees only its own fields.
TEST(Http1Fields, ManyFieldsThenFewOnTheSameHead) {
  auto h = make<RequestHead>();
  std::string many = "GET / HTTP/1.1\r\n";
  for (std::size_t i = 0; i < FieldList::kInline + 6; ++i) many += "X-" + std::to_string(i) + ": v" + std::to_string(i) + "\r\n";
  ASSERT_EQ(req(many + "Host: big\r\n\r\n", *h), Error::none);
  ASSERT_EQ(h->count, FieldList::kInline + 7);
  EXPECT_EQ(h->fields[0].value, "v0");
  EXPECT_EQ(h->fields[FieldList::kInline].value, "v" + std::to_string(FieldList::kInline));
  EXPECT_EQ(h->value(Name::host), "big");
  ASSERT_EQ(req("GET / HTTP/1.1\r\nHost: small\r\nA: 1\r\n\r\n", *h), Error::none);
  ASSERT_EQ(h->count, 2u);
  EXPECT_EQ(h->value(Name::host), "small");
  EXPECT_EQ(h->all().back().value, "1");
  ASSERT_EQ(req(many + "\r\n", *h), Error::none);  // and to the heap again
  EXPECT_EQ(h->all().back().value, "v" + std::to_string(FieldList::kInline + 5));
  EXPECT_EQ(h->find(Name::host), nullptr);
}

TEST(Http1Fields, Helpers) {
  auto h = make<RequestHead>();
  ASSERT_EQ(req("GET / HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nhost: a\r\nx-forwarded-for: 2.2.2.2\r\nX-Api-Key: k\r\n\r\n", *h),
            Error::none);
  ASSERT_NE(h->find(Name::x_forwarded_for), nullptr);
  EXPECT_EQ(h->find(Name::x_forwarded_for)->value, "1.1.1.1");
  EXPECT_EQ(h->value(Name::host), "a");
  EXPECT_EQ(h->find(Name::date), nullptr);
  EXPECT_EQ(h->value(Name::date), "");
  EXPECT_FALSE(h->has(Name::date));
  EXPECT_TRUE(h->has(Name::other));
  ASSERT_NE(h->find("x-api-KEY"), nullptr);
  EXPECT_EQ(h->find("x-api-KEY")->value, "k");
  EXPECT_EQ(h->find("X-Api-Ke"), nullptr);
  std::vector<std::string_view> xff;
  for (const Field& f : *h)
    if (f.id == Name::x_forwarded_for) xff.push_back(f.value);
  EXPECT_EQ(xff, (std::vector<std::string_view>{"1.1.1.1", "2.2.2.2"}));
  EXPECT_EQ(h->all().size(), 4u);
  EXPECT_TRUE(is_hop_by_hop(Name::connection));
  EXPECT_TRUE(is_hop_by_hop(Name::proxy_authorization));
  EXPECT_FALSE(is_hop_by_hop(Name::authorization));
  EXPECT_FALSE(is_hop_by_hop(Name::host));
}

TEST(Http1Fields, HostCount) {
  auto h = make<RequestHead>();
  ASSERT_EQ(req("GET / HTTP/1.0\r\n\r\n", *h), Error::none);
  EXPECT_EQ(h->host_count, 0u);
  ASSERT_EQ(req("GET / HTTP/1.1\r\nHOST: a\r\nhost: b\r\n\r\n", *h), Error::none);
  EXPECT_EQ(h->host_count, 2u);
}

// ---------------------------------------------------------------- limits and arrival

TEST(Http1Head, SizeLimit) {
  auto h = make<RequestHead>();
  const std::size_t n = kGet.size();
  EXPECT_EQ(req(kGet, *h, n), Error::none);                  // exactly the limit
  EXPECT_EQ(req(kGet, *h, n - 1), Error::header_too_large);  // one byte over
  EXPECT_EQ(req(kGet + "body", *h, n), Error::none);         // the body does not count
  const std::string partial = kGet.substr(0, n - 2);
  EXPECT_EQ(req(partial, *h, n - 2), Error::need_more);      // up to the limit: wait
  EXPECT_EQ(req(partial, *h, n - 3), Error::header_too_large);
  EXPECT_EQ(req(std::string(100000, 'a'), *h, 8192), Error::header_too_large);
  EXPECT_EQ(req("", *h), Error::need_more);
}

TEST(Http1Head, ArrivingByteByByte) {
  const std::string full = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: keep-alive, X-Foo\r\n"
                           "X-Long: " + std::string(300, 'v') + "\r\n\r\nhello";
  const std::size_t head = full.size() - 5;
  auto once = make<RequestHead>();
  ASSERT_EQ(req(full, *once), Error::none);
  EXPECT_EQ(once->head_bytes, head);
  auto h = make<RequestHead>();
  auto fresh = make<RequestHead>();
  std::size_t scanned = 0;
  for (std::size_t n = 0; n <= full.size(); ++n) {
    const std::string_view part(full.data(), n);
    const Error e = parse_request_head(part, 8192, *h, scanned);
    const Error e_fresh = req(part, *fresh);  // without the resume point: same answers
    EXPECT_EQ(e, e_fresh) << n;
    if (n < head) {
      ASSERT_EQ(e, Error::need_more) << n;
      EXPECT_EQ(scanned, n);
    } else {
      ASSERT_EQ(e, Error::none) << n;
      EXPECT_EQ(dump(*h), dump(*once)) << n;
    }
  }
  // The same for a response.
  const std::string rfull = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
  auto ronce = make<ResponseHead>();
  ASSERT_EQ(res(rfull, *ronce), Error::none);
  auto r = make<ResponseHead>();
  scanned = 0;
  for (std::size_t n = 0; n <= rfull.size(); ++n) {
    const Error e = parse_response_head(std::string_view(rfull.data(), n), 8192, *r, scanned);
    if (n < ronce->head_bytes) {
      ASSERT_EQ(e, Error::need_more) << n;
    } else {
      ASSERT_EQ(e, Error::none) << n;
      EXPECT_EQ(dump(*r), dump(*ronce));
    }
  }
}

// ---------------------------------------------------------------- framing

TEST(Http1Framing, ContentLength) {
  auto h = make<RequestHead>();
  const std::pair<const char*, std::uint64_t> ok[] = {
      {"0", 0}, {"5", 5}, {" 42 ", 42}, {"007", 7}, {"9223372036854775807", 9223372036854775807ULL},
      {"0000000000000000001", 1}};
  for (auto [v, want] : ok) {
    ASSERT_EQ(req("POST / HTTP/1.1\r\ncontent-LENGTH: " + std::string(v) + "\r\n\r\n", *h), Error::none) << v;
    ASSERT_TRUE(h->content_length.has_value());
    EXPECT_EQ(*h->content_length, want);
    EXPECT_EQ(request_body(*h).kind, BodyKind::length);
    EXPECT_EQ(request_body(*h).length, want);
  }
  for (const char* v : {"", "abc", "-1", "+1", "1 2", "4, 4", "4,5", "0x10", "1.0", "9223372036854775808",
                        "18446744073709551615", "18446744073709551616", "00000000000000000001", "99999999999999999999"}) {
    EXPECT_EQ(req("POST / HTTP/1.1\r\nContent-Length: " + std::string(v) + "\r\n\r\n", *h), Error::bad_content_length) << v;
  }
  // Twice, different or equal.
  EXPECT_EQ(req("POST /ibe/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", *h),
            Error::bad_content_length);
  EXPECT_EQ(req("POST / HTTP/1.1\r\nContent-Length: 4\r\ncontent-length: 4\r\n\r\n", *h), Error::bad_content_length);
  auto r = make<ResponseHead>();
  EXPECT_EQ(res("HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n", *r), Error::bad_content_length);
}

TEST(Http1Framing, TransferEncoding) {
  auto h = make<RequestHead>();
  for (const char* v : {"chunked", "CHUNKED", "Chunked", " chunked\t"}) {
    ASSERT_EQ(req("POST / HTTP/1.1\r\nTransfer-Encoding: " + std::string(v) + "\r\n\r\n", *h), Error::none) << v;
    EXPECT_TRUE(h->chunked) << v;
    EXPECT_FALSE(h->other_transfer_encoding) << v;
    EXPECT_EQ(request_body(*h).kind, BodyKind::chunked);
  }
  for (const char* v : {"gzip, chunked", "identity", "chunked, gzip", "chunked,chunked", "chunkedx", "gzip"}) {
    ASSERT_EQ(req("POST / HTTP/1.1\r\nTransfer-Encoding: " + std::string(v) + "\r\n\r\n", *h), Error::none) << v;
    EXPECT_FALSE(h->chunked) << v;
    EXPECT_TRUE(h->other_transfer_encoding) << v;
    EXPECT_EQ(request_body(*h).kind, BodyKind::unsupported);
  }
  // Two fields, even both "chunked".
  ASSERT_EQ(req("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", *h), Error::none);
  EXPECT_FALSE(h->chunked);
  EXPECT_TRUE(h->other_transfer_encoding);
  // Empty, and in HTTP/1.0.
  EXPECT_EQ(req("POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n", *h), Error::bad_transfer_encoding);
  EXPECT_EQ(req("POST / HTTP/1.1\r\nTransfer-Encoding: , ,\r\n\r\n", *h), Error::bad_transfer_encoding);
  EXPECT_EQ(req("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", *h), Error::bad_transfer_encoding);
  auto r = make<ResponseHead>();
  EXPECT_EQ(res("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", *r), Error::bad_transfer_encoding);
}

TEST(Http1Framing, SmugglingInputs) {
  auto h = make<RequestHead>();
  // Both framings, in either order.
  EXPECT_EQ(req("POST /ibe/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", *h),
            Error::conflicting_framing);
  EXPECT_EQ(req("POST /ibe/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", *h),
            Error::conflicting_framing);
  EXPECT_EQ(req("POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: gzip\r\n\r\n", *h), Error::conflicting_framing);
  EXPECT_EQ(req("POST /ibe/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", *h),
            Error::bad_content_length);
  const std::string gz = "POST /ibe/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n";
  ASSERT_EQ(req(gz, *h), Error::none);
  EXPECT_TRUE(h->other_transfer_encoding);
  EXPECT_FALSE(h->chunked);
  EXPECT_EQ(h->head_bytes, gz.size() - 5);
  EXPECT_EQ(request_body(*h).kind, BodyKind::unsupported);
}

TEST(Http1Framing, ResponseTransferEncodingWinsOverContentLength) {
  auto r = make<ResponseHead>();
  ASSERT_EQ(res("HTTP/1.1 200 OK\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n", *r), Error::none);
  EXPECT_TRUE(r->chunked);
  EXPECT_FALSE(r->content_length.has_value());
  EXPECT_TRUE(r->content_length_ignored);
  EXPECT_EQ(response_body(*r, false).kind, BodyKind::chunked);
  ASSERT_EQ(res("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", *r), Error::none);
  EXPECT_FALSE(r->content_length_ignored);
  EXPECT_EQ(*r->content_length, 10u);
}

TEST(Http1Framing, ResponseBody) {
  auto r = make<ResponseHead>();
  struct Case {
    const char* head;
    bool after_head;
    BodyKind kind;
    std::uint64_t length;
  };
  const Case cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", false, BodyKind::length, 7},
      {"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", true, BodyKind::none, 0},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, BodyKind::chunked, 0},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, BodyKind::none, 0},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false, BodyKind::unsupported, 0},
      {"HTTP/1.1 200 OK\r\n\r\n", false, BodyKind::until_close, 0},
      {"HTTP/1.0 200 OK\r\n\r\n", false, BodyKind::until_close, 0},
      {"HTTP/1.1 100 Continue\r\n\r\n", false, BodyKind::none, 0},
      {"HTTP/1.1 101 Switching Protocols\r\n\r\n", false, BodyKind::none, 0},
      {"HTTP/1.1 199 X\r\nContent-Length: 3\r\n\r\n", false, BodyKind::none, 0},
      {"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n", false, BodyKind::none, 0},
      {"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", false, BodyKind::none, 0},
      {"HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n", false, BodyKind::length, 0},
      {"HTTP/1.1 404 Not Found\r\n\r\n", false, BodyKind::until_close, 0},
  };
  for (const Case& c : cases) {
    ASSERT_EQ(res(c.head, *r), Error::none) << c.head;
    const BodyFraming b = response_body(*r, c.after_head);
    EXPECT_EQ(b.kind, c.kind) << c.head << c.after_head;
    EXPECT_EQ(b.length, c.length) << c.head;
  }
}

TEST(Http1Framing, RequestBody) {
  auto h = make<RequestHead>();
  ASSERT_EQ(req("GET / HTTP/1.1\r\n\r\n", *h), Error::none);
  EXPECT_EQ(request_body(*h).kind, BodyKind::none);
  ASSERT_EQ(req("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", *h), Error::none);
  EXPECT_EQ(request_body(*h).kind, BodyKind::length);
  EXPECT_EQ(request_body(*h).length, 0u);
}

// ---------------------------------------------------------------- Connection and Expect

TEST(Http1Connection, KeepAliveByVersion) {
  auto h = make<RequestHead>();
  struct Case {
    const char* version;
    const char* fields;
    bool keep;
  };
  const Case cases[] = {
      {"1.1", "", true},
      {"1.1", "Connection: close\r\n", false},
      {"1.1", "Connection: CLOSE\r\n", false},
      {"1.1", "Connection: keep-alive\r\n", true},
      {"1.1", "Connection: x-foo, Close\r\n", false},
      {"1.1", "Connection: x-foo\r\nConnection: close\r\n", false},
      {"1.1", "Connection: , ,close ,\r\n", false},
      {"1.1", "Connection: closed\r\n", true},
      {"1.1", "X-Connection: close\r\n", true},
      {"1.1", "Proxy-Connection: close\r\n", true},  // not Connection
      {"1.0", "", false},
      {"1.0", "Connection: keep-alive\r\n", true},
      {"1.0", "Connection: Keep-Alive\r\n", true},
      {"1.0", "Connection: x-foo\r\nConnection: keep-alive\r\n", true},
      {"1.0", "Connection: keep-alive, close\r\n", false},
      {"1.0", "Connection: keep-alive\r\nConnection: close\r\n", false},
      {"1.0", "Keep-Alive: timeout=5\r\n", false},
  };
  for (const Case& c : cases) {
    ASSERT_EQ(req(std::string("GET / HTTP/") + c.version + "\r\n" + c.fields + "\r\n", *h), Error::none) << c.fields;
    EXPECT_EQ(h->keep_alive, c.keep) << c.version << " " << c.fields;
  }
  auto r = make<ResponseHead>();
  ASSERT_EQ(res("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", *r), Error::none);
  EXPECT_TRUE(r->keep_alive);
  ASSERT_EQ(res("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", *r), Error::none);
  EXPECT_FALSE(r->keep_alive);
  EXPECT_TRUE(r->connection_close);
}

TEST(Http1Connection, NamedFields) {
  auto h = make<RequestHead>();
  ASSERT_EQ(req("GET / HTTP/1.1\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\n", *h), Error::none);
  EXPECT_FALSE(h->connection_names_other);
  EXPECT_TRUE(connection_names(*h, "Keep-Alive"));
  EXPECT_FALSE(connection_names(*h, "X-Foo"));
  ASSERT_EQ(req("GET / HTTP/1.1\r\nConnection: close, X-Foo\r\nX-Foo: 1\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", *h),
            Error::none);
  EXPECT_TRUE(h->connection_names_other);
  EXPECT_TRUE(h->connection_upgrade);
  EXPECT_TRUE(h->connection_close);
  EXPECT_TRUE(connection_names(*h, "x-foo"));
  EXPECT_TRUE(connection_names(*h, "X-FOO"));
  EXPECT_TRUE(connection_names(*h, "Upgrade"));
  EXPECT_FALSE(connection_names(*h, "X-Fo"));
  EXPECT_FALSE(connection_names(*h, "X-Bar"));
  ASSERT_EQ(req("GET / HTTP/1.1\r\nX-Foo: 1\r\n\r\n", *h), Error::none);
  EXPECT_FALSE(connection_names(*h, "X-Foo"));
}

TEST(Http1Expect, Continue) {
  auto h = make<RequestHead>();
  ASSERT_EQ(req("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", *h), Error::none);
  EXPECT_TRUE(h->expect_continue);
  EXPECT_FALSE(h->expect_other);
  ASSERT_EQ(req("POST / HTTP/1.1\r\nEXPECT:  100-Continue \r\n\r\n", *h), Error::none);
  EXPECT_TRUE(h->expect_continue);
  ASSERT_EQ(req("POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", *h), Error::none);
  EXPECT_FALSE(h->expect_continue);
  EXPECT_TRUE(h->expect_other);
  ASSERT_EQ(req("POST / HTTP/1.1\r\n\r\n", *h), Error::none);  // reset between parses
  EXPECT_FALSE(h->expect_continue);
  EXPECT_FALSE(h->expect_other);
}

// ---------------------------------------------------------------- responses

TEST(Http1Response, StatusLine) {
  auto r = make<ResponseHead>();
  ASSERT_EQ(res("HTTP/1.1 200 OK\r\nServer: u\r\n\r\n", *r), Error::none);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->reason, "OK");
  EXPECT_EQ(r->version_minor, 1);
  EXPECT_EQ(r->fields[0].id, Name::server);
  ASSERT_EQ(res("HTTP/1.0 500 Internal Server Error\r\n\r\n", *r), Error::none);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->reason, "Internal Server Error");
  EXPECT_EQ(r->version_minor, 0);
  EXPECT_FALSE(r->keep_alive);
  ASSERT_EQ(res("HTTP/1.1 404 \r\n\r\n", *r), Error::none);
  EXPECT_EQ(r->reason, "");
  ASSERT_EQ(res("HTTP/1.1 204\r\n\r\n", *r), Error::none);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->reason, "");
  ASSERT_EQ(res("HTTP/1.1 999 \xe2\x9c\x93\tweird\r\n\r\n", *r), Error::none);
  EXPECT_EQ(r->status, 999);
  EXPECT_EQ(r->reason, "\xe2\x9c\x93\tweird");
  ASSERT_EQ(res("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n", *r), Error::none);
  EXPECT_EQ(r->head_bytes, 25u);

  for (const char* s : {"HTTP/1.1 099 X", "HTTP/1.1 20 OK", "HTTP/1.1 2000 OK", "HTTP/1.1 20a OK", "HTTP/1.1 200OK",
                        "HTTP/1.1  200 OK", "HTTP/1.1 -20 OK", "HTTP/1.1 2"}) {
    EXPECT_EQ(res(std::string(s) + "\r\n\r\n", *r), Error::bad_status) << s;
  }
  for (const char* s : {"HTTP/1.2 200 OK", "HTTP/2 200 OK", "http/1.1 200 OK", "HTTP/1.1", "HTTP/1.1\t200 OK", "ICY 200 OK"}) {
    EXPECT_EQ(res(std::string(s) + "\r\n\r\n", *r), Error::bad_version) << s;
  }
  EXPECT_EQ(res("HTTP/1.1 200 O\x01K\r\n\r\n", *r), Error::bad_reason);
  EXPECT_EQ(res("HTTP/1.1 200 O\x7fK\r\n\r\n", *r), Error::bad_reason);
  EXPECT_EQ(res("HTTP/1.1 200 OK\rX\r\n\r\n", *r), Error::bad_line_ending);
  EXPECT_EQ(res("HTTP/1.1 200 OK\n\r\n", *r), Error::bad_line_ending);
}

TEST(Http1, DescribeEveryError) {
  std::vector<std::string> seen;
  for (int i = 0; i <= static_cast<int>(Error::body_too_large); ++i) {
    const std::string d = describe(static_cast<Error>(i));
    if (i == 0) {
      EXPECT_EQ(d, "");
      continue;
    }
    EXPECT_FALSE(d.empty()) << i;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), d), 0) << d;
    seen.push_back(d);
  }
  EXPECT_STREQ(describe(Error::bad_content_length), "bad Content-Length");
}

// ---------------------------------------------------------------- chunked bodies

struct Decoded {
  std::string body;
  std::size_t consumed = 0;
  bool done = false;
  Error error = Error::none;
};

Decoded decode_all(std::string_view in, std::uint64_t max_body = UINT64_MAX, std::size_t max_trailer = 8192) {
  ChunkedDecoder d(max_body, max_trailer);
  Decoded out;
  out.consumed = d.decode(in, [&](const char* p, std::size_t n) { out.body.append(p, n); });
  out.done = d.done();
  out.error = d.error();
  EXPECT_EQ(d.body_bytes(), out.body.size());
  return out;
}

// The same input a byte per call: as the bytes trickle in.
Decoded decode_bytewise(std::string_view in, std::uint64_t max_body = UINT64_MAX, std::size_t max_trailer = 8192) {
  ChunkedDecoder d(max_body, max_trailer);
  Decoded out;
  for (std::size_t i = 0; i < in.size() && !d.done() && d.error() == Error::none; ++i)
    out.consumed += d.decode(in.substr(i, 1), [&](const char* p, std::size_t n) { out.body.append(p, n); });
  out.done = d.done();
  out.error = d.error();
  return out;
}

void expect_same(const Decoded& a, const Decoded& b, std::string_view in) {
  EXPECT_EQ(a.body, b.body) << in;
  EXPECT_EQ(a.done, b.done) << in;
  EXPECT_EQ(a.error, b.error) << in;
  if (a.error == Error::none) {
    EXPECT_EQ(a.consumed, b.consumed) << in;  // after an error: no more input taken
  }
}

TEST(Http1Chunked, DecodesWholeAndByteByByte) {
  const std::string body = "5\r\nhello\r\n1;name=value;q=\"a b\"\r\n \r\nA \t;x\r\n0123456789\r\n0\r\n\r\n";
  const std::string next = "GET /next HTTP/1.1\r\n\r\n";
  const Decoded whole = decode_all(body + next);
  EXPECT_TRUE(whole.done);
  EXPECT_EQ(whole.error, Error::none);
  EXPECT_EQ(whole.body, "hello 0123456789");
  EXPECT_EQ(whole.consumed, body.size());  // the next request stays unconsumed
  expect_same(whole, decode_bytewise(body + next), body);
  // Split at every point.
  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    ChunkedDecoder d;
    std::string got;
    auto sink = [&](const char* p, std::size_t n) { got.append(p, n); };
    std::size_t used = d.decode(std::string_view(body).substr(0, cut), sink);
    EXPECT_EQ(used, cut);
    EXPECT_EQ(d.done(), cut == body.size());
    used += d.decode(std::string_view(body + next).substr(cut), sink);
    EXPECT_TRUE(d.done());
    EXPECT_EQ(used, body.size());
    EXPECT_EQ(got, whole.body) << cut;
  }
}

TEST(Http1Chunked, NextReturnsViewsIntoTheInput) {
  const std::string in = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  ChunkedDecoder d;
  std::string_view data;
  std::size_t used = d.next(in, data);
  EXPECT_EQ(data, "abc");
  EXPECT_EQ(data.data(), in.data() + 3);
  EXPECT_EQ(used, 6u);
  used += d.next(std::string_view(in).substr(used), data);
  EXPECT_EQ(data, "de");
  used += d.next(std::string_view(in).substr(used), data);
  EXPECT_TRUE(data.empty());
  EXPECT_TRUE(d.done());
  EXPECT_EQ(used, in.size());
  EXPECT_EQ(d.next("more", data), 0u);  // done: nothing more is taken
  d.reset();
  EXPECT_FALSE(d.done());
  EXPECT_EQ(d.decode("0\r\n\r\n", [](const char*, std::size_t) {}), 5u);
  EXPECT_TRUE(d.done());
}

TEST(Http1Chunked, TrailersAreSkipped) {
  const std::string body = "2\r\nok\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\nHost:evil\r\nX-Empty:\r\n\r\n";
  const Decoded whole = decode_all(body + "NEXT");
  EXPECT_TRUE(whole.done);
  EXPECT_EQ(whole.body, "ok");
  EXPECT_EQ(whole.consumed, body.size());
  expect_same(whole, decode_bytewise(body + "NEXT"), body);
  // Trailer section over its limit.
  const std::string big = "0\r\nX-Big: " + std::string(100, 'a') + "\r\n\r\n";
  EXPECT_EQ(decode_all(big, UINT64_MAX, 50).error, Error::header_too_large);
  EXPECT_EQ(decode_bytewise(big, UINT64_MAX, 50).error, Error::header_too_large);
  EXPECT_TRUE(decode_all(big, UINT64_MAX, 200).done);
}

TEST(Http1Chunked, Sizes) {
  EXPECT_EQ(decode_all("a\r\n0123456789\r\n0\r\n\r\n").body, "0123456789");
  EXPECT_EQ(decode_all("A\r\n0123456789\r\n0\r\n\r\n").body, "0123456789");
  EXPECT_EQ(decode_all("0000000003\r\nabc\r\n000\r\n\r\n").body, "abc");
  // Sixteen hex digits fit (the data is simply not there yet); seventeen overflow.
  Decoded d = decode_all("ffffffffffffffff\r\n");
  EXPECT_EQ(d.error, Error::none);
  EXPECT_FALSE(d.done);
  EXPECT_EQ(decode_all("10000000000000000\r\n").error, Error::bad_chunk);
  EXPECT_EQ(decode_all("fffffffffffffffff\r\n").error, Error::bad_chunk);
  EXPECT_EQ(decode_bytewise("10000000000000000\r\n").error, Error::bad_chunk);
  // Leading zeros are bounded only by the line limit.
  EXPECT_TRUE(decode_all(std::string(4000, '0') + "\r\n\r\n").done);
  EXPECT_EQ(decode_all(std::string(5000, '0') + "\r\n\r\n").error, Error::bad_chunk);
}

TEST(Http1Chunked, Malformed) {
  for (const char* in : {
           "\r\n",                  // no size
           "g\r\n",                 // not hex
           "0x5\r\nhello\r\n",      // no 0x
           "-5\r\n",                //
           "+5\r\n",                //
           "5 \r\nhello\r\n",       // whitespace without an extension
           "5\nhello\r\n",          // bare LF
           "5\rhello\r\n",          // CR without LF
           "5;a\nhello\r\n",        // bare LF in an extension
           "5;a\x01\r\nhello\r\n",  // control character in an extension
           "5\r\nhelloX\r\n",       // data longer than its size
           "5\r\nhello\r\r",        // no LF after the data
           "5\r\nhello\n",          // bare LF after the data
           "0\r\n X: y\r\n\r\n",    // obs-fold in the trailer
           "0\r\nX y\r\n\r\n",      // trailer line without a colon
           "0\r\nX: y\n\r\n",       // bare LF in the trailer
           "0\r\nX: y\x01\r\n\r\n", // control character in a trailer value
           "0\r\n\r\r",             // final CR without LF
           " 5\r\n",                // whitespace before the size
       }) {
    EXPECT_EQ(decode_all(in).error, Error::bad_chunk) << in;
    EXPECT_EQ(decode_bytewise(in).error, Error::bad_chunk) << in;
    EXPECT_FALSE(decode_all(in).done) << in;
  }
  // A chunk-size line longer than the limit, with or without extensions.
  EXPECT_EQ(decode_all("1;" + std::string(ChunkedDecoder::kMaxChunkLine, 'x') + "\r\n").error, Error::bad_chunk);
  EXPECT_EQ(decode_all("1;" + std::string(ChunkedDecoder::kMaxChunkLine - 3, 'x') + "\r\na\r\n0\r\n\r\n").body, "a");
}

TEST(Http1Chunked, BodyLimit) {
  EXPECT_TRUE(decode_all("5\r\nhello\r\n0\r\n\r\n", 5).done);
  EXPECT_EQ(decode_all("6\r\nhello!\r\n0\r\n\r\n", 5).error, Error::body_too_large);
  const Decoded across = decode_all("3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", 5);
  EXPECT_EQ(across.error, Error::body_too_large);
  EXPECT_EQ(across.body, "abc");  // refused before the chunk over the limit is delivered
  EXPECT_EQ(decode_bytewise("3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", 5).error, Error::body_too_large);
  EXPECT_EQ(decode_all("ffffffffffffffff\r\n", 1 << 20).error, Error::body_too_large);
}

// ---------------------------------------------------------------- against Beast

std::string random_token(std::mt19937& rng, std::size_t max_len) {
  static const std::string chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~";
  std::string s(1 + rng() % max_len, 'x');
  for (char& c : s) c = chars[rng() % chars.size()];
  return s;
}

// A field value: VCHAR, obs-text, and SP / HTAB inside; sometimes empty.
std::string random_value(std::mt19937& rng) {
  const std::size_t n = rng() % 4 == 0 ? 0 : 1 + rng() % 60;
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned r = rng() % 20;
    if (r == 0 && i > 0 && i + 1 < n) s += ' ';
    else if (r == 1 && i > 0 && i + 1 < n) s += '\t';
    else if (r == 2) s += static_cast<char>(0x80 + rng() % 128);
    else s += static_cast<char>(0x21 + rng() % 94);
  }
  return s;
}

std::string random_case(std::mt19937& rng, std::string s) {
  for (char& c : s)
    c = static_cast<char>(rng() % 2 ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string ows(std::mt19937& rng) {
  static const char* pads[] = {"", "", " ", "  ", "\t", " \t "};
  return pads[rng() % 6];
}

struct Generated {
  std::string text;
  std::vector<std::pair<std::string, std::string>> fields;  // name, trimmed value
};

// A valid head: random methods, targets, fields (random names and recognised ones in random case,
// values with OWS around), framing and Connection fields. Avoids what the two parsers decide
// differently on purpose (see the tests after this one).
Generated random_head(std::mt19937& rng, bool request) {
  Generated g;
  const int minor = static_cast<int>(rng() % 2);
  if (request) {
    static const char* methods[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "PROPFIND", "M-SEARCH"};
    std::string target = "/";
    const std::size_t tn = rng() % 50;
    for (std::size_t i = 0; i < tn; ++i) target += static_cast<char>(0x21 + rng() % 94);
    g.text = std::string(methods[rng() % 9]) + " " + target + " HTTP/1." + std::to_string(minor) + "\r\n";
  } else {
    std::string reason = random_value(rng);
    g.text = "HTTP/1." + std::to_string(minor) + " " + std::to_string(100 + rng() % 900) + " " + reason + "\r\n";
  }
  static const char* known[] = {"Host", "Date", "Server", "Via", "X-Forwarded-For", "X-Forwarded-Proto", "Expect",
                                "Authorization", "Retry-After", "Content-Type", "Keep-Alive", "TE", "Trailer",
                                "Upgrade", "X-Tollgate-Shadow", "X-Real-IP", "Forwarded", "X-Request-Id",
                                "Proxy-Authorization", "Proxy-Authenticate", "X-Forwarded-Host"};
  auto add = [&](std::string name, std::string value) {
    g.text += name + ":" + ows(rng) + value + ows(rng) + "\r\n";
    g.fields.emplace_back(std::move(name), std::move(value));
  };
  const std::size_t n = rng() % 30;
  bool close = false, keep = false;  // Connection tokens so far, across fields
  const unsigned framing = rng() % 3;  // none, Content-Length, chunked (HTTP/1.1)
  const std::size_t framing_at = n ? rng() % n : 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == framing_at && framing == 1) add(random_case(rng, "Content-Length"), std::to_string(rng() % 100000));
    if (i == framing_at && framing == 2 && minor == 1) add(random_case(rng, "Transfer-Encoding"), random_case(rng, "chunked"));
    const unsigned kind = rng() % 8;
    if (kind == 0) {
      // Connection lists; in HTTP/1.0 not "close" with "keep-alive" (Beast keeps the connection).
      static const char* tokens[] = {"close", "keep-alive", "upgrade", "x-foo", "te"};
      std::string v;
      const std::size_t k = 1 + rng() % 3;
      for (std::size_t t = 0; t < k; ++t) {
        std::string tok = tokens[rng() % 5];
        if (minor == 0 && ((tok == "close" && keep) || (tok == "keep-alive" && close))) continue;
        close = close || tok == "close";
        keep = keep || tok == "keep-alive";
        if (!v.empty()) v += "," + ows(rng);
        v += random_case(rng, tok);
      }
      if (v.empty()) v = "x-bar";
      add(random_case(rng, "Connection"), v);
    } else if (kind <= 2) {
      add(random_case(rng, known[rng() % (sizeof known / sizeof *known)]), random_value(rng));
    } else {
      add(random_token(rng, 24), random_value(rng));
    }
  }
  g.text += "\r\n";
  return g;
}

// Beast's view of the same bytes, through its public parser.
template <bool isRequest>
void compare_with_beast(const Generated& g, std::size_t index) {
  SCOPED_TRACE(::testing::Message() << "head " << index << ":\n" << g.text);
  bhttp::parser<isRequest, bhttp::empty_body> p;
  p.header_limit(1 << 20);
  p.body_limit((std::numeric_limits<std::uint64_t>::max)());
  boost::beast::error_code ec;
  const std::size_t used = p.put(boost::asio::buffer(g.text.data(), g.text.size()), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(p.is_header_done());
  const auto& m = p.get();

  using H = std::conditional_t<isRequest, RequestHead, ResponseHead>;
  auto h = make<H>();
  std::size_t scanned = 0;
  Error e;
  if constexpr (isRequest) e = parse_request_head(g.text, 1 << 20, *h, scanned);
  else e = parse_response_head(g.text, 1 << 20, *h, scanned);
  ASSERT_EQ(e, Error::none) << describe(e);

  EXPECT_EQ(h->head_bytes, used);
  EXPECT_EQ(h->head_bytes, g.text.size());
  EXPECT_EQ(10 + h->version_minor, m.version());
  if constexpr (isRequest) {
    EXPECT_EQ(h->method_text, m.method_string());
    EXPECT_EQ(h->target, m.target());
    EXPECT_EQ(h->method == Method::get, m.method() == bhttp::verb::get);
    EXPECT_EQ(h->method == Method::other, m.method() == bhttp::verb::unknown || m.method() == bhttp::verb::propfind ||
                                              m.method() == bhttp::verb::msearch);
  } else {
    EXPECT_EQ(h->status, m.result_int());
    // For an empty reason phrase Beast's reason() makes one up.
    EXPECT_EQ(h->reason.empty() ? bhttp::obsolete_reason(static_cast<bhttp::status>(h->status)) : h->reason, m.reason());
  }
  // Our fields are the generated ones, in wire order.
  ASSERT_EQ(h->count, g.fields.size());
  for (std::size_t i = 0; i < h->count; ++i) {
    EXPECT_EQ(h->fields[i].name, g.fields[i].first) << i;
    EXPECT_EQ(h->fields[i].value, g.fields[i].second) << i;
  }
  // Beast's basic_fields does not keep wire order: a field whose name is there already goes
  // right after the last field of that name. The same order from ours by that rule:
  std::vector<const Field*> beast_order;
  for (const Field& f : *h) {
    auto at = beast_order.end();
    for (auto it = beast_order.begin(); it != beast_order.end(); ++it)
      if (boost::beast::iequals((*it)->name, f.name)) at = it + 1;
    beast_order.insert(at, &f);
  }
  std::size_t i = 0;
  for (const auto& f : m) {
    ASSERT_LT(i, beast_order.size());
    EXPECT_EQ(beast_order[i]->name, f.name_string()) << i;
    EXPECT_EQ(beast_order[i]->value, f.value()) << i;
    // A recognised name is the field Beast recognised.
    if (beast_order[i]->id != Name::other) {
      EXPECT_EQ(bhttp::string_to_field(canonical(beast_order[i]->id)), f.name()) << i;
    }
    ++i;
  }
  EXPECT_EQ(i, h->count);
  // Framing.
  const auto cl = p.content_length();
  EXPECT_EQ(h->content_length.has_value(), cl.has_value());
  if (cl && h->content_length) {
    EXPECT_EQ(*h->content_length, *cl);
  }
  EXPECT_EQ(h->chunked, p.chunked());
  EXPECT_FALSE(h->other_transfer_encoding);
  // Beast's keep_alive() also says no when a response body runs until the connection closes.
  bool keep = h->keep_alive;
  if constexpr (!isRequest) keep = keep && response_body(*h, false).kind != BodyKind::until_close;
  EXPECT_EQ(keep, p.keep_alive());
}

TEST(Http1Beast, SameResultsOnValidHeads) {
  std::mt19937 rng(20240611);
  for (std::size_t i = 0; i < 400; ++i) {
    const bool request = i % 2 == 0;
    const Generated g = random_head(rng, request);
    if (request) compare_with_beast<true>(g, i);
    else compare_with_beast<false>(g, i);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The same chunked bodies decode to the same bytes in Beast.
TEST(Http1Beast, SameChunkedBodies) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string body, want;
    const int chunks = static_cast<int>(rng() % 6);
    for (int c = 0; c < chunks; ++c) {
      std::string data(1 + rng() % 300, 'x');
      for (char& ch : data) ch = static_cast<char>(rng() % 256);
      want += data;
      char size[32];
      std::snprintf(size, sizeof size, rng() % 2 ? "%zx" : "%zX", data.size());
      body += size;
      if (rng() % 3 == 0) body += ";" + random_token(rng, 8) + (rng() % 2 ? "=" + random_token(rng, 8) : "");
      if (rng() % 4 == 0) body += ";q=\"quoted value\"";
      body += "\r\n" + data + "\r\n";
    }
    body += "0\r\n";
    if (rng() % 2) body += random_token(rng, 12) + ": " + random_value(rng) + "\r\n";
    body += "\r\n";

    const std::string msg = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body;
    bhttp::request_parser<bhttp::string_body> p;
    p.eager(true);
    boost::beast::error_code ec;
    const std::size_t used = p.put(boost::asio::buffer(msg.data(), msg.size()), ec);
    ASSERT_FALSE(ec) << ec.message() << "\n" << body;
    ASSERT_TRUE(p.is_done());
    EXPECT_EQ(p.get().body(), want);
    EXPECT_EQ(used, msg.size());

    const Decoded ours = decode_all(body + "rest");
    EXPECT_TRUE(ours.done) << body;
    EXPECT_EQ(ours.body, want);
    EXPECT_EQ(ours.consumed, body.size());
    expect_same(ours, decode_bytewise(body + "rest"), body);
  }
}

// Where this parser decides differently from Beast 1.74, on purpose. Each case is checked against
// Beast too, so that a Beast change shows here.
TEST(Http1Beast, KnownDifferences) {
  auto beast_request = [](const std::string& s, boost::beast::error_code& ec) {
    auto p = std::make_unique<bhttp::request_parser<bhttp::empty_body>>();
    p->header_limit(1 << 20);
    p->put(boost::asio::buffer(s.data(), s.size()), ec);
    return p;
  };
  auto h = make<RequestHead>();
  boost::beast::error_code ec;

  // Content-Length as an equal list: Beast takes it, we refuse it.
  const std::string list = "POST / HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\n";
  beast_request(list, ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(req(list, *h), Error::bad_content_length);

  // A non-chunked Transfer-Encoding before Content-Length: Beast takes both (and reads the
  // Content-Length), we refuse the request.
  const std::string te_cl = "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nContent-Length: 4\r\n\r\n";
  beast_request(te_cl, ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(req(te_cl, *h), Error::conflicting_framing);

  // "gzip, chunked": Beast frames it as chunked; for us it is another coding (the proxy: 501).
  const std::string gz = "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
  EXPECT_TRUE(beast_request(gz, ec)->chunked());
  ASSERT_EQ(req(gz, *h), Error::none);
  EXPECT_FALSE(h->chunked);

  // Transfer-Encoding in HTTP/1.0: Beast decodes chunked, we refuse (RFC 9112 6.1).
  const std::string te10 = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_TRUE(beast_request(te10, ec)->chunked());
  EXPECT_EQ(req(te10, *h), Error::bad_transfer_encoding);

  // HTTP/1.0 with both "close" and "keep-alive": Beast keeps the connection, we close it.
  const std::string both = "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n";
  EXPECT_TRUE(beast_request(both, ec)->keep_alive());
  ASSERT_EQ(req(both, *h), Error::none);
  EXPECT_FALSE(h->keep_alive);

  // Proxy-Connection: Beast reads it as Connection, we do not (it is not standard).
  const std::string pc = "GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n";
  EXPECT_FALSE(beast_request(pc, ec)->keep_alive());
  ASSERT_EQ(req(pc, *h), Error::none);
  EXPECT_TRUE(h->keep_alive);

  // Obsolete line folding: Beast unfolds it, we refuse it (RFC 9112 5.2 allows either).
  const std::string fold = "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n";
  beast_request(fold, ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(req(fold, *h), Error::bad_field);

  // A non-ASCII target: Beast takes it, we refuse it.
  const std::string utf8 = "GET /\xc3\xa9 HTTP/1.1\r\n\r\n";
  beast_request(utf8, ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(req(utf8, *h), Error::bad_target);

  // An empty line before the request line: Beast refuses it, we skip it (RFC 9112 2.2).
  const std::string crlf = "\r\nGET / HTTP/1.1\r\n\r\n";
  beast_request(crlf, ec);
  EXPECT_TRUE(ec);
  EXPECT_EQ(req(crlf, *h), Error::none);

  // A status line without a reason phrase or its SP: Beast refuses it, we take it.
  bhttp::response_parser<bhttp::empty_body> rp;
  const std::string nosp = "HTTP/1.1 204\r\n\r\n";
  rp.put(boost::asio::buffer(nosp.data(), nosp.size()), ec);
  EXPECT_EQ(ec, bhttp::error::bad_status);
  auto r = make<ResponseHead>();
  EXPECT_EQ(res(nosp, *r), Error::none);

  // A response with Content-Length and Transfer-Encoding: chunked: Beast refuses it, we let
  // Transfer-Encoding win (RFC 9112 6.3) and say so.
  bhttp::response_parser<bhttp::empty_body> rp2;
  const std::string clte = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
  rp2.put(boost::asio::buffer(clte.data(), clte.size()), ec);
  EXPECT_EQ(ec, bhttp::error::bad_transfer_encoding);
  ASSERT_EQ(res(clte, *r), Error::none);
  EXPECT_TRUE(r->content_length_ignored);

  // A Connection value that is not a token list: Beast refuses it, we read the tokens we know.
  const std::string badlist = "GET / HTTP/1.1\r\nConnection: close \"x\"\r\n\r\n";
  beast_request(badlist, ec);
  EXPECT_EQ(ec, bhttp::error::bad_value);
  ASSERT_EQ(req(badlist, *h), Error::none);
  EXPECT_TRUE(h->connection_names_other);
}

}  // namespace
}  // namespace tollgate::proxy::http1

// libFuzzer: the HTTP/1.1 head parser and the chunked body decoder (src/proxy/http1.cpp). The
// first byte chooses what the rest is fed to: a request head, a response head, a chunked body, or
// a request head followed by its chunked body. Beyond memory safety (ASan, UBSan) it checks what
// the parser promises: every view lies inside the head, fields are well-formed and trimmed,
// the framing facts agree with the fields, a head arriving in pieces gives the same answer as in
// one piece, and the decoder gives the same bytes however its input is split.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "tollgate/proxy/http1.hpp"

namespace h1 = tollgate::proxy::http1;

namespace {

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

bool inside(std::string_view part, std::string_view whole) {
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lo = [](unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
    if (lo(static_cast<unsigned char>(a[i])) != lo(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

// What a successful parse promises about the head it returns.
void check_head(const h1::Head& h, std::string_view buf, std::size_t max, bool request) {
  CHECK(h.head_bytes >= 4 && h.head_bytes <= buf.size() && h.head_bytes <= max);
  const std::string_view head = buf.substr(0, h.head_bytes);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");
  CHECK(h.count <= h1::kMaxFields);
  CHECK(h.version_minor == 0 || h.version_minor == 1);
  std::size_t hosts = 0, content_lengths = 0, transfer_encodings = 0;
  std::uint32_t present = 0;
  for (const h1::Field& f : h) {
    CHECK(inside(f.name, head) && inside(f.value, head));
    CHECK(!f.name.empty());
    for (char c : f.name) CHECK(is_tchar(static_cast<unsigned char>(c)));
    CHECK(f.name.data()[f.name.size()] == ':');
    if (!f.value.empty()) {
      CHECK(f.value.front() != ' ' && f.value.front() != '\t' && f.value.back() != ' ' && f.value.back() != '\t');
    }
    for (char c : f.value) {
      const auto u = static_cast<unsigned char>(c);
      CHECK(u == '\t' || (u >= 0x20 && u != 0x7f));
    }
    CHECK(f.id == h1::name_of(f.name));
    CHECK(f.id == h1::Name::other || iequals(f.name, h1::canonical(f.id)));
    present |= 1u << static_cast<unsigned>(f.id);
    hosts += f.id == h1::Name::host;
    content_lengths += f.id == h1::Name::content_length;
    transfer_encodings += f.id == h1::Name::transfer_encoding;
    if (f.id == h1::Name::connection) {
      CHECK(h.find(f.name) != nullptr);
    }
  }
  CHECK(present == h.present);
  CHECK(hosts == h.host_count);
  CHECK(content_lengths <= 1);
  CHECK(!(h.chunked && h.other_transfer_encoding));
  CHECK((h.chunked || h.other_transfer_encoding) == (transfer_encodings > 0));
  if (transfer_encodings > 0) {
    CHECK(h.version_minor == 1);
    CHECK(!h.content_length);
    CHECK(!request || content_lengths == 0);
    CHECK(h.content_length_ignored == (content_lengths == 1));
  } else {
    CHECK(h.content_length.has_value() == (content_lengths == 1));
    CHECK(!h.content_length_ignored);
  }
  if (h.content_length) {
    CHECK(*h.content_length <= static_cast<std::uint64_t>(INT64_MAX));
  }
  if (h.connection_close) {
    CHECK(!h.keep_alive);
  }
  if (h.version_minor == 1) {
    CHECK(h.keep_alive == !h.connection_close);
  }
  if (h.keep_alive && h.version_minor == 0) {
    CHECK(h1::connection_names(h, "keep-alive"));
  }
  if (h.connection_upgrade) {
    CHECK(h.connection_names_other && h1::connection_names(h, "Upgrade"));
  }
  if (!h.connection_names_other) {
    CHECK(!h1::connection_names(h, "X-Fuzz"));
  }
  if (const h1::Field* f = h.find(h1::Name::host)) {
    CHECK(f->id == h1::Name::host && h.has(h1::Name::host));
  }
}

void check_request(const h1::RequestHead& h, std::string_view buf, std::size_t max) {
  check_head(h, buf, max, true);
  const std::string_view head = buf.substr(0, h.head_bytes);
  CHECK(inside(h.method_text, head) && inside(h.target, head));
  CHECK(!h.method_text.empty() && !h.target.empty());
  for (char c : h.method_text) CHECK(is_tchar(static_cast<unsigned char>(c)));
  for (char c : h.target) CHECK(c > 0x20 && c < 0x7f);
  const h1::BodyFraming b = h1::request_body(h);
  CHECK(b.kind != h1::BodyKind::until_close);
  CHECK((b.kind == h1::BodyKind::chunked) == h.chunked);
}

void check_response(const h1::ResponseHead& h, std::string_view buf, std::size_t max) {
  check_head(h, buf, max, false);
  CHECK(h.status >= 100 && h.status <= 999);
  CHECK(inside(h.reason, buf.substr(0, h.head_bytes)));
  CHECK(h1::response_body(h, true).kind == h1::BodyKind::none);
}

// The facts two parses of the same bytes must share (views compared by address).
bool same(const h1::Head& a, const h1::Head& b) {
  if (a.count != b.count || a.head_bytes != b.head_bytes || a.version_minor != b.version_minor || a.chunked != b.chunked ||
      a.other_transfer_encoding != b.other_transfer_encoding || a.content_length != b.content_length ||
      a.content_length_ignored != b.content_length_ignored || a.keep_alive != b.keep_alive ||
      a.connection_names_other != b.connection_names_other || a.expect_continue != b.expect_continue ||
      a.host_count != b.host_count || a.present != b.present)
    return false;
  for (std::size_t i = 0; i < a.count; ++i) {
    const h1::Field& x = a.fields[i];
    const h1::Field& y = b.fields[i];
    if (x.name.data() != y.name.data() || x.name.size() != y.name.size() || x.value.data() != y.value.data() ||
        x.value.size() != y.value.size() || x.id != y.id)
      return false;
  }
  return true;
}

// Parses `buf` whole, then its prefixes as if it arrived in pieces (with and without the resume
// point): need_more until some length, then the whole answer for every longer prefix.
template <class H, class Parse, class Check>
h1::Error parse_head(std::string_view buf, std::size_t step, H& whole, H& part, Parse parse, Check check) {
  const std::size_t max = buf.size() + 1;  // no header_too_large here: that depends on the length
  const h1::Error e = parse(buf, max, whole, nullptr);
  CHECK(e != h1::Error::header_too_large);
  if (e == h1::Error::none) check(whole, buf, max);
  std::size_t scanned = 0;
  bool answered = false;
  for (std::size_t n = 0; n <= buf.size(); n += step) {
    const std::string_view prefix = buf.substr(0, n);
    const h1::Error pe = parse(prefix, max, part, &scanned);
    std::size_t fresh_scanned = 0;
    CHECK(parse(prefix, max, part, &fresh_scanned) == pe);
    if (pe == h1::Error::need_more) {
      CHECK(!answered);
      continue;
    }
    answered = true;
    CHECK(pe == e);
    if (pe == h1::Error::none) CHECK(same(part, whole));
  }
  // Over the limit: header_too_large, never a parse of more than the limit.
  if (buf.size() > 0) {
    std::size_t s = 0;
    const h1::Error small = parse(buf, buf.size() - 1, part, &s);
    if (small == h1::Error::none) {
      CHECK(part.head_bytes <= buf.size() - 1);
    }
    if (e == h1::Error::need_more) {
      CHECK(small == h1::Error::header_too_large);
    }
  }
  return e;
}

struct Out {
  std::string body;
  std::size_t consumed = 0;
  bool done = false;
  h1::Error error = h1::Error::none;
  std::uint64_t body_bytes = 0;
};

// The decoder on `in` split into pieces of `piece` bytes (0: one piece).
Out decode(std::string_view in, std::size_t piece, std::uint64_t max_body, std::size_t max_trailer) {
  h1::ChunkedDecoder d(max_body, max_trailer);
  Out out;
  auto sink = [&](const char* p, std::size_t n) {
    CHECK(p >= in.data() && p + n <= in.data() + in.size());
    out.body.append(p, n);
  };
  if (piece == 0) {
    out.consumed = d.decode(in, sink);
  } else {
    for (std::size_t i = 0; i < in.size() && !d.done() && d.error() == h1::Error::none; i += piece) {
      const std::string_view chunk = in.substr(i, piece);
      const std::size_t used = d.decode(chunk, sink);
      CHECK(used <= chunk.size());
      if (!d.done() && d.error() == h1::Error::none) CHECK(used == chunk.size());
      out.consumed += used;
    }
  }
  out.done = d.done();
  out.error = d.error();
  out.body_bytes = d.body_bytes();
  CHECK(!(out.done && out.error != h1::Error::none));
  CHECK(out.body_bytes == out.body.size());
  CHECK(out.body.size() <= max_body);
  CHECK(out.consumed <= in.size());
  if (out.done) {
    CHECK(out.consumed >= 5 && in.substr(out.consumed - 2, 2) == "\r\n");
  }
  return out;
}

void check_chunked(std::string_view in, std::uint8_t knob) {
  const std::uint64_t max_body = knob & 1 ? 64 : UINT64_MAX;
  const std::size_t max_trailer = knob & 2 ? 16 : 1024;
  const Out whole = decode(in, 0, max_body, max_trailer);
  for (std::size_t piece : {std::size_t{1}, std::size_t{2} + (knob >> 2) % 13}) {
    const Out split = decode(in, piece, max_body, max_trailer);
    CHECK(split.body == whole.body);
    CHECK(split.consumed == whole.consumed);
    CHECK(split.done == whole.done);
    CHECK(split.error == whole.error);
  }
  if (whole.done) {
    // The body alone decodes the same and ends where it ended.
    const Out again = decode(in.substr(0, whole.consumed), 0, max_body, max_trailer);
    CHECK(again.done && again.body == whole.body && again.consumed == whole.consumed);
  }
}

h1::RequestHead g_req, g_req2;
h1::ResponseHead g_res, g_res2;

h1::Error parse_req(std::string_view b, std::size_t max, h1::RequestHead& h, std::size_t* scanned) {
  return scanned ? h1::parse_request_head(b, max, h, *scanned) : h1::parse_request_head(b, max, h);
}
h1::Error parse_res(std::string_view b, std::size_t max, h1::ResponseHead& h, std::size_t* scanned) {
  return scanned ? h1::parse_response_head(b, max, h, *scanned) : h1::parse_response_head(b, max, h);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  // A copy of exactly the input, so that ASan sees any read past its end.
  const std::string copy(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string_view in = copy;
  CHECK(std::strlen(h1::describe(static_cast<h1::Error>(mode % 16))) < 64);
  // Prefix parses cost a pass each: every byte for short inputs, fewer steps for long ones.
  const std::size_t step = in.size() <= 300 ? 1 : in.size() / 64;
  switch (mode % 4) {
    case 0:
      parse_head(in, step, g_req, g_req2, parse_req, check_request);
      break;
    case 1:
      parse_head(in, step, g_res, g_res2, parse_res, check_response);
      break;
    case 2:
      check_chunked(in, static_cast<std::uint8_t>(mode >> 2));
      break;
    default:
      // A request and its chunked body, as the proxy will read them.
      if (parse_head(in, step, g_req, g_req2, parse_req, check_request) == h1::Error::none &&
          h1::request_body(g_req).kind == h1::BodyKind::chunked)
        check_chunked(in.substr(g_req.head_bytes), static_cast<std::uint8_t>(mode >> 2));
      break;
  }
  return 0;
}

// HTTP/1.1 message heads and chunked bodies, parsed without allocating: the fields are views into
// the caller's buffer, held in a fixed-capacity array. The framing facts the proxy acts on
// (Content-Length, Transfer-Encoding, Connection, Expect, Host) are worked out during the one pass
// over the head, and the field names the proxy cares about are recognised there too, so later code
// compares small integers instead of strings.
// No Asio, no Beast, no I/O: pure functions over bytes (RFC 9110, RFC 9112).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace tollgate::proxy::http1 {

enum class Method : std::uint8_t { get, head, post, put, delete_, options, patch, trace, connect, other };

// Field names recognised while parsing (ASCII case-insensitive). At most 32 (a bit each in
// Head::present).
enum class Name : std::uint8_t {
  other,
  // framing and connection management
  host, content_length, transfer_encoding, connection, expect, keep_alive, proxy_connection, te, trailer,
  upgrade, proxy_authorization, proxy_authenticate,
  // forwarding
  x_forwarded_for, x_forwarded_proto, x_forwarded_host, x_real_ip, forwarded, via, x_request_id,
  x_tollgate_shadow, x_tollgate_color,
  // others the proxy reads or writes
  authorization, date, server, retry_after, content_type,
  // a request's time budget (proxy/deadline)
  grpc_timeout, request_timeout,
  // the RateLimit fields an upstream may send (proxy/upstream_signal)
  ratelimit, ratelimit_policy,
};
inline constexpr std::size_t kNameCount = static_cast<std::size_t>(Name::ratelimit_policy) + 1;
static_assert(kNameCount <= 32);

// The name's canonical spelling ("Content-Length"); "" for Name::other.
std::string_view canonical(Name n) noexcept;
// The Name for a field name, ASCII case-insensitive; Name::other when not one of the above.
Name name_of(std::string_view field_name) noexcept;
// Hop-by-hop fields (RFC 9110 7.6.1 and the proxy's own list): never forwarded as they are.
// Transfer-Encoding is one too; the caller decides whether to keep it (it re-frames the body).
bool is_hop_by_hop(Name n) noexcept;

struct Field {
  std::string_view name;   // as sent
  std::string_view value;  // leading and trailing SP / HTAB removed
  Name id;
};

// A request may have this many fields (nginx has no count; a hundred is far more than clients
// send). A response has no count of its own: its head is bounded by bytes only, as nginx bounds it
// by proxy_buffer_size, so an upstream's answer is not lost for having many short fields.
inline constexpr std::size_t kMaxFields = 100;

enum class Error : std::uint8_t {
  none,
  need_more,              // the head (or chunked body) is not complete yet
  header_too_large,       // head longer than max_head_bytes (or trailer section over its limit)
  too_many_fields,        // a request with more than kMaxFields fields
  bad_method,
  bad_target,
  bad_version,            // not HTTP/1.0 or HTTP/1.1, or junk after it
  bad_status,             // status not 3 digits (100-999)
  bad_reason,             // a control character in the reason phrase
  bad_field,              // bad field name, whitespace before ':', obs-fold, control char in value
  bad_line_ending,        // a bare LF or a CR not followed by LF
  bad_content_length,     // not digits, too large, a list, or given more than once
  conflicting_framing,    // a request with both Content-Length and Transfer-Encoding
  bad_transfer_encoding,  // Transfer-Encoding in an HTTP/1.0 message, or an empty one
  bad_chunk,              // malformed chunk-size line, chunk end, or trailer line
  body_too_large,         // a chunked body over the decoder's limit
};
// Short human text ("bad Content-Length"), e.g. for a 400 response's detail.
const char* describe(Error e) noexcept;

// A head's fields, in wire order. The first kInline live in the object itself; a head with more
// moves them to the heap, whose slots the list keeps for its next heads up to kKeptOnHeap (a rare
// response with thousands of fields does not pin its slots to a pooled connection). A connection
// thus holds ~1 KiB for its head, not room for the rare hundred fields.
class FieldList {
 public:
  static constexpr std::size_t kInline = 24;
  static constexpr std::size_t kKeptOnHeap = 128;
  FieldList() noexcept = default;
  FieldList(const FieldList&) = delete;  // data_ may point into the object itself
  FieldList& operator=(const FieldList&) = delete;

  Field& operator[](std::size_t i) noexcept { return data_[i]; }
  const Field& operator[](std::size_t i) const noexcept { return data_[i]; }
  const Field* data() const noexcept { return data_; }
  // The slot of field i, the first `i` being in use.
  Field& slot(std::size_t i) {
    if (data_ == inline_) {
      if (i < kInline) return inline_[i];
      heap_.assign(inline_, inline_ + kInline);  // i == kInline: the head outgrows the object
    }
    if (i >= heap_.size()) {
      heap_.resize(std::max(i + 1, 2 * heap_.size()));
      data_ = heap_.data();
    }
    return data_[i];
  }
  // Back to the inline slots for the next head (the heap slots stay for later, up to kKeptOnHeap).
  void clear() noexcept {
    data_ = inline_;
    if (heap_.capacity() > kKeptOnHeap) std::vector<Field>().swap(heap_);
  }

 private:
  Field inline_[kInline];
  std::vector<Field> heap_;
  Field* data_ = inline_;
};

// What is common to a request head and a response head. Views point into the parsed buffer: it
// must outlive them and not move. Reusable: each parse resets it.
struct Head {
  FieldList fields;
  std::size_t count = 0;
  int version_minor = 1;       // HTTP/1.<minor>: 0 or 1
  std::size_t head_bytes = 0;  // bytes from the buffer's start to past the final CRLF CRLF

  // Framing facts, computed during the parse.
  bool chunked = false;                  // Transfer-Encoding is exactly "chunked"
  bool other_transfer_encoding = false;  // any other Transfer-Encoding (or two fields of it)
  std::optional<std::uint64_t> content_length;
  bool content_length_ignored = false;   // a response with both: Transfer-Encoding wins (RFC 9112 6.3)
                                         // and content_length is left empty
  bool keep_alive = true;                // per the version and the Connection tokens only
  bool connection_close = false;         // a Connection token "close"
  bool connection_upgrade = false;       // a Connection token "upgrade"
  bool connection_names_other = false;   // a Connection token other than close / keep-alive:
                                         // see connection_names()
  bool expect_continue = false;          // Expect: 100-continue
  bool expect_other = false;             // an Expect with another value (417)
  std::size_t host_count = 0;
  std::uint32_t present = 0;             // bit (1 << Name) for each Name seen, Name::other included
  bool underscore_names = false;         // a field name holds '_' (none of the Names does)

  bool has(Name n) const noexcept { return (present >> static_cast<unsigned>(n)) & 1u; }
  // First field with that name, or nullptr.
  const Field* find(Name n) const noexcept;
  // First field with that name, ASCII case-insensitive (for names Name does not know).
  const Field* find(std::string_view name) const noexcept;
  // Value of the first field with that name, "" when there is none.
  std::string_view value(Name n) const noexcept {
    const Field* f = find(n);
    return f ? f->value : std::string_view{};
  }
  std::span<const Field> all() const noexcept { return {fields.data(), count}; }
  const Field* begin() const noexcept { return fields.data(); }
  const Field* end() const noexcept { return fields.data() + count; }
};

struct RequestHead : Head {
  Method method = Method::other;
  std::string_view method_text;  // as sent (methods are case-sensitive)
  std::string_view target;       // visible ASCII, not validated further
};

struct ResponseHead : Head {
  int status = 0;           // 100-999
  std::string_view reason;  // may be empty
};

// Parses the head at the start of `buf` (everything buffered so far of this message; up to 8
// empty lines before a request line are skipped, RFC 9112 2.2). Returns Error::none with `out`
// filled and out.head_bytes set; need_more while the empty line ending the head has not arrived
// and buf.size() <= max_head_bytes; header_too_large once more than max_head_bytes are there
// without one (or the head is longer). A bare LF is refused as soon as it is seen.
// `scanned` makes repeated calls on a growing buffer cheap: start it at 0 for a new message and
// pass it again (with the same buffer start) after need_more; the search for the end of the head
// then resumes where it stopped. `out` is only meaningful after Error::none.
Error parse_request_head(std::string_view buf, std::size_t max_head_bytes, RequestHead& out,
                         std::size_t& scanned) noexcept;
Error parse_response_head(std::string_view buf, std::size_t max_head_bytes, ResponseHead& out,
                          std::size_t& scanned) noexcept;
inline Error parse_request_head(std::string_view buf, std::size_t max_head_bytes, RequestHead& out) noexcept {
  std::size_t scanned = 0;
  return parse_request_head(buf, max_head_bytes, out, scanned);
}
inline Error parse_response_head(std::string_view buf, std::size_t max_head_bytes, ResponseHead& out) noexcept {
  std::size_t scanned = 0;
  return parse_response_head(buf, max_head_bytes, out, scanned);
}

// Whether a Connection field of `h` names the field `field_name` (ASCII case-insensitive): such a
// field is hop-by-hop (RFC 9110 7.6.1). Cheap to skip when !h.connection_names_other.
bool connection_names(const Head& h, std::string_view field_name) noexcept;

// How the body after a head is framed.
enum class BodyKind : std::uint8_t {
  none,         // no body
  length,       // exactly `length` bytes
  chunked,      // a chunked body: ChunkedDecoder
  until_close,  // a response read until the upstream closes (the connection cannot be reused)
  unsupported,  // a Transfer-Encoding other than chunked: the length cannot be known
                // (a request: 501 and close; a response: 502 and close)
};
struct BodyFraming {
  BodyKind kind = BodyKind::none;
  std::uint64_t length = 0;  // for BodyKind::length
};
// RFC 9112 6.3 for a request: chunked, Content-Length, or none.
BodyFraming request_body(const RequestHead& h) noexcept;
// RFC 9112 6.3 for a response: none after HEAD and for 1xx, 204, 304; then chunked,
// Content-Length, or until the connection closes.
BodyFraming response_body(const ResponseHead& h, bool request_was_head) noexcept;

// Decodes a chunked body (RFC 9112 7.1) incrementally as bytes arrive, without allocating:
// payload comes back as views into the input. Chunk extensions are skipped; the trailer section
// is checked line by line and skipped (its fields are never returned: they are not part of the
// head and must not become headers). The bytes after the final CRLF are left unconsumed: they
// belong to the next message.
class ChunkedDecoder {
 public:
  static constexpr std::size_t kMaxChunkLine = 4096;  // a chunk-size line with its extensions

  // max_body: payload bytes allowed in all (body_too_large beyond); max_trailer: bytes allowed
  // in the trailer section (header_too_large beyond).
  explicit ChunkedDecoder(std::uint64_t max_body = UINT64_MAX, std::size_t max_trailer = 8192) noexcept
      : max_body_(max_body), max_trailer_(max_trailer) {}

  // Ready for a new body, with the same limits.
  void reset() noexcept;

  // Consumes framing bytes from `in` up to and including at most one run of chunk data, which
  // `data` then views (empty if none). Returns the bytes consumed: all of `in` unless the body
  // ended (done()), an error was found (error()), or a run of data was returned. Call again
  // with the rest.
  std::size_t next(std::string_view in, std::string_view& data) noexcept;

  // Consumes as much of `in` as belongs to the body, calling sink(const char*, std::size_t) for
  // each run of payload. Returns the bytes consumed.
  template <class Sink>
  std::size_t decode(std::string_view in, Sink&& sink) {
    std::size_t used = 0;
    while (used < in.size() && !done() && error_ == Error::none) {
      std::string_view data;
      used += next(in.substr(used), data);
      if (!data.empty()) sink(data.data(), data.size());
    }
    return used;
  }

  bool done() const noexcept { return state_ == State::done; }
  // Error::none while the body is fine so far (need more or done); else bad_chunk,
  // body_too_large or header_too_large (trailer section over its limit).
  Error error() const noexcept { return error_; }
  std::uint64_t body_bytes() const noexcept { return body_; }

 private:
  enum class State : std::uint8_t {
    size,          // chunk-size hex digits
    size_bws,      // whitespace after the size: a ';' must follow
    ext,           // chunk extensions up to CR (skipped)
    size_lf,       // the LF of the chunk-size line
    data,          // chunk data
    data_cr,       // CR after the data
    data_lf,       // LF after the data
    trailer_line,  // start of a trailer line, or the final CRLF
    trailer_name,  // a trailer field name up to ':'
    trailer_value, // a trailer field value up to CR
    trailer_lf,    // the LF of a trailer line
    final_lf,      // the LF of the final CRLF
    done,
    failed,
  };
  std::size_t fail(Error e, std::size_t consumed) noexcept {
    error_ = e;
    state_ = State::failed;
    return consumed;
  }
  // One byte of a chunk-size line (size, whitespace, extensions); false: not a chunk line.
  bool size_line_byte(unsigned char c) noexcept;
  // One byte of a trailer field line (its LF included); false: not a field line.
  bool trailer_byte(unsigned char c) noexcept;

  std::uint64_t max_body_;
  std::size_t max_trailer_;
  std::uint64_t body_ = 0;       // payload bytes so far
  std::uint64_t remaining_ = 0;  // chunk size, then bytes of it left
  std::size_t line_ = 0;         // bytes of the current chunk-size line, or of the trailer section
  State state_ = State::size;
  bool digits_ = false;          // a hex digit seen on this chunk-size line
  Error error_ = Error::none;
};

}  // namespace tollgate::proxy::http1

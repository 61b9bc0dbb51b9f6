// Internal to the proxy: HTTP/1.1 message plumbing over Beast shared by the client session and the
// upstream side (parsing from a connection's buffer under one deadline, hop-by-hop fields, heads
// written as one string).
#pragma once

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <string>

namespace tollgate::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using std::chrono::milliseconds;

inline auto with(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline deadline_after(milliseconds timeout) { return std::chrono::steady_clock::now() + timeout; }

constexpr std::size_t kReadChunk = 16 * 1024;

inline bool is_idempotent(http::verb v) {
  switch (v) {
    case http::verb::get: case http::verb::head: case http::verb::options:
    case http::verb::put: case http::verb::delete_: case http::verb::trace:
      return true;
    default:
      return false;
  }
}

// Hop-by-hop headers (RFC 9110 7.6.1) plus any header the Connection field names. One pass over
// the fields erases what is there by its position (no lookup by name); most messages carry only
// `Connection: keep-alive`, and then nothing else is looked up.
template <class Fields>
void strip_hop_by_hop(Fields& f, bool keep_transfer_encoding) {
  std::string named;  // the Connection fields' values: the other fields they name go too
  for (auto it = f.begin(); it != f.end();) {
    bool hop = false;
    switch (it->name()) {
      case http::field::connection:
        named.append(it->value().data(), it->value().size()).push_back(',');
        hop = true;
        break;
      case http::field::keep_alive: case http::field::proxy_connection: case http::field::te:
      case http::field::trailer: case http::field::upgrade: case http::field::proxy_authorization:
      case http::field::proxy_authenticate:
        hop = true;
        break;
      case http::field::transfer_encoding:
        hop = !keep_transfer_encoding;
        break;
      default:
        break;
    }
    it = hop ? f.erase(it) : std::next(it);
  }
  if (named.empty()) return;
  for (auto const& token : http::token_list{named}) {
    // "close" names no field, and "keep-alive" one that is gone already.
    if (beast::iequals(token, "close") || beast::iequals(token, "keep-alive")) continue;
    f.erase(token);
  }
}

// Feeds the bytes already buffered to the parser and reads more only when it needs them, until
// `done(parser)` holds. Parsing straight from the buffer saves an async round trip per message.
// One deadline for the whole part, not one per read: a peer trickling a byte at a time
// (slowloris) is cut off when the part's time is up.
template <class Stream, class Parser, class Done>
net::awaitable<beast::error_code> parse_until(Stream& stream, beast::flat_buffer& buffer, Parser& p, Done done,
                                              Deadline deadline) {
  beast::error_code ec;
  for (;;) {
    if (buffer.size() > 0) {
      const std::size_t used = p.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) ec = {};
      if (ec) co_return ec;
      if (done(p)) co_return ec;
      if (used > 0 && buffer.size() > 0) continue;
    }
    if (stream.timed_out()) co_return beast::error::timeout;
    stream.start(deadline);
    const std::size_t n = co_await stream.async_read_some(buffer.prepare(kReadChunk), with(ec));
    stream.end(ec);
    if (ec == net::error::eof && p.got_some()) {
      p.put_eof(ec);  // a body delimited by the peer closing; otherwise partial_message
      if (!ec && done(p)) co_return ec;
      if (!ec) ec = http::error::partial_message;
    }
    if (ec) co_return ec;
    buffer.commit(n);
  }
}

// Writes a message head ("start line\r\n" + fields + "\r\n") the simple way: one string, so the
// head and a buffered body leave in one gathered write.
template <class Fields>
void append_fields(std::string& out, const Fields& fields) {
  for (const auto& f : fields) {
    out.append(f.name_string().data(), f.name_string().size());
    out.append(": ", 2);
    out.append(f.value().data(), f.value().size());
    out.append("\r\n", 2);
  }
  out.append("\r\n", 2);
}

inline std::string request_head(const http::request<http::string_body>& req) {
  std::string out;
  out.reserve(512);
  const auto method = req.method_string();
  out.append(method.data(), method.size());
  out.push_back(' ');
  out.append(req.target().data(), req.target().size());
  out.append(" HTTP/1.1\r\n", 11);
  append_fields(out, req.base());
  return out;
}

inline std::string response_head(const http::response<http::string_body>& res) {
  std::string out;
  out.reserve(512);
  out.append(res.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ", 9);
  out.append(std::to_string(res.result_int()));
  out.push_back(' ');
  const auto reason = res.reason().empty() ? http::obsolete_reason(res.result()) : res.reason();
  out.append(reason.data(), reason.size());
  out.append("\r\n", 2);
  append_fields(out, res.base());
  return out;
}

// Fields a parser added after the head (a chunked body's trailer section): they were never part of
// the request's header and must not become headers upstream (an X-Forwarded-For or a Host could be
// smuggled in that way).
template <class Fields>
void drop_trailers(Fields& fields, std::size_t head_fields) {
  auto it = fields.begin();
  for (std::size_t i = 0; i < head_fields && it != fields.end(); ++i) ++it;
  while (it != fields.end()) it = fields.erase(it);
}

}  // namespace tollgate::proxy

// Internal to the proxy: what the client session and the upstream side share to move HTTP/1.1
// messages: the Asio names, reads into a connection's buffer under a deadline, status reasons and
// the methods that may be sent twice. Messages are parsed by proxy/http1 (views into the buffer)
// and their heads written as one string each, so a head and a buffered body leave in one write.
#pragma once

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <boost/asio.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "tollgate/proxy/http1.hpp"

namespace tollgate::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using std::chrono::milliseconds;

inline auto with(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline deadline_after(milliseconds timeout) { return std::chrono::steady_clock::now() + timeout; }

constexpr std::size_t kReadChunk = 16 * 1024;

inline std::string_view view(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

// The standard reason phrase of a status ("Not Found"); "" for a code it does not know.
std::string_view reason_of(int status);

inline bool is_idempotent(http1::Method m) {
  switch (m) {
    case http1::Method::get: case http1::Method::head: case http1::Method::options:
    case http1::Method::put: case http1::Method::delete_: case http1::Method::trace:
      return true;
    default:
      return false;
  }
}

inline void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ", 2);
  out.append(value);
  out.append("\r\n", 2);
}

// "HTTP/1.<minor> <status> <reason>\r\n"
void append_status_line(std::string& out, unsigned version, int status, std::string_view reason);

}  // namespace tollgate::proxy

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
#include <cstring>
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

// "name: value" CR LF. One resize and two copies rather than four appends, each with its own
// capacity check and call (bench/instructions.sh, T1: ~50 instructions per field).
inline void append_field(std::string& out, std::string_view name, std::string_view value) {
  const std::size_t at = out.size();
  out.resize(at + name.size() + value.size() + 4);
  char* p = out.data() + at;
  if (!name.empty()) std::memcpy(p, name.data(), name.size());
  p += name.size();
  p[0] = ':';
  p[1] = ' ';
  p += 2;
  if (!value.empty()) std::memcpy(p, value.data(), value.size());
  p += value.size();
  p[0] = '\r';
  p[1] = '\n';
}

// Appends the fields of a parsed head that go on: a run of fields whose lines are adjacent in
// the parsed buffer and written as append_field would write them ("Name: value" CR LF) goes as one
// copy of their bytes; any other field as append_field. The output is byte for byte what
// append_field per field gives (bench/instructions.sh: ~4 appends per field saved on the proxied
// path). Fields must be views into the buffer their head was parsed from.
class FieldRun {
 public:
  void add(std::string& out, const http1::Field& f) {
    const char* const name = f.name.data();
    const char* const value = f.value.data();
    const bool as_written = value == name + f.name.size() + 2 && name[f.name.size() + 1] == ' ' &&
                            value[f.value.size()] == '\r';
    if (!as_written) {
      flush(out);
      append_field(out, f.name, f.value);
      return;
    }
    if (name != end_) {
      flush(out);
      begin_ = name;
    }
    end_ = value + f.value.size() + 2;
  }
  void flush(std::string& out) {
    if (begin_ != end_) out.append(begin_, static_cast<std::size_t>(end_ - begin_));
    begin_ = end_ = nullptr;
  }

 private:
  const char* begin_ = nullptr;
  const char* end_ = nullptr;
};

// "HTTP/1.<minor> <status> <reason>\r\n"
void append_status_line(std::string& out, unsigned version, int status, std::string_view reason);

}  // namespace tollgate::proxy

#include "http_io.hpp"

#include <boost/beast/http/status.hpp>

namespace tollgate::proxy {

std::string_view reason_of(int status) {
  const auto s = boost::beast::http::int_to_status(static_cast<unsigned>(status));
  if (s == boost::beast::http::status::unknown) return {};
  return boost::beast::http::obsolete_reason(s);
}

void append_status_line(std::string& out, unsigned version, int status, std::string_view reason) {
  out.append(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ", 9);
  char digits[3] = {static_cast<char>('0' + status / 100 % 10), static_cast<char>('0' + status / 10 % 10),
                    static_cast<char>('0' + status % 10)};
  out.append(digits, 3);
  out.push_back(' ');
  out.append(reason);
  out.append("\r\n", 2);
}

}  // namespace tollgate::proxy

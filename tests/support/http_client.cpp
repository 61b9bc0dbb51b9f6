#include <cerrno>
#include <utility>

#include "support/http_client.hpp"
#include "support/http_message.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace tollgate::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

using detail::build_request;
using detail::to_response;

std::vector<HttpResponse> concurrent_requests_to(const std::string& host, int port, const HttpRequest& r, int n,
                                                 std::chrono::milliseconds timeout) {
  net::io_context ctx;
  std::vector<std::unique_ptr<beast::tcp_stream>> streams;
  std::vector<HttpResponse> out(static_cast<std::size_t>(n));
  const tcp::endpoint ep(net::ip::make_address(host), static_cast<unsigned short>(port));
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<beast::tcp_stream>(ctx);
    beast::error_code ec;
    s->socket().connect(ep, ec);
    if (ec) out[static_cast<std::size_t>(i)].error = ec.message();
    else s->socket().set_option(tcp::no_delay(true));
    streams.push_back(std::move(s));
  }
  auto req = build_request(r, host);
  for (int i = 0; i < n; ++i) {
    if (!out[static_cast<std::size_t>(i)].error.empty()) continue;
    beast::error_code ec;
    http::write(*streams[static_cast<std::size_t>(i)], req, ec);
    if (ec) out[static_cast<std::size_t>(i)].error = ec.message();
  }
  for (int i = 0; i < n; ++i) {
    auto& o = out[static_cast<std::size_t>(i)];
    if (!o.error.empty()) continue;
    auto& s = *streams[static_cast<std::size_t>(i)];
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    s.socket().set_option(net::socket_base::receive_buffer_size(1 << 20));
    // Blocking read with a deadline: SO_RCVTIMEO on the socket.
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    setsockopt(s.socket().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    beast::error_code ec;
    http::read(s.socket(), buf, res, ec);
    if (ec) {
      o.error = ec.message();
      continue;
    }
    o = to_response(res);
  }
  return out;
}

}  // namespace

std::vector<HttpResponse> concurrent_requests(int port, const HttpRequest& r, int n, std::chrono::milliseconds timeout) {
  return concurrent_requests_to("127.0.0.1", port, r, n, timeout);
}

HttpResponse http_request(int port, const HttpRequest& req, std::chrono::milliseconds timeout) {
  return concurrent_requests_to("127.0.0.1", port, req, 1, timeout).at(0);
}

HttpResponse http_request(const std::string& host, int port, const HttpRequest& req, std::chrono::milliseconds timeout) {
  return concurrent_requests_to(host, port, req, 1, timeout).at(0);
}

int connect_loopback(int port, const SocketOptions& options) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (options.receive_buffer > 0)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options.receive_buffer, sizeof options.receive_buffer);
  if (options.send_buffer > 0)
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.send_buffer, sizeof options.send_buffer);
  if (options.send_timeout.count() > 0) {
    const auto ms = options.send_timeout.count();
    const timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  if (options.source_address != nullptr) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    if (::inet_pton(AF_INET, options.source_address, &from.sin_addr) != 1 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  ::close(fd);
  return -1;
}

int send_all(int fd, std::string_view bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return n < 0 ? errno : EPIPE;
    sent += static_cast<std::size_t>(n);
  }
  return 0;
}

bool readable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

RawConnection::RawConnection(int port, const std::string& bytes) {
  fd_ = connect_loopback(port);
  if (fd_ >= 0 && !bytes.empty()) (void)!::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

void RawConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string raw_exchange(int port, const std::string& bytes, std::chrono::milliseconds timeout) {
  // Plain POSIX with poll(): the deadline holds whatever the server does (Asio's blocking reads
  // would wait past SO_RCVTIMEO).
  std::string out;
  const int fd = connect_loopback(port);
  if (fd < 0) return out;
  (void)send_all(fd, bytes);  // cut short or not, what the server answered is read below
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (!readable(fd, left)) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace tollgate::testing

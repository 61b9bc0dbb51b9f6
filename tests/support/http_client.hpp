// A blocking HTTP/1.1 client for end-to-end tests (Beast stays in the .cpp).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (connection failed or closed)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string error;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpRequest {
  std::string method = "GET";
  std::string target = "/";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// One request on a new connection.
HttpResponse http_request(int port, const HttpRequest& req,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10));
inline HttpResponse http_get(int port, const std::string& target) { return http_request(port, {"GET", target, {}, {}}); }
// The same to another loopback address (a server bound to 127.0.0.2, say).
HttpResponse http_request(const std::string& host, int port, const HttpRequest& req,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Opens `n` connections, then sends one request on each back to back, then reads every answer:
// the requests reach the server as close together as the client can make them.
std::vector<HttpResponse> concurrent_requests(int port, const HttpRequest& req, int n,
                                              std::chrono::milliseconds timeout = std::chrono::seconds(10));

// What connect_loopback sets on the socket before connecting; the defaults leave it as the
// kernel makes it.
struct SocketOptions {
  // Its receive buffer (> 0): set before connecting, so the window the peer sees is small too.
  int receive_buffer = 0;
  // Its send buffer (> 0), fixed: the kernel doubles the value and no longer grows it, so what
  // a send accepted and the peer has not received yet stays under twice this.
  int send_buffer = 0;
  // How long a blocking send may wait for room before it fails with EAGAIN (0: for ever).
  std::chrono::milliseconds send_timeout{0};
  // Another loopback address to connect from ("127.0.0.2"), bound before connecting; null: the
  // kernel's choice (127.0.0.1).
  const char* source_address = nullptr;
};

// A connected TCP socket to 127.0.0.1:port (blocking), or -1.
int connect_loopback(int port, const SocketOptions& options = {});

// Sends every byte of `bytes` on a blocking socket: 0 when they all went, otherwise the errno of
// the send that failed (EPIPE for a connection that took nothing more).
int send_all(int fd, std::string_view bytes);

// Whether `fd` has something to read (bytes, or the end of the connection) within `timeout`.
bool readable(int fd, std::chrono::milliseconds timeout);

// A raw TCP connection that sends `bytes` (if any) and stays open until close() or destruction.
class RawConnection {
 public:
  explicit RawConnection(int port, const std::string& bytes = "");
  ~RawConnection() { close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  void close();

 private:
  int fd_ = -1;
};

// Writes raw bytes and returns what came back until the server closed or the timeout passed.
std::string raw_exchange(int port, const std::string& bytes, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace tollgate::testing

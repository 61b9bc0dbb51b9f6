// The hostile upstream (tests/support/hostile_upstream.cpp) as a child process, and a raw
// HTTP/1.1 client that sees exactly what the gateway sends: interim responses, framing, closes.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/http_client.hpp"
#include "support/process.hpp"
#include "support/tls.hpp"

namespace tollgate::testing {

// TOLLGATE_HOSTILE_TLS=1 (a ctest entry of its own): the hostile upstream speaks TLS and the
// gateway reaches it over https://, verified against the test CA; the same tests then prove the
// same guarantees over TLS.
inline bool hostile_over_tls() {
  const char* v = std::getenv("TOLLGATE_HOSTILE_TLS");
  return v != nullptr && std::string(v) == "1";
}

struct HostileUpstream {
  std::unique_ptr<Process> proc;
  int port = -1;
  explicit HostileUpstream(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{TOLLGATE_HOSTILE_BIN, "--port", "0"};
    if (hostile_over_tls()) argv.insert(argv.end(), {"--tls-cert", test_pki().server_cert, "--tls-key", test_pki().server_key});
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(argv);
    if (auto line = proc->wait_for_line("listening on", std::chrono::seconds(10))) port = port_from_line(*line);
  }
  // Its control endpoints, over TLS when it speaks TLS.
  HttpResponse control(const std::string& target) const {
    return hostile_over_tls() ? https_get(port, target) : http_get(port, target);
  }
  nlohmann::json stats() const { return nlohmann::json::parse(control("/__stats").body); }
  nlohmann::json about(const std::string& id) const { return nlohmann::json::parse(control("/__count?id=" + id).body); }
  // Points the config's upstream `name` at it (https:// and the test CA over TLS).
  void into(nlohmann::json& config, const std::string& name = "ibe") const {
    if (!hostile_over_tls()) return;
    config["upstreams"][name]["url"] = "https://localhost:" + std::to_string(port);
    config["upstreams"][name]["tls"] = {{"ca_file", test_pki().ca}};
  }
  // How many times a request with this X-Request-Id reached the upstream.
  int count(const std::string& id) const { return about(id)["count"].get<int>(); }
};

// One response as the client saw it.
struct Reply {
  int status = 0;                              // 0: no complete response (see error)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string error;  // why there is no complete response: "timeout", "closed", "malformed: ..."
  int interim = 0;    // 1xx responses (other than 101) that came before this one
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
  bool has(const std::string& lower_name) const { return headers.count(lower_name) > 0; }
  std::string echo_id() const { return header("x-echo-id"); }
};

// "METHOD target HTTP/1.1" with Host, X-Request-Id, the extra fields and a Content-Length body.
inline std::string request_text(const std::string& method, const std::string& target, const std::string& id,
                                const std::vector<std::pair<std::string, std::string>>& fields = {},
                                const std::string& body = "") {
  std::string out = method + " " + target + " HTTP/1.1\r\nHost: gateway.test\r\nX-Request-Id: " + id + "\r\n";
  for (const auto& [k, v] : fields) out += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH")
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return out + "\r\n" + body;
}

// A blocking keep-alive client on plain POSIX sockets: every read has a deadline (poll), so a
// response that never comes is reported as "timeout", never a hang. It reconnects on the next
// send after the server closed or said it would close.
class RawClient {
 public:
  explicit RawClient(int port) : port_(port) {}
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool send(const std::string& bytes) {
    if (must_reconnect_) close();
    if (fd_ < 0) {
      fd_ = connect_loopback(port_);
      if (fd_ < 0) return false;
      ++connects_;
      in_.clear();
    }
    return send_all(fd_, bytes) == 0;
  }

  // Reads one final response (1xx other than 101 are counted and skipped, as a client must).
  Reply read(bool head_request = false, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Reply r;
    if (fd_ < 0) {
      r.error = "not connected";
      return r;
    }
    for (;;) {
      std::size_t end;
      while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
        if (!fill(deadline, r)) return r;
      }
      const std::string head = in_.substr(0, end + 2);
      if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12 || !std::isdigit(static_cast<unsigned char>(head[9])) ||
          !std::isdigit(static_cast<unsigned char>(head[10])) || !std::isdigit(static_cast<unsigned char>(head[11]))) {
        r.error = "malformed: " + in_.substr(0, 80);
        close();
        return r;
      }
      in_.erase(0, end + 4);
      const int status = std::atoi(head.substr(9, 3).c_str());
      std::map<std::string, std::string> headers;
      for (std::size_t at = head.find("\r\n") + 2; at < head.size();) {
        const auto nl = head.find("\r\n", at);
        const std::string line = head.substr(at, nl - at);
        at = nl + 2;
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string name = line.substr(0, colon);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::size_t v = colon + 1;
        while (v < line.size() && line[v] == ' ') ++v;
        headers[name] = line.substr(v);
      }
      if (status >= 100 && status < 200 && status != 101) {
        ++r.interim;
        continue;
      }
      r.headers = std::move(headers);
      const bool no_body = head_request || status == 204 || status == 304 || status == 101;
      if (no_body) {
      } else if (r.header("transfer-encoding").find("chunked") != std::string::npos) {
        if (!read_chunked(deadline, r)) return r;
      } else if (r.has("content-length")) {
        const std::size_t n = std::strtoull(r.header("content-length").c_str(), nullptr, 10);
        while (in_.size() < n)
          if (!fill(deadline, r)) return r;
        r.body = in_.substr(0, n);
        in_.erase(0, n);
      } else {  // delimited by the close
        Reply ignored;
        while (fill(deadline, ignored)) {}
        if (ignored.error == "timeout") {
          r.error = "timeout";
          return r;
        }
        r.body = std::move(in_);
        in_.clear();
        close();
      }
      r.status = status;
      // The server said it closes: the next send opens a new connection (closed_by_peer() can
      // still watch this one close).
      if (r.header("connection").find("close") != std::string::npos) must_reconnect_ = true;
      return r;
    }
  }

  Reply exchange(const std::string& method, const std::string& target, const std::string& id,
                 const std::vector<std::pair<std::string, std::string>>& fields = {}, const std::string& body = "",
                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (!send(request_text(method, target, id, fields, body))) {
      Reply r;
      r.error = "send failed";
      close();
      return r;
    }
    return read(method == "HEAD", timeout);
  }

  // Waits until the buffered bytes hold a complete head and at least `body_bytes` more; false at
  // the deadline or on close.
  bool wait_for_body_bytes(std::size_t body_bytes, std::chrono::steady_clock::time_point deadline) {
    Reply ignored;
    for (;;) {
      const auto end = in_.find("\r\n\r\n");
      if (end != std::string::npos && in_.size() >= end + 4 + body_bytes) return true;
      if (!fill(deadline, ignored)) return false;
    }
  }

  // True when the server closes the connection within `timeout` without sending anything more.
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    if (fd_ < 0) return true;
    Reply r;
    const bool more = fill(std::chrono::steady_clock::now() + timeout, r);
    return !more && r.error == "closed" && in_.empty();
  }

  bool connected() const { return fd_ >= 0; }
  int connects() const { return connects_; }
  const std::string& unread() const { return in_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    must_reconnect_ = false;
  }

 private:
  bool fill(std::chrono::steady_clock::time_point deadline, Reply& r) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0 || !readable(fd_, std::chrono::milliseconds(left))) {
      r.error = "timeout";
      return false;
    }
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      r.error = "closed";
      return false;
    }
    in_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  bool read_chunked(std::chrono::steady_clock::time_point deadline, Reply& r) {
    auto line = [&](std::string& out) {
      std::size_t at;
      while ((at = in_.find("\r\n")) == std::string::npos)
        if (!fill(deadline, r)) return false;
      out = in_.substr(0, at);
      in_.erase(0, at + 2);
      return true;
    };
    std::string l;
    for (;;) {
      if (!line(l)) return false;
      const std::size_t size = std::strtoull(l.c_str(), nullptr, 16);
      if (size == 0) break;
      while (in_.size() < size + 2)
        if (!fill(deadline, r)) return false;
      r.body.append(in_, 0, size);
      in_.erase(0, size + 2);
    }
    do {  // trailer section, up to the empty line
      if (!line(l)) return false;
    } while (!l.empty());
    return true;
  }

  int port_;
  int fd_ = -1;
  int connects_ = 0;
  bool must_reconnect_ = false;
  std::string in_;
};

}  // namespace tollgate::testing

// tollgate-hostile-upstream --port P [--host H] [--idle-close-ms N] [--tls-cert F --tls-key F]
// An upstream that misbehaves on request, for end-to-end tests of the gateway's upstream side.
// Plain POSIX sockets, one thread per connection, a small hand-written HTTP/1.1 parser (request
// heads, Content-Length and chunked bodies with trailers): no Beast, so it builds in seconds.
//
// Every genuine response names the request it answers: the request's `X-Request-Id` (or
// `anon-N`) is echoed in an `X-Echo-Id` header and in the JSON body (`"id":"..."`). Responses the
// upstream sends that answer no request (unsolicited, surplus, fake) carry ids of their own
// (`unsolicited-N`, `surplus-N`, `headbody-N`), never the current request's.
//
// The behaviour is chosen per request by the query parameter `do`:
//   (none)            a normal 200 with the id; HEAD: the same head, no body
//   extra-glued       the response and an unsolicited second response in the same write
//   extra-idle        the response; then, after `after_ms` (20) and only if no byte of a new
//                     request has arrived, an unsolicited response (GET /__count says if it went)
//   hints             103 Early Hints, a pause of `ms` (50), then the response
//   continue-glued    100 Continue and the response in the same write
//   continue-later    100 Continue, a pause of `ms` (50), then the response
//   long-body         a Content-Length covering the genuine body only, then a complete fake
//                     response in the same write
//   close-after-idle  the response; the connection is closed if idle for `ms` (200)
//   drop              read the request, close without answering
//   drop-once         `drop` the first time an id is seen, a normal answer after that
//   drip              a `size` (200) byte Content-Length body, `chunk` (10) bytes every `every` (100) ms
//   slow-chunked      a chunked body: a chunk every `every` (200) ms for `for` (1500) ms; the body is
//                     "id=<id>;part-1;...;part-N;done"
//   switch            an unrequested 101 Switching Protocols, then other-protocol bytes, then close
//   no-content-length 204 with Content-Length: 5 and 5 bytes after the head
//   not-modified      304 with ETag and the Content-Length of the representation, no body
//   status000         status 000 with a small body
//   head-body         HEAD answered with its head AND a body (a complete fake response)
//   no-read           the response as soon as the head is read, then the body is read and dropped
//   no-read-close     the response (Connection: close) as soon as the head is read, then close
//                     with the body unread
//   close             the response with Connection: close, then close
//   echo              the request as JSON: method, target, headers, trailers, body size
//   claim-origin      a normal 200 that also says X-Tollgate-Origin: gateway (which only the
//                     gateway may say of its own answers)
// `delay=MS` (any behaviour) waits before answering.
//
// Control (never counted): GET /__count?id=X -> {"id":X,"count":N,"after":"sent|skipped|"} (how
// often a request with that id arrived; what extra-idle did after it), GET /__stats ->
// {"total":N,"connections":N,"idle_closed":N,"unsolicited":N}.
// --idle-close-ms N closes any keep-alive connection idle for N ms (an upstream keep-alive timeout).
// --tls-cert F --tls-key F: the same misbehaviour over TLS (OpenSSL on the same sockets: what is
// glued in one write here goes in one record; a close is a close without close_notify).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

int g_idle_close_ms = 0;
SSL_CTX* g_tls = nullptr;  // --tls-cert: every connection is TLS

struct Stats {
  std::mutex mu;
  std::map<std::string, int> counts;
  std::map<std::string, std::string> after;  // extra-idle: "sent" or "skipped"
  long total = 0;
  long connections = 0;
  long idle_closed = 0;
  long unsolicited = 0;
};
Stats g_stats;
std::atomic<long> g_serial{0};  // numbers for anonymous requests and fake responses

using Fields = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method, target, path, version;
  Fields headers;
  Fields trailers;
  std::string body;
  std::string id;
  std::string header(const std::string& lower) const {
    for (const auto& [k, v] : headers) {
      std::string n = k;
      for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (n == lower) return v;
    }
    return {};
  }
  std::string param(const std::string& key) const {
    const auto q = target.find('?');
    if (q == std::string::npos) return {};
    std::string rest = target.substr(q + 1);
    std::size_t at = 0;
    while (at <= rest.size()) {
      const auto amp = rest.find('&', at);
      const std::string kv = rest.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
      const auto eq = kv.find('=');
      if (kv.substr(0, eq) == key) return eq == std::string::npos ? "1" : kv.substr(eq + 1);
      if (amp == std::string::npos) break;
      at = amp + 1;
    }
    return {};
  }
  int int_param(const std::string& key, int def) const {
    const std::string v = param(key);
    return v.empty() ? def : std::atoi(v.c_str());
  }
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_pairs(const Fields& fields) {
  std::string out = "[";
  for (const auto& [k, v] : fields) {
    if (out.size() > 1) out += ",";
    out += '[';
    out += json_string(k);
    out += ',';
    out += json_string(v);
    out += ']';
  }
  return out + "]";
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// One client connection of the upstream: the socket and the bytes read but not yet parsed.
struct Conn {
  int fd;
  std::string in;

  SSL* ssl = nullptr;  // TLS (blocking) on fd

  // Waits up to `timeout_ms` (-1: forever) for bytes or the peer's close; true if any arrived.
  bool readable(int timeout_ms) const {
    if (!in.empty() || (ssl && SSL_pending(ssl) > 0)) return true;
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) > 0;
  }
  // Reads what is there (waiting for it); false on close or error.
  bool fill() {
    char buf[16384];
    const ssize_t n = ssl ? SSL_read(ssl, buf, sizeof buf) : ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  bool send_all(const std::string& bytes) const {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ssl ? SSL_write(ssl, bytes.data() + sent, static_cast<int>(bytes.size() - sent))
                            : ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  std::optional<std::string> line() {  // up to CRLF, which is consumed
    for (;;) {
      const auto at = in.find("\r\n");
      if (at != std::string::npos) {
        std::string l = in.substr(0, at);
        in.erase(0, at + 2);
        return l;
      }
      if (in.size() > 65536 || !fill()) return std::nullopt;
    }
  }
  bool take(std::size_t n, std::string* into) {
    while (in.size() < n)
      if (!fill()) return false;
    if (into) into->append(in, 0, n);
    in.erase(0, n);
    return true;
  }
};

std::optional<Request> read_head(Conn& c) {
  std::size_t end;
  while ((end = c.in.find("\r\n\r\n")) == std::string::npos) {
    if (c.in.size() > 65536 || !c.fill()) return std::nullopt;
  }
  const std::string head = c.in.substr(0, end + 2);
  c.in.erase(0, end + 4);
  Request r;
  std::size_t at = head.find("\r\n");
  const std::string start = head.substr(0, at);
  const auto sp1 = start.find(' '), sp2 = start.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return std::nullopt;
  r.method = start.substr(0, sp1);
  r.target = start.substr(sp1 + 1, sp2 - sp1 - 1);
  r.version = start.substr(sp2 + 1);
  r.path = r.target.substr(0, r.target.find('?'));
  at += 2;
  while (at < head.size()) {
    const auto nl = head.find("\r\n", at);
    const std::string l = head.substr(at, nl - at);
    at = nl + 2;
    const auto colon = l.find(':');
    if (colon == std::string::npos) return std::nullopt;
    r.headers.emplace_back(l.substr(0, colon), trim(l.substr(colon + 1)));
  }
  return r;
}

// The body by Content-Length or chunked framing; a chunked body's trailer fields are kept apart.
bool read_body(Conn& c, Request& r) {
  if (lower(r.header("transfer-encoding")).find("chunked") != std::string::npos) {
    for (;;) {
      const auto size_line = c.line();
      if (!size_line) return false;
      const std::size_t size = std::strtoul(size_line->c_str(), nullptr, 16);
      if (size == 0) break;
      if (!c.take(size, &r.body) || !c.take(2, nullptr)) return false;
    }
    for (;;) {
      const auto l = c.line();
      if (!l) return false;
      if (l->empty()) return true;
      const auto colon = l->find(':');
      if (colon != std::string::npos) r.trailers.emplace_back(l->substr(0, colon), trim(l->substr(colon + 1)));
    }
  }
  const std::string cl = r.header("content-length");
  return cl.empty() || c.take(std::strtoull(cl.c_str(), nullptr, 10), &r.body);
}

std::string head_of(int status, const std::string& reason, const std::string& id, std::size_t length,
                    const std::string& extra = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\nX-Echo-Id: " + id +
         "\r\nContent-Length: " + std::to_string(length) + "\r\n" + extra + "\r\n";
}

std::string genuine_body(const Request& r, const std::string& behaviour, int n) {
  return "{\"id\":" + json_string(r.id) + ",\"do\":" + json_string(behaviour) + ",\"method\":" + json_string(r.method) +
         ",\"n\":" + std::to_string(n) + "}";
}

// A complete response that answers no request; `kind` names where it came from.
std::string fake_response(const std::string& kind) {
  const std::string id = kind + "-" + std::to_string(++g_serial);
  const std::string body = "{\"id\":" + json_string(id) + "}";
  return head_of(200, "OK", id, body.size()) + body;
}

std::string control(const Request& r) {
  std::lock_guard lock(g_stats.mu);
  if (r.path == "/__count") {
    const std::string id = r.param("id");
    const auto it = g_stats.counts.find(id);
    const auto after = g_stats.after.find(id);
    return "{\"id\":" + json_string(id) + ",\"count\":" + std::to_string(it == g_stats.counts.end() ? 0 : it->second) +
           ",\"after\":" + json_string(after == g_stats.after.end() ? "" : after->second) + "}";
  }
  return "{\"total\":" + std::to_string(g_stats.total) + ",\"connections\":" + std::to_string(g_stats.connections) +
         ",\"idle_closed\":" + std::to_string(g_stats.idle_closed) + ",\"unsolicited\":" + std::to_string(g_stats.unsolicited) +
         "}";
}

// Answers one request; false when the connection is to be closed.
bool answer(Conn& c, Request& r) {
  const std::string behaviour = r.param("do");
  const bool head = r.method == "HEAD";
  int n;
  {
    std::lock_guard lock(g_stats.mu);
    n = ++g_stats.counts[r.id];
    ++g_stats.total;
  }
  if (const int delay = r.int_param("delay", 0); delay > 0) sleep_ms(delay);
  const bool client_close = lower(r.header("connection")).find("close") != std::string::npos;
  const std::string body = genuine_body(r, behaviour, n);
  const std::string normal = head_of(200, "OK", r.id, body.size(), client_close ? "Connection: close\r\n" : "") +
                             (head ? "" : body);

  if (behaviour == "extra-glued") {
    {
      std::lock_guard lock(g_stats.mu);
      ++g_stats.unsolicited;
    }
    return c.send_all(normal + fake_response("unsolicited")) && !client_close;
  }
  if (behaviour == "extra-idle") {
    if (!c.send_all(normal)) return false;
    const bool busy = c.readable(r.int_param("after_ms", 20));
    if (!busy && !c.send_all(fake_response("unsolicited"))) return false;
    std::lock_guard lock(g_stats.mu);
    g_stats.after[r.id] = busy ? "skipped" : "sent";
    if (!busy) ++g_stats.unsolicited;
    return !client_close;
  }
  if (behaviour == "hints" || behaviour == "continue-later") {
    const std::string interim = behaviour == "hints"
                                    ? "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
                                    : "HTTP/1.1 100 Continue\r\n\r\n";
    if (!c.send_all(interim)) return false;
    sleep_ms(r.int_param("ms", 50));
    return c.send_all(normal) && !client_close;
  }
  if (behaviour == "continue-glued") return c.send_all("HTTP/1.1 100 Continue\r\n\r\n" + normal) && !client_close;
  if (behaviour == "long-body") {
    std::string out = head_of(200, "OK", r.id, body.size());
    if (!head) out += body;
    return c.send_all(out + fake_response("surplus")) && !client_close;
  }
  if (behaviour == "close-after-idle") {
    if (!c.send_all(normal) || client_close) return false;
    return c.readable(r.int_param("ms", 200));
  }
  if (behaviour == "drop" || (behaviour == "drop-once" && n == 1)) return false;
  if (behaviour == "drip") {
    const std::size_t size = static_cast<std::size_t>(r.int_param("size", 200));
    const std::size_t chunk = static_cast<std::size_t>(std::max(1, r.int_param("chunk", 10)));
    std::string text = "{\"id\":" + json_string(r.id) + ",\"pad\":\"";
    if (text.size() + 2 < size) text += std::string(size - text.size() - 2, 'x');
    text += "\"}";
    if (!c.send_all(head_of(200, "OK", r.id, text.size()))) return false;
    if (head) return true;
    for (std::size_t at = 0; at < text.size(); at += chunk) {
      if (at > 0) sleep_ms(r.int_param("every", 100));
      if (!c.send_all(text.substr(at, chunk))) return false;
    }
    return !client_close;
  }
  if (behaviour == "slow-chunked") {
    const int every = std::max(1, r.int_param("every", 200));
    const int parts = std::max(1, r.int_param("for", 1500) / every);
    if (!c.send_all("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Echo-Id: " + r.id +
                    "\r\nTransfer-Encoding: chunked\r\n\r\n"))
      return false;
    if (head) return true;
    auto chunk = [](const std::string& data) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", data.size());
      return size + data + "\r\n";
    };
    if (!c.send_all(chunk("id=" + r.id + ";"))) return false;
    for (int i = 1; i <= parts; ++i) {
      sleep_ms(every);
      if (!c.send_all(chunk("part-" + std::to_string(i) + ";"))) return false;
    }
    return c.send_all(chunk("done") + "0\r\n\r\n") && !client_close;
  }
  if (behaviour == "switch") {
    if (!c.send_all("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: hostile/1\r\nX-Echo-Id: " + r.id +
                    "\r\n\r\n"))
      return false;
    sleep_ms(50);
    c.send_all("bytes of another protocol, answering nothing");
    return false;
  }
  if (behaviour == "no-content-length") {
    return c.send_all("HTTP/1.1 204 No Content\r\nX-Echo-Id: " + r.id + "\r\nContent-Length: 5\r\n\r\nabcde") && !client_close;
  }
  if (behaviour == "not-modified") {
    return c.send_all("HTTP/1.1 304 Not Modified\r\nX-Echo-Id: " + r.id + "\r\nETag: \"v1\"\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n") &&
           !client_close;
  }
  if (behaviour == "status000") {
    return c.send_all("HTTP/1.1 000 Zero\r\nX-Echo-Id: " + r.id + "\r\nContent-Length: 2\r\n\r\nok") && !client_close;
  }
  if (behaviour == "head-body" && head) {
    const std::string fake = fake_response("headbody");
    return c.send_all(head_of(200, "OK", r.id, fake.size()) + fake) && !client_close;
  }
  if (behaviour == "close") {
    c.send_all(head_of(200, "OK", r.id, body.size(), "Connection: close\r\n") + (head ? "" : body));
    return false;
  }
  if (behaviour == "claim-origin")
    return c.send_all(head_of(200, "OK", r.id, body.size(), "X-Tollgate-Origin: gateway\r\n") + (head ? "" : body)) &&
           !client_close;
  if (behaviour == "echo") {
    const std::string text = "{\"id\":" + json_string(r.id) + ",\"method\":" + json_string(r.method) +
                             ",\"target\":" + json_string(r.target) + ",\"headers\":" + json_pairs(r.headers) +
                             ",\"trailers\":" + json_pairs(r.trailers) + ",\"body_size\":" + std::to_string(r.body.size()) +
                             "}";
    return c.send_all(head_of(200, "OK", r.id, text.size(), client_close ? "Connection: close\r\n" : "") +
                      (head ? "" : text)) &&
           !client_close;
  }
  return c.send_all(normal) && !client_close;
}

void serve(int fd) {
  Conn c{fd, {}, nullptr};
  if (g_tls) {
    c.ssl = SSL_new(g_tls);
    SSL_set_fd(c.ssl, fd);
    if (SSL_accept(c.ssl) != 1) {
      SSL_free(c.ssl);
      ::close(fd);
      return;
    }
  }
  for (;;) {
    if (g_idle_close_ms > 0 && !c.readable(g_idle_close_ms)) {
      std::lock_guard lock(g_stats.mu);
      ++g_stats.idle_closed;
      break;
    }
    auto r = read_head(c);
    if (!r) break;
    r->id = r->header("x-request-id");
    if (r->id.empty()) r->id = "anon-" + std::to_string(++g_serial);
    if (r->path.rfind("/__", 0) == 0) {
      if (!read_body(c, *r)) break;
      const std::string text = control(*r);
      if (!c.send_all(head_of(200, "OK", "control", text.size()) + text)) break;
      continue;
    }
    if (r->param("do") == "no-read" || r->param("do") == "no-read-close") {
      // Answer before reading the body; then either read and drop it so that the connection stays
      // usable, or close with the body unread (the kernel answers the rest with a reset).
      const bool close_now = r->param("do") == "no-read-close";
      int n;
      {
        std::lock_guard lock(g_stats.mu);
        n = ++g_stats.counts[r->id];
        ++g_stats.total;
      }
      const std::string body = genuine_body(*r, r->param("do"), n);
      if (!c.send_all(head_of(200, "OK", r->id, body.size(), close_now ? "Connection: close\r\n" : "") +
                      (r->method == "HEAD" ? "" : body)) ||
          close_now || !read_body(c, *r))
        break;
      continue;
    }
    if (!read_body(c, *r)) break;
    if (!answer(c, *r)) break;
  }
  if (c.ssl) SSL_free(c.ssl);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", cert, key;
  int port = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (a == "--host" && i + 1 < argc) host = argv[++i];
    else if (a == "--idle-close-ms" && i + 1 < argc) g_idle_close_ms = std::atoi(argv[++i]);
    else if (a == "--tls-cert" && i + 1 < argc) cert = argv[++i];
    else if (a == "--tls-key" && i + 1 < argc) key = argv[++i];
    else {
      std::fprintf(stderr, "usage: tollgate-hostile-upstream [--host H] [--port P] [--idle-close-ms N] "
                           "[--tls-cert F --tls-key F]\n");
      return 2;
    }
  }
  if (!cert.empty()) {
    g_tls = SSL_CTX_new(TLS_server_method());
    if (SSL_CTX_use_certificate_chain_file(g_tls, cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(g_tls, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      std::fprintf(stderr, "hostile-upstream: cannot load %s / %s\n", cert.c_str(), key.c_str());
      return 1;
    }
    // Writes as the plain mode does them: a partial write is finished by send_all.
    SSL_CTX_set_mode(g_tls, SSL_MODE_ENABLE_PARTIAL_WRITE);
  }
  ::signal(SIGPIPE, SIG_IGN);
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, SOMAXCONN) != 0) {
    std::fprintf(stderr, "hostile-upstream: cannot listen on %s:%d: %s\n", host.c_str(), port, std::strerror(errno));
    return 1;
  }
  socklen_t len = sizeof addr;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("hostile-upstream: listening on %s:%d\n", host.c_str(), ntohs(addr.sin_port));
  std::fflush(stdout);
  for (;;) {
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) sleep_ms(10);
        continue;
      }
      return 1;
    }
    // Pieces written apart (a 1xx, then the response; a drip) leave at once as separate segments.
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    {
      std::lock_guard lock(g_stats.mu);
      ++g_stats.connections;
    }
    std::thread(serve, fd).detach();
  }
}

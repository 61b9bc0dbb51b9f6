#include "tollgate/app/probe.hpp"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <string>

#include "tollgate/proxy/tls_context.hpp"

namespace tollgate::app {

namespace {

using proxy::TlsClientProfile;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Connects to the first address of host:port that answers within `timeout_ms`; says which.
int connect_to(const config::UpstreamConfig& u, int timeout_ms, std::string& where, std::string& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(u.host.c_str(), std::to_string(u.port).c_str(), &hints, &res); rc != 0) {
    error = std::string("cannot resolve ") + u.host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
    ::getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
    where = std::string(host) + ":" + port;
    const int s = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) continue;
    if (::connect(s, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      error = "connect " + where + ": " + std::strerror(errno);
      ::close(s);
      continue;
    }
    pollfd p{s, POLLOUT, 0};
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (::poll(&p, 1, timeout_ms) != 1 || ::getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
      error = "connect " + where + ": " + (soerr ? std::strerror(soerr) : "timed out");
      ::close(s);
      continue;
    }
    fd = s;
  }
  ::freeaddrinfo(res);
  return fd;
}

// Drives a non-blocking SSL call until it completes or `timeout_ms` passes.
template <class F>
int drive(SSL* ssl, int fd, int timeout_ms, F call) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ERR_clear_error();
    const int r = call();
    if (r > 0) return r;
    const int e = SSL_get_error(ssl, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return r;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) return 0;
    pollfd p{fd, static_cast<short>(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    if (::poll(&p, 1, static_cast<int>(left)) != 1) return 0;
  }
}

std::string subject_of(X509* cert) {
  char buf[512] = {};
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
  return proxy::escape_cert_text(buf);  // a supplier's certificate may hold terminal escapes
}

std::string date_of(std::int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// One TLS connection with the upstream's profile. Returns the session it got (to resume with
// next), and whether this one was resumed.
struct Attempt {
  bool ok = false;
  bool resumed = false;
  SSL_SESSION* session = nullptr;
};

Attempt tls_once(const config::UpstreamConfig& u, const TlsClientProfile& profile, int timeout_ms, SSL_SESSION* resume,
                 std::ostream& out, bool report) {
  Attempt a;
  std::string where, error;
  Fd fd{connect_to(u, timeout_ms, where, error)};
  if (fd.fd < 0) {
    out << "  FAILED: " << error << "\n";
    return a;
  }
  proxy::TlsSessionCache sessions;
  SSL* ssl = profile.new_connection(fd.fd, resume, &sessions);
  const int r = drive(ssl, fd.fd, timeout_ms, [ssl] { return SSL_connect(ssl); });
  if (r <= 0) {
    const proxy::TlsFailure f = proxy::describe_tls_failure(ssl, ERR_peek_last_error());
    out << "  FAILED: " << where << ": TLS: " << (r == 0 && f.reason == "handshake" ? "handshake timed out" : f.words)
        << " (" << f.reason << ")\n";
    SSL_free(ssl);
    return a;
  }
  a.ok = true;
  a.resumed = SSL_session_reused(ssl) == 1;
  if (report) {
    out << "  connected to " << where << "\n"
        << "  " << SSL_get_version(ssl) << ", cipher " << SSL_get_cipher_name(ssl) << "\n";
    STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl);
    out << "  chain:";
    for (int i = 0; chain && i < sk_X509_num(chain); ++i) out << (i ? "\n         " : " ") << subject_of(sk_X509_value(chain, i));
    out << "\n";
    X509* leaf = SSL_get0_peer_certificate(ssl);
    if (profile.insecure()) {
      out << "  name: NOT CHECKED (tls.insecure_skip_verify is true)\n";
    } else {
      out << "  name: " << profile.server_name() << " matched (certificate is for ";
      const auto names = proxy::certificate_names(leaf);
      for (std::size_t i = 0; i < names.size(); ++i) out << (i ? ", " : "") << names[i];
      out << ")\n";
    }
    const std::int64_t not_after = proxy::certificate_not_after(leaf);
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    out << "  expires " << date_of(not_after) << " (" << (not_after - now) / 86400 << " days)\n";
    if (profile.has_client_cert())
      out << "  client certificate expires " << date_of(profile.client_cert_not_after()) << " ("
          << (profile.client_cert_not_after() - now) / 86400 << " days)\n";
  }
  // TLS 1.3 tickets come after the handshake: read briefly so that they arrive (no request is
  // sent; the read ends on the timeout). A supplier that checks the client certificate after the
  // handshake (TLS 1.3) sends its refusal here: every request would get that 502, so it fails.
  char c;
  if (const int r = drive(ssl, fd.fd, 300, [ssl, &c] { return SSL_read(ssl, &c, 1); });
      r <= 0 && SSL_get_error(ssl, r) == SSL_ERROR_SSL) {
    const proxy::TlsFailure f = proxy::describe_tls_failure(ssl, ERR_peek_last_error());
    out << "  FAILED: " << where << ": TLS: " << f.words << " (" << f.reason << ")\n";
    a.ok = false;
    SSL_free(ssl);
    return a;
  }
  a.session = sessions.take(profile.generation());
  SSL_shutdown(ssl);
  SSL_free(ssl);
  return a;
}

}  // namespace

int probe_upstreams(const config::GatewayConfig& cfg, std::ostream& out) {
  int failed = 0;
  for (const config::UpstreamConfig& each : cfg.upstreams) {
    for (const config::UpstreamTarget& t : each.targets) {
      // Every URL of the upstream in turn (its TLS profile is the upstream's: one name is checked).
      config::UpstreamConfig u = each;
      u.url = t.url;
      u.host = t.host;
      u.port = t.port;
      const int timeout_ms = static_cast<int>(u.connect_timeout_ms ? u.connect_timeout_ms : cfg.proxy.connect_timeout_ms);
      out << "upstream " << u.name << " (" << u.url << ")\n";
      if (!u.https) {
        std::string where, error;
        Fd fd{connect_to(u, timeout_ms, where, error)};
        if (fd.fd < 0) {
          out << "  FAILED: " << error << "\n";
          ++failed;
        } else {
          out << "  plain HTTP: connected to " << where << "\n";
        }
        continue;
      }
      std::shared_ptr<const TlsClientProfile> profile;
      try {
        profile = TlsClientProfile::load(each);
      } catch (const std::exception& e) {
        out << "  FAILED: " << e.what() << "\n";
        ++failed;
        continue;
      }
      Attempt first = tls_once(u, *profile, timeout_ms, nullptr, out, true);
      if (!first.ok) {
        ++failed;
        continue;
      }
      Attempt second = tls_once(u, *profile, timeout_ms, first.session, out, false);
      out << "  second connection resumed the session: " << (second.ok && second.resumed ? "yes" : "no") << "\n";
      if (first.session) SSL_SESSION_free(first.session);
      if (second.session) SSL_SESSION_free(second.session);
    }
  }
  out << (failed ? std::to_string(failed) + " upstream(s) failed\n" : "every upstream answered\n");
  return failed ? 1 : 0;
}

}  // namespace tollgate::app

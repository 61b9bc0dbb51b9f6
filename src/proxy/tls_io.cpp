#include "tls_io.hpp"

#include <boost/asio/ssl/error.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

namespace tollgate::proxy {

namespace {

// OpenSSL's error queue must be empty before an SSL call whose failure is then read with
// SSL_get_error. Emptying an empty queue is not free (ERR_clear_error frees every slot, and with
// jemalloc free(NULL) costs ~45 instructions, ~2k per call): only when something is there.
inline void clear_errors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

// What an SSL call that returned `ret` <= 0 means: an error, or which way to wait (want_read /
// want_write set). eof for a close_notify, stream_truncated for a close without one.
beast::error_code classify(SSL* ssl, int ret, bool& want_read, bool& want_write) {
  want_read = want_write = false;
  const int e = SSL_get_error(ssl, ret);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      want_read = true;
      return {};
    case SSL_ERROR_WANT_WRITE:
      want_write = true;
      return {};
    case SSL_ERROR_ZERO_RETURN:
      return net::error::eof;
    case SSL_ERROR_SYSCALL: {
      const int err = errno;
      ERR_clear_error();
      if (err == 0) return net::ssl::error::stream_truncated;  // the peer closed without close_notify
      return beast::error_code(err, boost::system::system_category());
    }
    default: {
      const unsigned long code = ERR_peek_last_error();
      ERR_clear_error();
      if (ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) return net::ssl::error::stream_truncated;
      return beast::error_code(static_cast<int>(code), net::error::get_ssl_category());
    }
  }
}

// Waits until the socket can be read or written (cancelled by the deadline tick).
net::awaitable<beast::error_code> wait_for(TimedSocket& s, bool want_read) {
  beast::error_code ec;
  co_await s.socket().async_wait(want_read ? tcp::socket::wait_read : tcp::socket::wait_write, with(ec));
  co_return ec;
}

}  // namespace

bool is_tls_error(const beast::error_code& ec) { return ec.category() == net::error::get_ssl_category(); }

net::awaitable<beast::error_code> tls_handshake(TimedSocket& s) {
  SSL* ssl = s.tls();
  for (;;) {
    clear_errors();
    errno = 0;
    const int r = SSL_do_handshake(ssl);
    if (r == 1) co_return beast::error_code();
    bool rd, wr;
    beast::error_code ec = classify(ssl, r, rd, wr);
    if (ec == net::ssl::error::stream_truncated) ec = net::error::eof;
    if (ec) co_return ec;
    if ((ec = co_await wait_for(s, rd))) co_return ec;
  }
}

// Nothing buffered in OpenSSL and nothing on the socket: a failed SSL_read would only say so, at
// several times the cost of this peek.
bool nothing_to_read(SSL* ssl, int fd) {
  if (SSL_has_pending(ssl)) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

net::awaitable<std::size_t> tls_read(TimedSocket& s, net::mutable_buffer into, beast::error_code& ec) {
  SSL* ssl = s.tls();
  const int fd = s.socket().native_handle();
  for (;;) {
    if (nothing_to_read(ssl, fd)) {
      if ((ec = co_await wait_for(s, true))) co_return 0;
    }
    clear_errors();
    errno = 0;
    std::size_t n = 0;
    if (SSL_read_ex(ssl, into.data(), into.size(), &n) == 1) co_return n;
    bool rd, wr;
    if ((ec = classify(ssl, 0, rd, wr))) co_return 0;
    if ((ec = co_await wait_for(s, rd))) co_return 0;
  }
}

// Writes `size` bytes with SSL_write; `n` grows by what went.
net::awaitable<beast::error_code> write_bytes(TimedSocket& s, const char* p, std::size_t size, std::size_t& n) {
  SSL* ssl = s.tls();
  while (size > 0) {
    clear_errors();
    errno = 0;
    std::size_t w = 0;
    if (SSL_write_ex(ssl, p, size, &w) == 1) {
      p += w;
      size -= w;
      n += w;
      continue;
    }
    bool rd, wr;
    if (beast::error_code ec = classify(ssl, 0, rd, wr)) co_return ec;
    if (beast::error_code ec = co_await wait_for(s, rd)) co_return ec;
  }
  co_return beast::error_code();
}

net::awaitable<std::size_t> tls_write(TimedSocket& s, net::const_buffer first, net::const_buffer second,
                                      beast::error_code& ec) {
  std::size_t n = 0;
  // Each SSL_write makes at least one record: two buffers that together fit a record are joined
  // so that a response head and its small body leave as one record, one send.
  if (second.size() > 0 && first.size() + second.size() <= 16 * 1024) {
    // The frame's own copy: a write that waits keeps it while other connections write.
    std::string joined;
    joined.reserve(first.size() + second.size());
    joined.append(static_cast<const char*>(first.data()), first.size());
    joined.append(static_cast<const char*>(second.data()), second.size());
    ec = co_await write_bytes(s, joined.data(), joined.size(), n);
    co_return n;
  }
  if ((ec = co_await write_bytes(s, static_cast<const char*>(first.data()), first.size(), n))) co_return n;
  ec = co_await write_bytes(s, static_cast<const char*>(second.data()), second.size(), n);
  co_return n;
}

bool tls_quiet(SSL* ssl) {
  char c;
  for (;;) {
    clear_errors();
    errno = 0;
    std::size_t n = 0;
    if (SSL_read_ex(ssl, &c, 1, &n) == 1) return false;  // application data nobody asked for
    const int e = SSL_get_error(ssl, 0);
    if (e == SSL_ERROR_WANT_READ) return true;  // tickets or nothing: the connection is usable
    ERR_clear_error();
    return false;  // close_notify, a close, or an error
  }
}

void tls_close(SSL* ssl) {
  ERR_clear_error();
  if (SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN) return;
  if (!SSL_is_init_finished(ssl)) return;
  SSL_shutdown(ssl);
  ERR_clear_error();
}

}  // namespace tollgate::proxy

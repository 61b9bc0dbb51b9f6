#include "timed_socket.hpp"

#include <array>
#include <openssl/ssl.h>

#include "tls_io.hpp"

namespace tollgate::proxy {

TimedSocket::TimedSocket(tcp::socket s, Timeouts& t) : sock_(std::move(s)), timeouts_(&t) { t.add(this); }
TimedSocket::TimedSocket(const net::any_io_executor& ex, Timeouts& t) : sock_(ex), timeouts_(&t) { t.add(this); }
TimedSocket::~TimedSocket() {
  if (timeouts_) timeouts_->remove(this);
  if (tls_) {
    // Freed without a close_notify exchange, OpenSSL would mark the session unresumable; the
    // next connection to the same upstream could then not resume it. A session a fatal alert
    // ended was already dropped when the alert went.
    SSL_set_shutdown(tls_, SSL_get_shutdown(tls_) | SSL_SENT_SHUTDOWN);
    SSL_free(tls_);
  }
}

void TimedSocket::set_tls(ssl_st* ssl) {
  if (tls_) SSL_free(tls_);
  tls_ = ssl;
}

Timeouts::~Timeouts() {
  for (TimedSocket* s = head_; s != nullptr; s = s->next_) s->timeouts_ = nullptr;
}

net::awaitable<std::size_t> read_some(TimedSocket& stream, net::mutable_buffer into, beast::error_code& ec) {
  if (stream.tls()) return tls_read(stream, into, ec);
  return stream.socket().async_read_some(into, with(ec));
}

net::awaitable<std::size_t> write_both(TimedSocket& stream, net::const_buffer first, net::const_buffer second,
                                      beast::error_code& ec) {
  if (stream.tls()) return tls_write(stream, first, second, ec);
  return net::async_write(stream.socket(), std::array<net::const_buffer, 2>{first, second}, with(ec));
}

net::awaitable<beast::error_code> read_more(TimedSocket& stream, beast::flat_buffer& buffer, Clock::time_point deadline,
                                           std::size_t chunk) {
  beast::error_code ec;
  if (stream.timed_out()) co_return beast::error_code(beast::error::timeout);
  stream.start(deadline);
  const std::size_t n = co_await read_some(stream, buffer.prepare(chunk), ec);
  stream.end(ec);
  if (!ec) buffer.commit(n);
  co_return ec;
}

void Timeouts::add(TimedSocket* s) {
  s->next_ = head_;
  if (head_) head_->prev_ = s;
  head_ = s;
}

void Timeouts::remove(TimedSocket* s) {
  if (s->prev_) s->prev_->next_ = s->next_;
  else head_ = s->next_;
  if (s->next_) s->next_->prev_ = s->prev_;
}

net::awaitable<void> Timeouts::run() {
  net::steady_timer timer(co_await net::this_coro::executor);
  for (;;) {
    timer.expires_after(kTick);
    beast::error_code ec;
    co_await timer.async_wait(with(ec));
    if (ec) co_return;
    const auto now = Clock::now();
    for (TimedSocket* s = head_; s != nullptr; s = s->next_) {
      // Past its deadline in an operation: cancelled, and again at each tick while it stays in one
      // (an operation the connection starts after the first cancel is cut off too).
      if (s->deadline_ > now) continue;
      s->timed_out_ = true;
      s->sock_.cancel(ec);  // the pending operation ends with operation_aborted, reported as timeout
    }
  }
}

}  // namespace tollgate::proxy

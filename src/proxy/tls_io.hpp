// Internal to the proxy: TLS on a TimedSocket. OpenSSL reads and writes the socket's descriptor
// itself (non-blocking, as nginx does: no memory BIOs, no copies); when it needs the peer, the
// coroutine waits for readiness through Asio, under the socket's deadline. The handshakes, the
// reads and the writes of the client session and the upstream side all come through here.
#pragma once

#include "timed_socket.hpp"

namespace tollgate::proxy {

// Runs the handshake of the SSL the socket holds (client or server side, as the SSL was made)
// under the socket's current deadline. Errors: OpenSSL's (net::error::get_ssl_category()), the
// socket's, or eof when the peer closed during it.
net::awaitable<beast::error_code> tls_handshake(TimedSocket& s);

// One read of at most `into.size()` bytes; returns what came, `ec` how it failed.
net::awaitable<std::size_t> tls_read(TimedSocket& s, net::mutable_buffer into, beast::error_code& ec);

// Writes all of `first` and `second`; returns how much went, `ec` how it failed.
net::awaitable<std::size_t> tls_write(TimedSocket& s, net::const_buffer first, net::const_buffer second,
                                      beast::error_code& ec);

// On an idle pooled connection, without blocking: processes what arrived (TLS 1.3 session
// tickets and the like). True when nothing but such records came; false when application data,
// a close_notify, a close or an error did (the connection must not be reused).
bool tls_quiet(ssl_st* ssl);

// Sends close_notify if it fits the socket buffer now (never waits for the peer's).
void tls_close(ssl_st* ssl);

// True when `ec` came from OpenSSL (a TLS alert or protocol failure), not from the socket.
bool is_tls_error(const beast::error_code& ec);

}  // namespace tollgate::proxy

// Internal to the proxy: timeouts as nginx keeps them. A connection's deadline is a number, set
// when an operation starts and cleared when it ends: two stores, where a timer armed and cancelled
// around every read and write (Beast's tcp_stream) cost two trips through the reactor's timer queue
// and its lock. One timer per worker ticks every kTick and cancels the pending operations of the
// connections whose deadline has passed; they then report beast::error::timeout. A deadline is
// honoured up to one tick late; a caller's own deadline, which may be a few milliseconds away, is
// kept to the timer's precision by a DeadlineCut.
#pragma once

#include <chrono>
#include <memory>

#include "http_io.hpp"

struct ssl_st;

namespace tollgate::proxy {

using Clock = std::chrono::steady_clock;
inline constexpr auto kTick = std::chrono::milliseconds(100);
inline constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

class Timeouts;

class TimedSocket {
 public:
  TimedSocket(tcp::socket s, Timeouts& t);
  TimedSocket(const net::any_io_executor& ex, Timeouts& t);
  ~TimedSocket();
  TimedSocket(const TimedSocket&) = delete;
  TimedSocket& operator=(const TimedSocket&) = delete;

  tcp::socket& socket() { return sock_; }
  net::any_io_executor get_executor() { return sock_.get_executor(); }

  // TLS on this connection (proxy/tls_io): the SSL it owns from then on, reading and writing the
  // socket's descriptor itself. Null: plain TCP.
  ssl_st* tls() const { return tls_; }
  void set_tls(ssl_st* ssl);

  // Around one operation (or a group of them): the deadline is in force between start and end.
  void start(Clock::time_point deadline) { deadline_ = deadline; }
  // Ends the operation; an error it ended with because the deadline passed becomes timeout (so
  // does any later one: a connection that timed out is done).
  void end(beast::error_code& ec) {
    deadline_ = kNoDeadline;
    if (timed_out_) ec = beast::error::timeout;
  }
  bool timed_out() const { return timed_out_; }
  // Times the connection out now: the operation in progress (or the next) ends with timeout.
  void expire();

  // AsyncReadStream / AsyncWriteStream, so that Beast's algorithms run on it directly.
  using executor_type = net::any_io_executor;
  template <class Buffers, class Token>
  auto async_read_some(const Buffers& b, Token&& t) {
    return sock_.async_read_some(b, std::forward<Token>(t));
  }
  template <class Buffers, class Token>
  auto async_write_some(const Buffers& b, Token&& t) {
    return sock_.async_write_some(b, std::forward<Token>(t));
  }

 private:
  friend class Timeouts;
  tcp::socket sock_;
  ssl_st* tls_ = nullptr;
  Timeouts* timeouts_;  // null once the worker's list is gone
  Clock::time_point deadline_ = kNoDeadline;
  bool timed_out_ = false;
  TimedSocket* prev_ = nullptr;  // the worker's list of connections
  TimedSocket* next_ = nullptr;
};

// One read into `into`, plain or TLS, as an awaitable; `ec` says how it failed. On the plain path
// it is the socket's own operation, with no coroutine frame of its own (these run a few times per
// request). A TLS peer's close_notify reads as eof, a close without it as
// net::ssl::error::stream_truncated.
net::awaitable<std::size_t> read_some(TimedSocket& stream, net::mutable_buffer into, beast::error_code& ec);

// All of `first` then `second`, likewise; the result is how many bytes went (0: nothing reached
// the peer). Over TLS, two that fit one record go as one (Asio writes no scatter/gather there).
net::awaitable<std::size_t> write_both(TimedSocket& stream, net::const_buffer first, net::const_buffer second,
                                      beast::error_code& ec);

// Reads what has arrived (up to `chunk` bytes) into `buffer` under `deadline`: the one read of the
// client session and the upstream side. A connection that timed out before is not read again.
net::awaitable<beast::error_code> read_more(TimedSocket& stream, beast::flat_buffer& buffer, Clock::time_point deadline,
                                           std::size_t chunk = kReadChunk);

// A caller's deadline on the upstream side, kept to the timer's precision rather than the tick:
// armed when the request goes upstream, it times out the connection it watches (the one being
// opened, written or awaited) at the deadline. It must watch no connection once the response head
// is in, before that connection can go back to the pool. Costs a timer for requests with a budget
// only.
class DeadlineCut {
 public:
  DeadlineCut(const net::any_io_executor& ex, Clock::time_point at);
  ~DeadlineCut();
  DeadlineCut(const DeadlineCut&) = delete;
  DeadlineCut& operator=(const DeadlineCut&) = delete;
  void watch(TimedSocket* s) { state_->target = s; }  // null: none
  // Whether the deadline passed while a connection was watched (what timed it out, if it did).
  bool fired() const { return state_->fired; }

 private:
  struct State {
    TimedSocket* target = nullptr;
    bool fired = false;
  };
  // Shared with the timer's handler, which may already be queued when the cut goes.
  std::shared_ptr<State> state_;
  net::steady_timer timer_;
};

// The connections of one worker (one thread) and the tick that enforces their deadlines.
class Timeouts {
 public:
  Timeouts() = default;
  Timeouts(Timeouts&& other) noexcept : head_(other.head_) { other.head_ = nullptr; }
  Timeouts& operator=(Timeouts&&) = delete;
  // The worker goes before the io_context that still holds suspended sessions (their frames are
  // destroyed with it): the sockets still listed forget this list, so they do not unlink from it.
  ~Timeouts();
  // Runs on the worker's io_context until the context stops.
  net::awaitable<void> run();

 private:
  friend class TimedSocket;
  void add(TimedSocket* s);
  void remove(TimedSocket* s);
  TimedSocket* head_ = nullptr;
};

}  // namespace tollgate::proxy

// A caller's deadline on the upstream side (DeadlineCut): it ends the watched connection's
// operation at the deadline, by itself (no worker tick runs in these tests, so nothing else can),
// and it never touches a connection it no longer watches.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <chrono>
#include <memory>

#include "proxy/timed_socket.hpp"

namespace tollgate::proxy {
namespace {

using namespace std::chrono_literals;

// A connected pair on loopback: `ours` is timed, `peer` is the other end.
struct Pair {
  net::io_context ctx;
  Timeouts timeouts;
  std::unique_ptr<TimedSocket> ours;
  tcp::socket peer{ctx};
  Pair() {
    tcp::acceptor acceptor(ctx, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    tcp::socket client(ctx);
    client.connect(acceptor.local_endpoint());
    peer = acceptor.accept();
    ours = std::make_unique<TimedSocket>(std::move(client), timeouts);
  }
};

// Runs one read on `ours` (no deadline of its own) while `cut` may end it; a guard timer stops the
// test from hanging if nothing does. Returns the read's outcome and when it ended.
struct ReadOutcome {
  beast::error_code ec;
  Clock::time_point ended{};
};
ReadOutcome read_once(Pair& p) {
  ReadOutcome out;
  beast::flat_buffer buffer;
  net::co_spawn(
      p.ctx,
      [&]() -> net::awaitable<void> {
        out.ec = co_await read_more(*p.ours, buffer, kNoDeadline);
        out.ended = Clock::now();
        p.ctx.stop();
      },
      net::detached);
  net::steady_timer guard(p.ctx, 5s);
  guard.async_wait([&](beast::error_code ec) {
    if (!ec) p.ctx.stop();
  });
  p.ctx.run();
  return out;
}

TEST(DeadlineCut, EndsTheWatchedOperationAtTheDeadline) {
  Pair p;
  const Clock::time_point at = Clock::now() + 5ms;
  DeadlineCut cut(p.ctx.get_executor(), at);
  cut.watch(p.ours.get());
  const ReadOutcome r = read_once(p);
  EXPECT_EQ(r.ec, beast::error::timeout) << r.ec.message();
  EXPECT_TRUE(cut.fired());
  EXPECT_GE(r.ended, at);  // not before its deadline
  EXPECT_LT(r.ended, at + 4s);  // and not the guard
  EXPECT_TRUE(p.ours->timed_out());
}

TEST(DeadlineCut, LeavesAConnectionItNoLongerWatchesAlone) {
  Pair p;
  DeadlineCut cut(p.ctx.get_executor(), Clock::now() + 5ms);
  cut.watch(p.ours.get());
  cut.watch(nullptr);  // e.g. the response head is in and the connection may go back to the pool
  net::steady_timer later(p.ctx, 50ms);
  later.async_wait([&](beast::error_code) { net::write(p.peer, net::buffer("x", 1)); });
  const ReadOutcome r = read_once(p);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_FALSE(cut.fired());
  EXPECT_FALSE(p.ours->timed_out());
}

TEST(DeadlineCut, GoneBeforeItsDeadlineItCutsNothing) {
  Pair p;
  {
    DeadlineCut cut(p.ctx.get_executor(), Clock::now() + 5ms);
    cut.watch(p.ours.get());
  }
  net::steady_timer later(p.ctx, 50ms);
  later.async_wait([&](beast::error_code) { net::write(p.peer, net::buffer("x", 1)); });
  const ReadOutcome r = read_once(p);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_FALSE(p.ours->timed_out());
}

}  // namespace
}  // namespace tollgate::proxy

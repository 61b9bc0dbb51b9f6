// TimedSocket::expire and DeadlineCut (timed_socket.hpp). A file of their own: in timed_socket.cpp
// their timer code made GCC compile the Asio templates that file shares with the request path
// (the awaitable machinery the linker then took from it) with other inlining, which cost ~320
// instructions per request (bench/instructions.sh, T0).
#include "timed_socket.hpp"

namespace tollgate::proxy {

void TimedSocket::expire() {
  timed_out_ = true;
  beast::error_code ec;
  sock_.cancel(ec);  // the pending operation ends with operation_aborted, reported as timeout
}

DeadlineCut::DeadlineCut(const net::any_io_executor& ex, Clock::time_point at)
    : state_(std::make_shared<State>()), timer_(ex) {
  timer_.expires_at(at);
  timer_.async_wait([state = state_](const beast::error_code& ec) {
    if (ec || state->target == nullptr) return;
    state->fired = true;
    state->target->expire();
  });
}

DeadlineCut::~DeadlineCut() {
  state_->target = nullptr;
  timer_.cancel();
}

}  // namespace tollgate::proxy

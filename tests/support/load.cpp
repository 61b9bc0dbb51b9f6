#include <utility>

#include "support/load.hpp"

#include <algorithm>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <thread>

namespace tollgate::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// One keep-alive client: GETs `target` from 127.0.0.1:port, connecting again after an error or a
// close; each read gives up after `read_timeout`.
class KeepAliveGet {
 public:
  struct Answer {
    int status = 0;      // 0: no answer (see detail)
    std::string detail;  // the error, or the start of a body other than 200's
    bool connect_failed = false;
  };
  KeepAliveGet(int port, const std::string& target, std::chrono::seconds read_timeout, bool no_delay,
               const Fields& fields = {})
      : port_(port), read_timeout_(read_timeout), no_delay_(no_delay), req_{http::verb::get, target, 11} {
    req_.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : fields) req_.set(name, value);
  }
  Answer get() {
    beast::error_code ec;
    if (!sock_) {
      sock_ = std::make_unique<tcp::socket>(ctx_);
      sock_->connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)}, ec);
      if (ec) {
        sock_.reset();
        return {0, "connect: " + ec.message(), true};
      }
      if (no_delay_) sock_->set_option(tcp::no_delay(true), ec);
      timeval tv{static_cast<time_t>(read_timeout_.count()), 0};
      setsockopt(sock_->native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      buf_.clear();
    }
    http::write(*sock_, req_, ec);
    http::response<http::string_body> res;
    if (!ec) http::read(*sock_, buf_, res, ec);
    if (ec) {
      sock_.reset();
      return {0, ec.message(), false};
    }
    Answer a{static_cast<int>(res.result_int()), res.result_int() != 200 ? res.body().substr(0, 300) : std::string(), false};
    if (!res.keep_alive()) sock_.reset();
    return a;
  }

 private:
  int port_;
  std::chrono::seconds read_timeout_;
  bool no_delay_;
  net::io_context ctx_;
  std::unique_ptr<tcp::socket> sock_;
  beast::flat_buffer buf_;
  http::request<http::empty_body> req_;
};

}  // namespace

LoadResult run_load(const std::vector<int>& ports, const std::string& target, int clients_per_port,
                    std::chrono::milliseconds duration, std::chrono::milliseconds pause_after_reject,
                    const Fields& fields) {
  LoadResult result;
  std::mutex mu;
  const auto deadline = std::chrono::steady_clock::now() + duration;
  std::vector<std::thread> threads;
  for (int port : ports) {
    for (int c = 0; c < clients_per_port; ++c) {
      threads.emplace_back([&, port] {
        std::map<int, int> local;
        KeepAliveGet client(port, target, std::chrono::seconds(5), false, fields);
        while (std::chrono::steady_clock::now() < deadline) {
          const KeepAliveGet::Answer a = client.get();
          ++local[a.status];
          if (a.connect_failed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          if (a.status == 429 || a.status == 503) std::this_thread::sleep_for(pause_after_reject);
        }
        std::lock_guard lock(mu);
        for (const auto& [s, n] : local) result.statuses[s] += n;
      });
    }
  }
  for (auto& t : threads) t.join();
  return result;
}

LoadResult paced_load(const std::vector<int>& ports, const std::string& target, double rate_per_port,
                      int clients_per_port, std::chrono::milliseconds duration, const Fields& fields) {
  LoadResult result;
  std::mutex mu;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + duration;
  const auto every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(clients_per_port / rate_per_port));
  std::vector<std::thread> threads;
  for (int port : ports) {
    for (int c = 0; c < clients_per_port; ++c) {
      threads.emplace_back([&, port, c] {
        std::map<int, int> local;
        KeepAliveGet client(port, target, std::chrono::seconds(5), true, fields);
        // The clients of a port take turns: client c starts c/clients of a period late.
        auto next = start + every * c / clients_per_port;
        while (next < deadline) {
          std::this_thread::sleep_until(next);
          ++local[client.get().status];
          next += every;
        }
        std::lock_guard lock(mu);
        for (const auto& [s, n] : local) result.statuses[s] += n;
      });
    }
  }
  for (auto& t : threads) t.join();
  return result;
}

BackgroundLoad::BackgroundLoad(int port, std::string target, int clients, std::chrono::milliseconds pause)
    : target_(std::move(target)), clients_(clients), pause_(pause) {
  for (int c = 0; c < clients; ++c) threads_.emplace_back([this, port] { run(port); });
}

void BackgroundLoad::stop() {
  stopping_ = true;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

std::vector<TimedAnswer> BackgroundLoad::answers() const {
  std::lock_guard lock(mu_);
  return answers_;
}

void BackgroundLoad::run(int port) {
  KeepAliveGet client(port, target_, std::chrono::seconds(10), true);
  while (!stopping_) {
    TimedAnswer a;
    a.sent_us = monotonic_now_us();
    KeepAliveGet::Answer got = client.get();
    a.done_us = monotonic_now_us();
    a.status = got.status;
    a.detail = std::move(got.detail);
    {
      std::lock_guard lock(mu_);
      answers_.push_back(std::move(a));
    }
    if (got.connect_failed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    else if (got.status != 0) std::this_thread::sleep_for(pause_);
  }
}

WindowCheck check_windows(std::vector<std::int64_t> arrivals_us, double burst, double rate) {
  WindowCheck out;
  if (arrivals_us.empty()) return out;
  std::sort(arrivals_us.begin(), arrivals_us.end());
  for (std::size_t i = 0; i < arrivals_us.size(); ++i)
    for (std::size_t j = i; j < arrivals_us.size(); ++j) {
      const double T = static_cast<double>(arrivals_us[j] - arrivals_us[i]) / 1e6;
      out.worst_excess = std::max(out.worst_excess, static_cast<double>(j - i + 1) - (burst + rate * T));
    }
  out.span_s = static_cast<double>(arrivals_us.back() - arrivals_us.front()) / 1e6;
  out.share = static_cast<double>(arrivals_us.size()) / (burst + rate * out.span_s);
  return out;
}

}  // namespace tollgate::testing

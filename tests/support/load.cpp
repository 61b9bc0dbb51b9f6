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

LoadResult run_load(const std::vector<int>& ports, const std::string& target, int clients_per_port,
                    std::chrono::milliseconds duration, std::chrono::milliseconds pause_after_reject) {
  LoadResult result;
  std::mutex mu;
  const auto deadline = std::chrono::steady_clock::now() + duration;
  std::vector<std::thread> threads;
  for (int port : ports) {
    for (int c = 0; c < clients_per_port; ++c) {
      threads.emplace_back([&, port] {
        std::map<int, int> local;
        net::io_context ctx;
        std::unique_ptr<tcp::socket> sock;
        beast::flat_buffer buf;
        http::request<http::empty_body> req{http::verb::get, target, 11};
        req.set(http::field::host, "127.0.0.1");
        while (std::chrono::steady_clock::now() < deadline) {
          beast::error_code ec;
          if (!sock) {
            sock = std::make_unique<tcp::socket>(ctx);
            sock->connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
            if (ec) {
              ++local[0];
              sock.reset();
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
              continue;
            }
            timeval tv{5, 0};
            setsockopt(sock->native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            buf.clear();
          }
          http::write(*sock, req, ec);
          http::response<http::string_body> res;
          if (!ec) http::read(*sock, buf, res, ec);
          if (ec) {
            ++local[0];
            sock.reset();
            continue;
          }
          ++local[res.result_int()];
          if (!res.keep_alive()) sock.reset();
          if (res.result_int() == 429 || res.result_int() == 503) std::this_thread::sleep_for(pause_after_reject);
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
  net::io_context ctx;
  std::unique_ptr<tcp::socket> sock;
  beast::flat_buffer buf;
  http::request<http::empty_body> req{http::verb::get, target_, 11};
  req.set(http::field::host, "127.0.0.1");
  auto record = [&](TimedAnswer a) {
    a.done_us = monotonic_now_us();
    std::lock_guard lock(mu_);
    answers_.push_back(std::move(a));
  };
  while (!stopping_) {
    beast::error_code ec;
    TimedAnswer a;
    a.sent_us = monotonic_now_us();
    if (!sock) {
      sock = std::make_unique<tcp::socket>(ctx);
      sock->connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
      if (ec) {
        a.detail = "connect: " + ec.message();
        record(std::move(a));
        sock.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      sock->set_option(tcp::no_delay(true), ec);
      timeval tv{10, 0};
      setsockopt(sock->native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      buf.clear();
    }
    http::write(*sock, req, ec);
    http::response<http::string_body> res;
    if (!ec) http::read(*sock, buf, res, ec);
    if (ec) {
      a.detail = ec.message();
      record(std::move(a));
      sock.reset();
      continue;
    }
    a.status = res.result_int();
    if (a.status != 200) a.detail = res.body().substr(0, 300);
    const bool keep = res.keep_alive();
    record(std::move(a));
    if (!keep) sock.reset();
    std::this_thread::sleep_for(pause_);
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

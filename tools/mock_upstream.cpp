// tollgate-mock-upstream --port P [--host H] [--latency-ms N]
// A small airline-style upstream for demos, tests and benchmarks. Every path answers with small
// JSON; the query can ask for special behaviour:
//   ?status=N      answer with status N          ?delay_ms=N  answer after N ms (a timer)
//   ?chunked=1     send the body chunked         ?echo=1      echo method, target, headers, body
//   ?size=N        pad the body to about N bytes
// GET /__stats returns per-path counts and arrival times (CLOCK_MONOTONIC microseconds, the clock
// the gateway uses); POST /__reset clears them. Port 0 picks a free port; the chosen one is printed.
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

namespace {

struct PathStats {
  std::uint64_t count = 0;
  std::vector<std::int64_t> arrivals_us;
};
std::map<std::string, PathStats> g_stats;  // single-threaded server: no lock
std::uint64_t g_total = 0;
int g_latency_ms = 0;

std::int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

std::string query_param(std::string_view target, std::string_view key) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    const auto eq = kv.find('=');
    if (kv.substr(0, eq) == key) return eq == std::string_view::npos ? "1" : std::string(kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return {};
}

int int_param(std::string_view target, std::string_view key, int def) {
  const std::string v = query_param(target, key);
  if (v.empty()) return def;
  try {
    return std::stoi(v);
  } catch (...) {
    return def;
  }
}

json airline_body(std::string_view path) {
  if (path.ends_with("/shopping/search"))
    return {{"flights", json::array({{{"flight", "TG101"}, {"from", "PEK"}, {"to", "SHA"}, {"fare", 880}},
                                     {{"flight", "TG205"}, {"from", "PEK"}, {"to", "SHA"}, {"fare", 1020}}})}};
  if (path.ends_with("/pricing")) return {{"fare", 880}, {"currency", "CNY"}, {"taxes", 50}};
  if (path.ends_with("/booking")) return {{"pnr", "TG7Q2X"}, {"status", "HK"}};
  return {{"ok", true}};
}

net::awaitable<void> session(tcp::socket sock) {
  beast::tcp_stream stream(std::move(sock));
  beast::flat_buffer buffer;
  for (;;) {
    beast::error_code ec;
    http::request<http::string_body> req;
    co_await http::async_read(stream, buffer, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));

    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::server, "tollgate-mock-upstream");
    res.keep_alive(req.keep_alive());
    if (path == "/__stats") {
      json paths = json::object();
      for (const auto& [p, s] : g_stats) paths[p] = {{"count", s.count}, {"arrivals_us", s.arrivals_us}};
      res.body() = json{{"total", g_total}, {"paths", paths}}.dump();
    } else if (path == "/__reset") {
      g_stats.clear();
      g_total = 0;
      res.body() = R"({"reset":true})";
    } else {
      auto& s = g_stats[path];
      ++s.count;
      ++g_total;
      s.arrivals_us.push_back(now_us());
      const int delay = int_param(target, "delay_ms", g_latency_ms);
      if (delay > 0) {
        net::steady_timer t(stream.get_executor(), std::chrono::milliseconds(delay));
        co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
      res.result(static_cast<http::status>(int_param(target, "status", 200)));
      json body = airline_body(path);
      if (!query_param(target, "echo").empty()) {
        json headers = json::object();
        for (const auto& f : req) headers[std::string(f.name_string())] = std::string(f.value());
        body = {{"method", std::string(req.method_string())}, {"target", target}, {"headers", headers},
                {"body", req.body()}};
      }
      std::string text = body.dump();
      if (const int size = int_param(target, "size", 0); size > static_cast<int>(text.size()))
        text = json{{"data", body}, {"pad", std::string(size - text.size(), 'x')}}.dump();
      res.body() = std::move(text);
    }
    res.prepare_payload();
    if (!query_param(target, "chunked").empty()) {
      res.erase(http::field::content_length);
      res.chunked(true);
    }
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<void> listen(tcp::acceptor& acc) {
  for (;;) {
    beast::error_code ec;
    tcp::socket sock = co_await acc.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) continue;
    sock.set_option(tcp::no_delay(true), ec);
    net::co_spawn(acc.get_executor(), session(std::move(sock)), net::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int port = 9000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (a == "--host" && i + 1 < argc) host = argv[++i];
    else if (a == "--latency-ms" && i + 1 < argc) g_latency_ms = std::atoi(argv[++i]);
    else {
      std::cerr << "usage: tollgate-mock-upstream [--host H] [--port P] [--latency-ms N]\n";
      return 2;
    }
  }
  try {
    net::io_context ctx(1);
    tcp::acceptor acc(ctx);
    tcp::endpoint ep(net::ip::make_address(host), static_cast<unsigned short>(port));
    acc.open(ep.protocol());
    acc.set_option(net::socket_base::reuse_address(true));
    acc.bind(ep);
    acc.listen(net::socket_base::max_listen_connections);
    std::cout << "mock-upstream: listening on " << host << ":" << acc.local_endpoint().port() << std::endl;
    net::signal_set signals(ctx, SIGINT, SIGTERM);
    signals.async_wait([&](auto, int) { ctx.stop(); });
    net::co_spawn(ctx, listen(acc), net::detached);
    ctx.run();
  } catch (const std::exception& e) {
    std::cerr << "mock-upstream: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

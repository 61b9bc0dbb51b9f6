// tollgate-mock-upstream --port P [--host H] [--latency-ms N] [--connect-delay-ms N] [--limit SUFFIX=RATE ...]
//                        [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
// A small airline-style upstream for demos, tests and benchmarks. Every path answers with small
// JSON; the query can ask for special behaviour:
//   ?status=N      answer with status N          ?delay_ms=N  answer after N ms (a timer)
//   ?chunked=1     send the body chunked         ?echo=1      echo method, target, headers, body
//   ?size=N        pad the body to about N bytes
//   ?reply_request_id=V  the response carries X-Request-Id: V (and, with &reply_twice=1, a second
//                  one, V-2); ?echo=1 also lists the request's fields in order, repeated ones
//                  included ("fields": [[name, value], ...])
// GET /__stats returns per-path counts and arrival times (CLOCK_MONOTONIC microseconds, the clock
// the gateway uses), the connections accepted and those open now (the one asking included); POST
// /__reset clears them ("open" stays). --connect-delay-ms N holds each new connection N ms before
// its TLS handshake (plain HTTP: before its first request), standing in for the round trips of a
// distant supplier. Port 0 picks a free port; the chosen one is printed.
//
// A throttling supplier: --limit SUFFIX=RATE (repeatable) or PUT /__limits with
// {"<suffix>": RATE, ...} (0 or null: no limit; the rates in force are replaced, and can change
// while it runs) makes every path ending in SUFFIX allow RATE requests a second (a token bucket of
// one second's burst); past it the answer is 429 with Retry-After (whole seconds until a permit),
// RateLimit-Policy and RateLimit (r=0, t=seconds). {"<suffix>": {"rate": R, "retry_after_s": N}}
// answers every 429 with Retry-After N instead. GET /__limits shows them (with the permits each
// holds now, "tokens"); /__stats counts each
// path's "throttled" answers beside its "count" of arrivals, and their times ("throttled_us").
//
// An HTTPS upstream: --tls-cert FILE --tls-key FILE (PEM; the certificate file may hold the chain)
// serve TLS 1.2 and 1.3 only on the port, with the same answers, stats and keep-alive as plain
// HTTP. --tls-client-ca FILE also requires a client certificate signed by a CA in FILE (a
// handshake without one fails). Server-side session resumption (cache and tickets) is on, as
// OpenSSL has it by default. The listening line then ends in " (https)".
#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using nlohmann::json;

namespace {

struct PathStats {
  std::uint64_t count = 0;
  std::uint64_t throttled = 0;
  std::vector<std::int64_t> arrivals_us;
  std::vector<std::int64_t> throttled_us;  // arrivals answered 429
};

std::int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

// One supplier limit: a token bucket holding up to `rate` permits (one second's worth).
struct Limit {
  double rate = 0;
  int retry_after_s = 0;  // > 0: every 429 says this
  double tokens = 0;
  std::int64_t last_us = 0;
};
std::map<std::string, Limit> g_limits;  // by path suffix

// The limit a path falls under (the longest suffix), or null.
Limit* limit_for(const std::string& path) {
  Limit* best = nullptr;
  std::size_t best_len = 0;
  for (auto& [suffix, l] : g_limits)
    if (path.ends_with(suffix) && suffix.size() >= best_len) {
      best = &l;
      best_len = suffix.size();
    }
  return best;
}

// Takes a permit now, or returns the microseconds until one.
std::int64_t take_permit(Limit& l, std::int64_t now) {
  // Up to one second's worth, and at least one permit (a rate under 1/s still lets one through).
  l.tokens = std::min(std::max(l.rate, 1.0), l.tokens + static_cast<double>(now - l.last_us) / 1e6 * l.rate);
  l.last_us = now;
  if (l.tokens >= 1) {
    l.tokens -= 1;
    return 0;
  }
  return static_cast<std::int64_t>((1 - l.tokens) / l.rate * 1e6) + 1;
}

// Replaces the limits with {"suffix": rate | {"rate": r, "retry_after_s": n} | 0 | null}.
std::string set_limits(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const std::exception& e) {
    return std::string("not JSON: ") + e.what();
  }
  if (!j.is_object()) return "expected an object of path suffix -> rate";
  std::map<std::string, Limit> next;
  for (auto it = j.begin(); it != j.end(); ++it) {
    Limit l;
    const json& v = it.value();
    if (v.is_null()) continue;
    if (v.is_number()) {
      l.rate = v.get<double>();
    } else if (v.is_object() && v.contains("rate") && v["rate"].is_number()) {
      l.rate = v["rate"].get<double>();
      if (v.contains("retry_after_s") && v["retry_after_s"].is_number_integer()) l.retry_after_s = v["retry_after_s"];
    } else {
      return "limit for " + it.key() + ": expected a rate or {\"rate\": r, \"retry_after_s\": n}";
    }
    if (l.rate < 0) return "limit for " + it.key() + ": rate must be >= 0";
    if (l.rate == 0) continue;
    // A limit kept at the same rate keeps its bucket; a new or changed one starts full.
    auto old = g_limits.find(it.key());
    if (old != g_limits.end() && old->second.rate == l.rate) {
      old->second.retry_after_s = l.retry_after_s;
      next.emplace(it.key(), old->second);
    } else {
      l.tokens = std::max(l.rate, 1.0);
      l.last_us = now_us();
      next.emplace(it.key(), l);
    }
  }
  g_limits = std::move(next);
  return {};
}

// The limits in force, each with the permits its bucket holds now ("tokens": what it would still
// let through at once; a test reads it to tell what it allowed from what was used).
json limits_json() {
  json out = json::object();
  const std::int64_t now = now_us();
  for (const auto& [suffix, l] : g_limits) {
    const double tokens = std::min(std::max(l.rate, 1.0), l.tokens + static_cast<double>(now - l.last_us) / 1e6 * l.rate);
    out[suffix] = {{"rate", l.rate}, {"retry_after_s", l.retry_after_s}, {"tokens", tokens}};
  }
  return out;
}
std::map<std::string, PathStats> g_stats;  // single-threaded server: no lock
std::uint64_t g_total = 0;
int g_latency_ms = 0;
int g_connect_delay_ms = 0;
std::uint64_t g_connections = 0;  // accepted since start (or /__reset)
std::uint64_t g_open = 0;         // open now


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

// The stream a session reads and writes: plain TCP, or TLS over it.
template <class Stream>
Stream make_stream(tcp::socket sock, ssl::context* tls) {
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) return Stream(std::move(sock));
  else return Stream(std::move(sock), *tls);
}

// One connection: answers requests until the client closes it or asks to. `Stream` is the plain
// beast::tcp_stream or TLS over it, so both modes answer alike. The coroutine takes the socket and
// makes its stream inside: with the stream itself as the parameter, g++ 12 warns
// (-Wmismatched-new-delete, a false alarm on Asio's frame allocator) about the coroutine's start.
template <class Stream>
net::awaitable<void> session(tcp::socket sock, ssl::context* tls) {
  constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  Stream stream = make_stream<Stream>(std::move(sock), tls);
  beast::tcp_stream& tcp_layer = beast::get_lowest_layer(stream);
  ++g_connections;
  ++g_open;
  struct Closed {
    ~Closed() { --g_open; }
  } closed;
  if (g_connect_delay_ms > 0) {
    net::steady_timer t(co_await net::this_coro::executor, std::chrono::milliseconds(g_connect_delay_ms));
    beast::error_code ec;
    co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  if constexpr (kTls) {
    beast::error_code ec;
    // A client that connects and never says hello would otherwise hold its coroutine for good.
    tcp_layer.expires_after(std::chrono::seconds(10));
    co_await stream.async_handshake(ssl::stream_base::server, net::redirect_error(net::use_awaitable, ec));
    tcp_layer.expires_never();
    if (ec) co_return;  // closes the socket
  }
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
      for (const auto& [p, s] : g_stats)
        paths[p] = {{"count", s.count}, {"throttled", s.throttled}, {"arrivals_us", s.arrivals_us},
                    {"throttled_us", s.throttled_us}};
      res.body() = json{{"total", g_total}, {"connections", g_connections}, {"open", g_open}, {"paths", paths}}.dump();
    } else if (path == "/__reset") {
      g_stats.clear();
      g_total = 0;
      g_connections = 0;
      res.body() = R"({"reset":true})";
    } else if (path == "/__limits") {
      if (req.method() == http::verb::put || req.method() == http::verb::post) {
        if (const std::string why = set_limits(req.body()); !why.empty()) {
          res.result(http::status::bad_request);
          res.body() = json{{"error", why}}.dump();
        } else {
          res.body() = limits_json().dump();
        }
      } else {
        res.body() = limits_json().dump();
      }
    } else if (Limit* l = limit_for(path); l && take_permit(*l, now_us()) > 0) {
      // Throttled: counted as an arrival and as throttled, answered at once.
      auto& s = g_stats[path];
      ++s.count;
      ++s.throttled;
      ++g_total;
      s.arrivals_us.push_back(now_us());
      s.throttled_us.push_back(s.arrivals_us.back());
      const std::int64_t wait_us = take_permit(*l, now_us());  // still > 0: nothing was taken
      const long long t = l->retry_after_s > 0 ? l->retry_after_s : (wait_us + 999'999) / 1'000'000;
      res.result(http::status::too_many_requests);
      res.set(http::field::retry_after, std::to_string(t));
      res.set("RateLimit-Policy", "\"supplier\";q=" + std::to_string(static_cast<long long>(l->rate)) + ";w=1");
      res.set("RateLimit", "\"supplier\";r=0;t=" + std::to_string(t));
      res.body() = json{{"error", "supplier_rate_limited"}, {"retry_after_s", t}}.dump();
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
        json fields = json::array();
        for (const auto& f : req) {
          headers[std::string(f.name_string())] = std::string(f.value());
          fields.push_back({std::string(f.name_string()), std::string(f.value())});
        }
        body = {{"method", std::string(req.method_string())}, {"target", target}, {"headers", headers},
                {"fields", fields}, {"body", req.body()}};
      }
      std::string text = body.dump();
      if (const int size = int_param(target, "size", 0); size > static_cast<int>(text.size()))
        text = json{{"data", body}, {"pad", std::string(size - text.size(), 'x')}}.dump();
      res.body() = std::move(text);
    }
    if (const std::string id = query_param(target, "reply_request_id"); !id.empty()) {
      res.insert("X-Request-Id", id);
      if (!query_param(target, "reply_twice").empty()) res.insert("X-Request-Id", id + "-2");
    }
    res.prepare_payload();
    if (!query_param(target, "chunked").empty()) {
      res.erase(http::field::content_length);
      res.chunked(true);
    }
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  if constexpr (kTls) {
    // close_notify, so that a client tells a finished answer from a cut connection; bounded,
    // since a client that already went away never answers it.
    beast::error_code ec;
    tcp_layer.expires_after(std::chrono::seconds(2));
    co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ec));
  }
  beast::error_code ignored;
  tcp_layer.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// tls: null for plain HTTP.
net::awaitable<void> listen(tcp::acceptor& acc, ssl::context* tls) {
  for (;;) {
    beast::error_code ec;
    tcp::socket sock = co_await acc.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) continue;
    sock.set_option(tcp::no_delay(true), ec);
    if (tls)
      net::co_spawn(acc.get_executor(), session<ssl::stream<beast::tcp_stream>>(std::move(sock), tls), net::detached);
    else
      net::co_spawn(acc.get_executor(), session<beast::tcp_stream>(std::move(sock), nullptr), net::detached);
  }
}

// A server context for --tls-cert/--tls-key (and --tls-client-ca); throws on unreadable files.
std::unique_ptr<ssl::context> make_tls(const std::string& cert, const std::string& key, const std::string& client_ca) {
  auto tls = std::make_unique<ssl::context>(ssl::context::tls_server);
  tls->set_options(ssl::context::default_workarounds);
  SSL_CTX_set_min_proto_version(tls->native_handle(), TLS1_2_VERSION);
  // Asio's own message ("asio.ssl error") names neither the flag nor the file.
  auto load = [](const char* flag, const std::string& file, auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(flag) + " " + file + ": cannot load (" + e.what() + ")");
    }
  };
  load("--tls-cert", cert, [&] { tls->use_certificate_chain_file(cert); });
  load("--tls-key", key, [&] { tls->use_private_key_file(key, ssl::context::pem); });
  // OpenSSL refuses to resume a session whose id context is unset once peers are verified; set
  // it in both modes so that resumption behaves the same with and without client certificates.
  static const unsigned char kSessionContext[] = "tollgate-mock-upstream";
  SSL_CTX_set_session_id_context(tls->native_handle(), kSessionContext, sizeof kSessionContext - 1);
  if (!client_ca.empty()) {
    load("--tls-client-ca", client_ca, [&] { tls->load_verify_file(client_ca); });
    // Names the accepted CAs in the CertificateRequest, so that a client holding several
    // certificates can pick the right one.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca.c_str()))
      SSL_CTX_set_client_CA_list(tls->native_handle(), names);
    tls->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return tls;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int port = 9000;
  std::string tls_cert, tls_key, tls_client_ca;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (a == "--tls-cert" && i + 1 < argc) tls_cert = argv[++i];
    else if (a == "--tls-key" && i + 1 < argc) tls_key = argv[++i];
    else if (a == "--tls-client-ca" && i + 1 < argc) tls_client_ca = argv[++i];
    else if (a == "--host" && i + 1 < argc) host = argv[++i];
    else if (a == "--latency-ms" && i + 1 < argc) g_latency_ms = std::atoi(argv[++i]);
    else if (a == "--connect-delay-ms" && i + 1 < argc) g_connect_delay_ms = std::atoi(argv[++i]);
    else if (a == "--limit" && i + 1 < argc) {
      const std::string spec = argv[++i];
      const auto eq = spec.find('=');
      std::string why = "expected SUFFIX=RATE";
      if (eq != std::string::npos) {
        json merged = limits_json();  // earlier --limit flags stay
        char* end = nullptr;
        const double rate = std::strtod(spec.c_str() + eq + 1, &end);
        if (end == spec.c_str() + eq + 1 || *end != '\0') {
          why = "RATE must be a number";
        } else {
          merged[spec.substr(0, eq)] = rate;
          why = set_limits(merged.dump());
        }
      }
      if (!why.empty()) {
        std::cerr << "mock-upstream: --limit " << spec << ": " << why << "\n";
        return 2;
      }
    } else {
      std::cerr << "usage: tollgate-mock-upstream [--host H] [--port P] [--latency-ms N] [--limit SUFFIX=RATE ...]\n"
                   "                              [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n";
      return 2;
    }
  }
  if (tls_cert.empty() != tls_key.empty() || (!tls_client_ca.empty() && tls_cert.empty())) {
    std::cerr << "mock-upstream: --tls-cert and --tls-key go together, and --tls-client-ca needs them\n";
    return 2;
  }
  try {
    std::unique_ptr<ssl::context> tls;
    if (!tls_cert.empty()) tls = make_tls(tls_cert, tls_key, tls_client_ca);
    net::io_context ctx(1);
    tcp::acceptor acc(ctx);
    tcp::endpoint ep(net::ip::make_address(host), static_cast<unsigned short>(port));
    acc.open(ep.protocol());
    acc.set_option(net::socket_base::reuse_address(true));
    acc.bind(ep);
    acc.listen(net::socket_base::max_listen_connections);
    std::cout << "mock-upstream: listening on " << host << ":" << acc.local_endpoint().port()
              << (tls ? " (https)" : "") << std::endl;
    net::signal_set signals(ctx, SIGINT, SIGTERM);
    signals.async_wait([&](auto, int) { ctx.stop(); });
    net::co_spawn(ctx, listen(acc, tls.get()), net::detached);
    ctx.run();
  } catch (const std::exception& e) {
    std::cerr << "mock-upstream: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

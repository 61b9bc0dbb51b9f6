// The HTTP front end: the proxy listener (one acceptor and one io_context per thread, sharing the
// port through SO_REUSEPORT) and a small listener for the admin API. Beast lives in the .cpp only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/store/bucket_store.hpp"

namespace boost::asio {
class io_context;
}

namespace tollgate::proxy {

class AccessLog;

struct ProxyDeps {
  const config::GatewayConfig& config;  // listen, upstreams, routes, limits
  config::SnapshotHolder& snapshots;
  config::SwitchState& switch_state;
  store::BucketStore& store;
  Metrics& metrics;
  AccessLog* access_log = nullptr;      // null or disabled: no access log
};

class ProxyServer {
 public:
  // One io_context per thread; each runs its own acceptor, sessions and upstream pools.
  ProxyServer(std::vector<boost::asio::io_context*> contexts, ProxyDeps deps);
  ~ProxyServer();
  void start();  // resolves upstreams and binds; throws std::runtime_error on failure
  std::uint16_t port() const;
  void stop();   // stops accepting
  void drain();  // stops accepting and closes connections as soon as they have no request in flight

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A plain request/response pair for small JSON endpoints (the admin API).
struct SimpleRequest {
  std::string method;
  std::string target;
  std::string authorization;
  std::string body;
  std::string peer;  // client address
};
struct SimpleResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::uint32_t delay_ms = 0;  // answer only after this long (on a timer): slows guessing a token
};
using SimpleHandler = std::function<SimpleResponse(const SimpleRequest&)>;
// Requests whose handling never blocks (health, readiness): answered on the listener's thread.
// Every other request runs on a worker thread of the server's own, so a slow store or database
// read behind one endpoint never delays these answers, nor the signals handled on that thread.
using SimpleInline = std::function<bool(const SimpleRequest&)>;

class SimpleServer {
 public:
  SimpleServer(boost::asio::io_context& ctx, config::Endpoint listen, SimpleHandler handler,
               SimpleInline runs_inline = nullptr);
  ~SimpleServer();
  void start();
  std::uint16_t port() const;
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::proxy

// The admin API's listener: a small HTTP/1.1 server for short JSON requests and answers (bodies
// and headers are bounded), with its handlers on a thread of its own. Beast lives in the .cpp only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tollgate/config/gateway_config.hpp"

namespace boost::asio {
class io_context;
}

namespace tollgate::admin {

// Sent with every admin answer. The console's page may load only its own files (no inline script
// or style, nothing from elsewhere), may not be framed, and answers are never cached; the API sends
// no CORS headers, so another site's script can read nothing (short of DNS rebinding: the Host
// header is not checked, see the README), and a token travels only in an Authorization header the
// page sets itself (a cross-site form cannot).
inline constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

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

class AdminServer {
 public:
  AdminServer(boost::asio::io_context& ctx, config::Endpoint listen, SimpleHandler handler,
              SimpleInline runs_inline = nullptr);
  ~AdminServer();
  void start();
  std::uint16_t port() const;
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::admin

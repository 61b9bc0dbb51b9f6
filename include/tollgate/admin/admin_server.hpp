// The admin API's listener: a small HTTP/1.1 server for short JSON requests and answers (bodies
// and headers are bounded), with its handlers on a thread of its own. Beast lives in the .cpp only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/config/gateway_config.hpp"

namespace boost::asio {
class io_context;
}
namespace prometheus {
class Registry;
}

namespace tollgate::admin {

// Sent with every admin answer. The console's page may load only its own files (no inline script
// or style, nothing from elsewhere), may not be framed, and answers are never cached; the API sends
// no CORS headers, so another site's script can read nothing (and a DNS-rebound name is refused by
// the Host check, admin_host_allowed), and a token travels only in an Authorization header the page
// sets itself (a cross-site form cannot).
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
  std::vector<std::pair<std::string, std::string>> headers{};  // more header fields (Retry-After)
};
using SimpleHandler = std::function<SimpleResponse(const SimpleRequest&)>;
// Requests whose handling never blocks (health, readiness): answered on the listener's thread.
// Every other request runs on a worker thread of the server's own, so a slow store or database
// read behind one endpoint never delays these answers, nor the signals handled on that thread.
using SimpleInline = std::function<bool(const SimpleRequest&)>;

// Whether a request's Host header names this admin listener (a page that DNS rebinding brought
// here carries its own site's name): an IP literal equal to `local_address` (the accepted socket's
// own address) or any loopback address, `localhost`, or one of `allowed` (names compared without
// case and without a trailing dot; "*" allows any Host). A port, if any, is not compared. Empty
// `host`: allowed (HTTP/1.0 without Host; the listener refuses HTTP/1.1 without one).
bool admin_host_allowed(std::string_view host, std::string_view local_address, const std::vector<std::string>& allowed);

// Descriptors the admin listener may hold beyond admin.max_connections: the connections it is
// answering 503 at its cap (past them, a new one is closed unanswered).
inline constexpr std::uint32_t kAdminRefusalDescriptors = 16;

struct AdminServerOptions {
  // Open admin connections at most. At the cap a new connection closes the one that has waited
  // longest for its next request; when every one is busy with a request, the new one is answered
  // 503 too_many_admin_connections and closed.
  std::uint32_t max_connections = 64;
  std::vector<std::string> allowed_hosts;     // besides its own address and localhost
  prometheus::Registry* registry = nullptr;   // where its refusals are counted (null: not counted)
};

class AdminServer {
 public:
  AdminServer(boost::asio::io_context& ctx, config::Endpoint listen, SimpleHandler handler,
              SimpleInline runs_inline = nullptr, AdminServerOptions options = {});
  ~AdminServer();
  void start();
  std::uint16_t port() const;
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::admin

// The HTTP front end: the proxy listener (one acceptor and one io_context per thread, sharing the
// port through SO_REUSEPORT). Beast lives in the .cpp files only.
#pragma once

#include <memory>
#include <optional>
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
class RefusalLog;
class TlsProfiles;

struct ProxyDeps {
  const config::GatewayConfig& config;  // listen, upstreams, routes, limits
  config::SnapshotHolder& snapshots;
  config::SwitchState& switch_state;
  store::BucketStore& store;
  Metrics& metrics;
  AccessLog* access_log = nullptr;      // null or disabled: no access log
  RefusalLog* refusals = nullptr;       // null: refusals are only counted
  TlsProfiles* tls = nullptr;           // the listener's and the https upstreams' contexts (null: none)
};

// An upstream's endpoints as the admin API shows them.
struct EndpointView {
  std::string endpoint;  // "10.0.0.1:8080"
  bool up = true;        // false while ejected
  int outstanding = 0;   // requests on it now
};
// upstreams.<name>.auth as it stands: never a secret or a token.
struct AuthView {
  std::string type;                    // "header" or "oauth2_client_credentials"
  std::int64_t expires_in_s = -1;      // oauth2: the current token's seconds left (-1: none held)
  std::int64_t last_refresh_unix = 0;  // oauth2: when the last token came (0: never)
  std::uint64_t failures = 0;          // oauth2: token requests that gave no token
  std::string last_error;              // oauth2: why the last of them failed
};

struct UpstreamView {
  std::string name;
  bool resolved = false;  // false: its names do not resolve yet (503 upstream_unresolved)
  std::vector<EndpointView> endpoints;
  std::optional<AuthView> auth;
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
  // Applies `next`'s upstreams, routes and dns (SIGHUP). New requests take the new table; a request
  // in flight finishes on the table it started on. An upstream whose configuration is unchanged
  // keeps its endpoints (health, TLS sessions, pooled connections); the pools of upstreams that
  // left or changed close their idle connections at once and the others as their requests end.
  // New names get up to 2 s for their first answers, as at start. Returns false when those three
  // fields are as running (nothing done). Throws (TlsLoadError naming the file, or
  // std::runtime_error) when the table cannot be made; the running one then stays.
  bool replace_routes(const config::GatewayConfig& next);
  // Every upstream's endpoints now (any thread).
  std::vector<UpstreamView> upstreams_view() const;
  // Brings tollgate_upstream_endpoint_up up to date with ejections that ended (any thread; /metrics
  // calls it before rendering, so that a scrape never shows an ejection that is over).
  void refresh_endpoint_gauges() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::proxy

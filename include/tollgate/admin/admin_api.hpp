// The admin API as a pure function from request to response (docs/operations.md, "Admin API"). The listener
// is admin_server.hpp; this file knows nothing about sockets.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "tollgate/admin/admin_server.hpp"
#include "tollgate/admin/history.hpp"
#include "tollgate/config/config_manager.hpp"
#include "tollgate/config/config_source.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/proxy_server.hpp"
#include "tollgate/proxy/refusals.hpp"
#include "tollgate/proxy/tls_context.hpp"
#include "tollgate/store/bucket_store.hpp"

namespace tollgate::admin {

struct AdminDeps {
  config::SnapshotHolder& snapshots;
  config::SwitchState& switch_state;
  store::BucketStore& store;
  proxy::Metrics& metrics;  // its registry holds every series /metrics shows; the admin API adds its own
  std::string token;                              // empty: read-only admin API
  std::string token_name;                         // recorded as the author of changes ("" = client address)
  config::ConfigManager* config = nullptr;        // reload and source status
  config::SwitchWriter* switch_writer = nullptr;  // fleet-wide switch (MySQL); null: per process
  const std::atomic<bool>* draining = nullptr;    // set while shutting down: /readyz answers 503
  // Per-process switch (no MySQL): runs `revert` after `after_ms` on the admin thread.
  std::function<void(std::int64_t after_ms, std::function<void()> revert)> schedule = nullptr;
  const History* history = nullptr;             // the console's per-second history (null: none kept)
  const proxy::RefusalLog* refusals = nullptr;  // recent 429s and 503s (null: none kept)
  proxy::TlsProfiles* tls = nullptr;            // reload and expiry of TLS files (null: no TLS anywhere)
  // Every upstream's endpoints (/readyz names the unresolved ones, the overview lists them; null: none).
  std::function<std::vector<proxy::UpstreamView>()> upstreams_view = nullptr;
  std::function<void()> refresh_endpoint_gauges = nullptr;  // called before /metrics renders
};

// Constant-time comparison (the time taken does not depend on where the strings differ).
bool constant_time_equals(std::string_view a, std::string_view b);

class AdminApi {
 public:
  explicit AdminApi(AdminDeps deps);
  SimpleResponse handle(const SimpleRequest& req);
  // Health and readiness: never blocked by a store or database read, so answered on the
  // listener's own thread (the other endpoints run on its worker thread).
  static bool runs_inline(const SimpleRequest& req);

  // A refused token is answered after this delay (a timer, no thread waits): guessing over one
  // connection is held to a few tries a second.
  static constexpr std::uint32_t kFailedAuthDelayMs = 250;
  static constexpr std::int64_t kFailureLogIntervalUs = 10'000'000;

 private:
  // Empty optional: authorized. Otherwise the 401/403 to send; a 401 is counted and logged.
  std::optional<SimpleResponse> authorize(const SimpleRequest& req);
  SimpleResponse get_rules() const;
  SimpleResponse get_switch() const;
  SimpleResponse put_switch(const SimpleRequest& req);
  SimpleResponse post_reload();
  SimpleResponse post_tls_reload();
  SimpleResponse get_bucket(std::string_view name) const;
  SimpleResponse readyz() const;
  // The console's reads (docs/operations.md, "Operator console").
  SimpleResponse get_overview() const;
  SimpleResponse get_history(std::string_view query) const;
  SimpleResponse get_refusals(std::string_view query) const;
  // The registry serialized, after the store and this API have set their scrape-time series.
  std::string metrics_text();
  void publish_debts();

  AdminDeps deps_;
  prometheus::Counter& auth_failures_;
  prometheus::Family<prometheus::Gauge>& debts_;
  std::map<std::string, prometheus::Gauge*, std::less<>> debt_series_;  // the buckets the last scrape showed
  std::int64_t last_failure_log_us_ = 0;  // written by the worker thread only
};

}  // namespace tollgate::admin

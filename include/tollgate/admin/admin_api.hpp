// The admin API as a pure function from request to response (docs/operations.md, "Admin API"). The listener
// is admin_server.hpp; this file knows nothing about sockets.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "tollgate/admin/admin_server.hpp"
#include "tollgate/admin/history.hpp"
#include "tollgate/config/config_manager.hpp"
#include "tollgate/config/config_source.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"
#include "tollgate/limiter/clock.hpp"
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
  const limiter::Clock* clock = nullptr;  // the failed-token budget's time (null: the steady clock)
};

// How many wrong tokens the admin API checks: from each peer address, and from all of them
// together (docs/security.md, "Hardening"). A peer that spends its own budget is locked out, for
// twice as long each time (1 s, 2 s, 4 s, ... 5 min); while it is, none of its tokens is checked,
// not even a right one (a lock-out that let the right token through would still answer every
// guess). A spent global budget refuses every peer whose token was not right in the last 15
// minutes, so many guessing peers never hold up a console that is already signed in, and one
// locked-out peer never holds up another.
class AuthBudget {
 public:
  struct Limits {
    double global_per_s = 5, global_burst = 10;
    double peer_per_s = 1, peer_burst = 5;
    limiter::Micros lockout_us = 1'000'000;        // the first lock-out; each next one doubles
    limiter::Micros max_lockout_us = 300'000'000;  // and a peer this long without a failure starts over
    limiter::Micros trusted_us = 900'000'000;      // how long a right token exempts its peer from the global budget
    std::size_t max_peers = 4096;                  // peers remembered (the stale ones go first)
  };
  enum class Verdict { check, locked_out, throttled };
  struct Admission {
    Verdict verdict = Verdict::check;
    limiter::Micros retry_after_us = 0;  // when not `check`
  };
  AuthBudget() : AuthBudget(Limits{}) {}
  explicit AuthBudget(Limits limits) : limits_(limits), global_tokens_(limits.global_burst) {}
  // Before the token is checked: whether it may be.
  Admission admit(const std::string& peer, limiter::Micros now);
  // A wrong (or missing) token: spends from both budgets; the lock-out it starts (0: none).
  limiter::Micros failed(const std::string& peer, limiter::Micros now);
  // A right token: the peer starts over, and passes a spent global budget for a while.
  void succeeded(const std::string& peer, limiter::Micros now);

 private:
  struct Peer {
    double tokens = 0;
    limiter::Micros at = 0;  // `tokens` as of this time
    int level = 0;           // lock-outs so far (the next lasts lockout_us << level)
    limiter::Micros locked_until = 0, last_failure = 0, trusted_until = 0;
  };
  Peer* find_or_make(const std::string& peer, limiter::Micros now);
  void refill_global(limiter::Micros now);

  Limits limits_;
  std::mutex mu_;
  double global_tokens_;
  limiter::Micros global_at_ = 0;
  std::map<std::string, Peer, std::less<>> peers_;
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
  // What /admin/overview and /admin/history list without ?top= or ?bucket=: the busiest this many
  // (the answer says how many it left out), so that an answer stays small at any number of rules.
  static constexpr std::size_t kOverviewTop = 50;
  static constexpr std::size_t kHistoryTop = 20;
  static constexpr std::size_t kMaxTop = 100'000;

 private:
  // Empty optional: authorized. Otherwise the 401/403 to send; a 401 is counted and logged.
  std::optional<SimpleResponse> authorize(const SimpleRequest& req);
  SimpleResponse get_rules() const;
  SimpleResponse get_switch() const;
  SimpleResponse put_switch(const SimpleRequest& req);
  SimpleResponse post_reload();
  SimpleResponse post_tls_reload();
  SimpleResponse get_bucket(std::string_view name) const;
  SimpleResponse post_adaptive_reset(std::string_view name, const SimpleRequest& req);
  SimpleResponse readyz() const;
  // The console's reads (docs/operations.md, "Operator console").
  SimpleResponse get_overview(std::string_view query) const;
  SimpleResponse get_history(std::string_view query) const;
  // The rules an overview or history request asks for (?bucket=, ?q=, ?top=), busiest first.
  struct Selection {
    std::vector<const config::Rule*> rules;
    std::size_t total = 0, matched = 0;
    std::string error;  // a bad query: the 400's detail
  };
  Selection select(const config::Snapshot& snap, std::string_view query, std::size_t default_top) const;
  SimpleResponse get_refusals(std::string_view query) const;
  // The registry serialized, after the store and this API have set their scrape-time series.
  std::string metrics_text();
  void publish_debts();

  AdminDeps deps_;
  limiter::SteadyClock steady_;
  const limiter::Clock& clock_;
  AuthBudget auth_budget_;
  prometheus::Counter& auth_failures_;
  prometheus::Counter& auth_lockouts_;
  prometheus::Counter& auth_refused_locked_;
  prometheus::Counter& auth_refused_global_;
  prometheus::Family<prometheus::Gauge>& debts_;
  std::map<std::string, prometheus::Gauge*, std::less<>> debt_series_;  // the buckets the last scrape showed
  std::int64_t last_failure_log_us_ = 0;  // written by the worker thread only
  std::int64_t last_refusal_log_us_ = 0;
};

}  // namespace tollgate::admin

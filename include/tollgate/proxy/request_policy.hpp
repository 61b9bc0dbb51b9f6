// The decision a request gets, as two pure functions: no Asio, no Beast, no clock, no metrics.
//   plan_request:  from the request's facts, the snapshot, the switch and the hold caps, what to do
//                  before any store is asked (bypass, unmatched, bad client key, forward, or decide
//                  with this store request);
//   verdict_for:   from the store's answer, what the client gets (forward, hold, 429, 503), with
//                  its headers and body, and the outcome it is counted under.
// The session carries them out and counts them (src/proxy/outcomes); tests/unit/proxy cover the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"
#include "tollgate/proxy/client_key.hpp"
#include "tollgate/proxy/deadline.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/rule_views.hpp"
#include "tollgate/store/decision.hpp"

namespace tollgate::proxy {

// The request's header fields, as far as a decision reads them (a key header, X-Forwarded-For).
class HeaderSource {
 public:
  virtual std::optional<std::string_view> find(std::string_view name) const = 0;
  // Every field of that name, values joined with ',' in order ("" when there is none).
  virtual std::string joined(std::string_view name) const = 0;

 protected:
  ~HeaderSource() = default;
};

// What the process's configuration fixes for every decision.
struct PolicySettings {
  std::size_t max_held = 0;             // proxy.max_held: more waiting, only immediate permits
  std::size_t max_held_per_bucket = 0;  // proxy.max_held_per_bucket
  const TrustedProxies* trusted = nullptr;
  MissingKey missing_key = MissingKey::anonymous;
  bool deadlines = true;                 // proxy.deadline_headers
  std::int64_t default_latency_us = 100'000;  // proxy.default_upstream_latency_ms
};

struct RequestFacts {
  std::string_view match_path;  // the normalised path rules are matched against
  std::string_view peer;        // the socket peer's address
  const HeaderSource& headers;
  std::int64_t held = 0;        // requests waiting for their slot now, in the whole gateway
  const Budget* budget = nullptr;  // the caller's time budget, if it sent one (proxy/deadline)
  std::int64_t now_us = 0;         // steady clock, for the interface's latency estimate
  std::string_view method = {};    // the request's method, for priority classes by method
};

enum class Step : std::uint8_t {
  bypass,     // the switch (or the rule's own mode) is off: forward, count `outcome`
  unmatched,  // no rule governs the path: forward, count `outcome`
  bad_key,    // a keyBy header is missing or too long: 400 missing_client_key with `detail`
  too_late,   // its time budget does not cover the interface's upstream latency: 429 at once, nothing reserved
  forward,    // a rule governs it but has nothing to decide (its quotas all disabled): forward
  decide,     // ask the store `request`, then verdict_for
};

struct Plan {
  Plan() = default;
  Plan(const Plan&) = delete;  // `request` may point into `keyed_bucket`: the plan stays put
  Plan& operator=(const Plan&) = delete;

  Step step = Step::unmatched;
  Outcome outcome = Outcome::unmatched;  // what bypass, unmatched and forward are counted as
  const config::Rule* rule = nullptr;    // the rule that governs the request (null: none)
  const RuleView* view = nullptr;        // what the proxy made of it once per snapshot
  const config::Rule* channel = nullptr; // its channel rule, if it has one
  bool shadow = false;                   // decided and counted, never enforced
  bool capped = false;                   // too many wait already: only an immediate permit
  std::string detail;                    // bad_key: why
  store::AcquireRequest request{};       // decide: what the store is asked
  std::string keyed_bucket;              // a client-keyed bucket's name (request.bucket.name)
  std::int64_t latency_us = 0;           // the interface's upstream latency estimate (with a budget)
  bool deadline_bound = false;           // the budget shortened the wait the rule allows
  bool probe = false;                    // the latency estimate would refuse it: it goes as a probe
  // Priority classes: the request's class in the rule that has them (its own, else its channel's).
  const config::Priority* priority = nullptr;  // null: neither rule has classes
  std::size_t priority_class = 0;              // index into priority->classes
};
// A request's class in `p`: by its method, or by the class header when a trusted proxy sent it
// (from anyone else, and when it names no class, the default class).
std::size_t priority_class_of(const config::Priority& p, const RequestFacts& facts, const PolicySettings& settings);

// `rules` may be null (no rules loaded yet). The requests held on a rule's bucket are read from its
// series (RuleViews::metrics_of).
void plan_request(const RequestFacts& facts, const RuleViews* rules, config::SwitchMode global,
                  const PolicySettings& settings, Plan& out);

enum class Action : std::uint8_t {
  forward,      // now
  hold,         // after `wait_us` on a timer, then forward
  reject,       // 429 with `body`, Retry-After, RateLimit-Policy and RateLimit
  unavailable,  // 503 limiter_unavailable (store down, policy fail_closed)
};

struct Verdict {
  Action action = Action::forward;
  Outcome outcome = Outcome::forwarded;
  std::int64_t wait_us = 0;          // hold: how long
  long long retry_after_s = 0;       // reject, unavailable: the Retry-After field
  std::string_view policy_header;    // RateLimit-Policy (empty: no RateLimit fields at all)
  std::string limit_header;          // RateLimit
  std::string shadow_header;         // X-Tollgate-Shadow for the upstream (empty: none)
  std::string_view color;            // X-Tollgate-Color for the upstream: a meter's "yellow" ("" none)
  std::string body;                  // reject, unavailable
  std::string bound;                 // reject: the policy that bound it
  bool cap_rejection = false;        // reject because the hold caps allowed no wait
  bool counts_wait = false;          // the wait histogram observes wait_us (admitted, enforced)
};

Verdict verdict_for(const Plan& plan, const store::StoreDecision& decision);
// The 429 of a too_late plan.
Verdict too_late_verdict(const Plan& plan, const Budget& budget);

}  // namespace tollgate::proxy

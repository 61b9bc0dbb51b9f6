// Internal to the proxy: every outcome a request gets is counted here and nowhere else (the global
// and per-bucket outcome counters, policy checks, bound policies, waits, and the access-log record).
#pragma once

#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/request_policy.hpp"

namespace tollgate::proxy {

class OutcomeCounter {
 public:
  OutcomeCounter(Metrics& metrics, AccessRecord& rec) : metrics_(metrics), rec_(rec) {}
  void use(const RuleViews* rules) { rules_ = rules; }  // the snapshot's views the plan came from

  // A request the gateway answered itself, 4xx, before any rule (bad target, Host, method, route,
  // client key, malformed or oversized).
  void bad_request(int status) {
    metrics_.bad_requests.Increment();
    rec_.status = status;
  }
  // A request whose Via already named this gateway: 508 loop_detected.
  void loop_detected() {
    metrics_.loops_detected.Increment();
    rec_.status = 508;
  }
  // A plan that needs no store (bypass, unmatched, forward).
  void planned(const Plan& plan);
  // The store's answer and its verdict.
  void decided(const Plan& plan, const store::StoreDecision& sd, const Verdict& v);
  // A held request whose client left before its slot; `refunded` reservations came back.
  void client_gone(std::uint32_t refunded);

 private:
  void outcome(Outcome o, BucketMetrics* bm);
  // A request of a rule with priority classes: counted under its class too.
  void count_class(const Plan& plan, Outcome o);

  BucketMetrics& bucket(const Plan& plan) const { return rules_->metrics_of(*plan.rule); }

  Metrics& metrics_;
  AccessRecord& rec_;
  const RuleViews* rules_ = nullptr;
};

}  // namespace tollgate::proxy

#include "tollgate/proxy/metrics.hpp"

namespace tollgate::proxy {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::forwarded: return "forwarded";
    case Outcome::delayed: return "delayed";
    case Outcome::rejected: return "rejected";
    case Outcome::bypassed: return "bypassed";
    case Outcome::unmatched: return "unmatched";
    case Outcome::store_error: return "store_error";
    case Outcome::count_: break;
  }
  return "unknown";
}

const char* upstream_error_name(UpstreamError e) {
  switch (e) {
    case UpstreamError::connect: return "connect";
    case UpstreamError::reset: return "reset";
    case UpstreamError::timeout: return "timeout";
    case UpstreamError::count_: break;
  }
  return "unknown";
}

std::string Metrics::render() const {
  std::string out;
  out += "# HELP tollgate_requests_total Requests by throttling outcome.\n# TYPE tollgate_requests_total counter\n";
  for (int i = 0; i < static_cast<int>(Outcome::count_); ++i)
    out += std::string("tollgate_requests_total{outcome=\"") + outcome_name(static_cast<Outcome>(i)) + "\"} " +
           std::to_string(outcomes[i].load(std::memory_order_relaxed)) + "\n";
  out += "# HELP tollgate_upstream_errors_total Upstream failures by kind.\n# TYPE tollgate_upstream_errors_total counter\n";
  for (int i = 0; i < static_cast<int>(UpstreamError::count_); ++i)
    out += std::string("tollgate_upstream_errors_total{kind=\"") + upstream_error_name(static_cast<UpstreamError>(i)) +
           "\"} " + std::to_string(upstream_errors[i].load(std::memory_order_relaxed)) + "\n";
  out += "# HELP tollgate_bad_requests_total Requests the gateway answered itself with a 4xx.\n"
         "# TYPE tollgate_bad_requests_total counter\ntollgate_bad_requests_total " +
         std::to_string(bad_requests.load()) + "\n";
  out += "# HELP tollgate_held_requests Requests waiting for their permit right now.\n"
         "# TYPE tollgate_held_requests gauge\ntollgate_held_requests " + std::to_string(held.load()) + "\n";
  out += "# HELP tollgate_refunds_total Reservations given back because the client left before its slot.\n"
         "# TYPE tollgate_refunds_total counter\ntollgate_refunds_total " + std::to_string(refunds.load()) + "\n";
  out += "# HELP tollgate_store_degraded_total Decisions made by the local fallback while the shared store was down.\n"
         "# TYPE tollgate_store_degraded_total counter\ntollgate_store_degraded_total " +
         std::to_string(store_degraded.load()) + "\n";
  out += "# HELP tollgate_connections Open client connections.\n"
         "# TYPE tollgate_connections gauge\ntollgate_connections " + std::to_string(connections.load()) + "\n";
  return out;
}

}  // namespace tollgate::proxy

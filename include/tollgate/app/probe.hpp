// tollgate --check --probe: connects to every upstream before any traffic flows and says what an
// operator needs to know about it: for https:// ones the negotiated version and cipher, the
// certificate chain, whether the name matched, the days to expiry and whether a second
// connection resumed the session. Sends no HTTP request (no call is spent on a supplier).
#pragma once

#include <ostream>

#include "tollgate/config/gateway_config.hpp"

namespace tollgate::app {

// Returns 0 when every upstream connected (and verified), 1 otherwise; reports on `out`.
int probe_upstreams(const config::GatewayConfig& cfg, std::ostream& out);

}  // namespace tollgate::app

#include "tollgate/config/config_source.hpp"

namespace tollgate::config {

LoadResult FileSource::from_rows(const std::vector<RawRow>& rows, bool switch_on) {
  LoadResult r;
  r.rules = validate_rows(rows);
  if (!r.rules.rejected.empty()) {
    std::string msg;
    for (const auto& bad : r.rules.rejected) msg += (msg.empty() ? "" : "; ") + bad.message();
    throw ConfigError(msg);
  }
  r.switch_on = switch_on;
  return r;
}

LoadResult FileSource::load() {
  const GatewayConfig c = load_gateway_config(path_);
  return from_rows(c.limits.rows, c.limits.switch_on);
}

}  // namespace tollgate::config

#include "tollgate/config/config_source.hpp"

namespace tollgate::config {

LoadResult FileSource::from_rows(const std::vector<RawRow>& rows, SwitchMode switch_mode) {
  LoadResult r;
  r.rules = validate_rows(rows);
  if (!r.rules.rejected.empty()) {
    std::string msg;
    for (const auto& bad : r.rules.rejected) msg += (msg.empty() ? "" : "; ") + bad.message();
    throw ConfigError(msg);
  }
  r.switch_mode = switch_mode;
  return r;
}

LoadResult FileSource::load() {
  const GatewayConfig c = load_gateway_config(path_);
  return from_rows(c.limits.rows, c.limits.switch_mode);
}

}  // namespace tollgate::config

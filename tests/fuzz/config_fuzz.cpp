// libFuzzer: the configuration file parser and the rule validator must never crash, hang or
// accept a rule that breaks its own invariants, whatever bytes they are given.
#include <cstdint>
#include <string>

#include "tollgate/config/config_source.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/snapshot.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace tollgate::config;
  try {
    const GatewayConfig c = parse_gateway_config(text);
    const ValidatedRules v = validate_rows(c.limits.rows);
    for (const Rule& r : v.rules) {
      // Invariants the request path relies on.
      if (!(r.rate_limit > 0) || r.cache_s < 0 || r.cache_s > kMaxCache) __builtin_trap();
      if (!r.channel && check_interface_url(r.interface_url) != "") __builtin_trap();
      (void)tollgate::limiter::shape_of(r.params);
    }
    auto snap = make_snapshot(v, 1, "fuzz");
    (void)snap->match("/ibe/shopping/search");
  } catch (const ConfigError&) {
  }
  try {
    (void)validate_rows(parse_rule_rows(text, "rules"));
  } catch (const ConfigError&) {
  }
  return 0;
}

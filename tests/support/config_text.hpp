// Gateway config texts for unit tests: a minimal file around a rules array, and the error its
// rules give as a start or `--check` would report it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "tollgate/config/config_source.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::testing {

// An enabled interface rule: its id, interfaceUrl and rateLimit, everything else as a row leaves it.
inline config::RawRow rule_row(std::int64_t id, std::string url, double rate) {
  config::RawRow r;
  r.config_id = id;
  r.interface_url = std::move(url);
  r.rate_limit = rate;
  r.status = 1;
  return r;
}

inline std::string with_rules(const std::string& rules) {
  std::string s = R"({"upstreams":{"ibe":{"url":"http://127.0.0.1:9000"}},
  "routes":[{"prefix":"/","upstream":"ibe"}], "limits":{"rules":RULES}})";
  s.replace(s.find("RULES"), 5, rules);
  return s;
}

// The error a file's rules give (what a start or --check prints), or "".
inline std::string error_of(const std::string& text) {
  try {
    const config::GatewayConfig c = config::parse_gateway_config(text);
    config::FileSource::from_rows(c.limits.rows, c.limits.switch_mode);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

// A JSON array of rule rows, validated as a config source validates them.
inline config::ValidatedRules rules_of(const std::string& json_rows) {
  return config::validate_rows(config::parse_rule_rows(json_rows, "rules"));
}

// The first rejection of those rows, as the gateway words it ("rules[0].cost: ..."), or "".
inline std::string first_error(const std::string& json_rows) {
  const config::ValidatedRules v = rules_of(json_rows);
  return v.rejected.empty() ? "" : v.rejected.front().message();
}

}  // namespace tollgate::testing

// Gateway config texts for unit tests: a minimal file around a rules array, and the error its
// rules give as a start or `--check` would report it.
#pragma once

#include <string>

#include "tollgate/config/config_source.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::testing {

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

}  // namespace tollgate::testing

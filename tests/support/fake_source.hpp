// A ConfigSource whose rows, fingerprint and failures a unit test sets by hand.
#pragma once

#include <stdexcept>

#include "tollgate/config/config_source.hpp"

namespace tollgate::testing {

class FakeSource final : public config::ConfigSource {
 public:
  std::vector<config::RawRow> rows;
  std::optional<config::SwitchRecord> fleet_switch;
  std::string fp = "v1";
  std::string failure;  // non-empty: load() and fingerprint() throw this
  int loads = 0;

  config::LoadResult load() override {
    if (!failure.empty()) throw std::runtime_error(failure);
    ++loads;
    config::LoadResult r;
    r.rules = config::validate_rows(rows);
    r.fleet_switch = fleet_switch;
    return r;
  }
  std::optional<std::string> fingerprint() override {
    if (!failure.empty()) throw std::runtime_error(failure);
    return fp;
  }
  std::string describe() const override { return "fake"; }
  bool polled() const override { return true; }

  static config::RawRow row(std::int64_t id, std::string url, double rate, std::int64_t status = 1) {
    config::RawRow r;
    r.config_id = id;
    r.interface_url = std::move(url);
    r.rate_limit = rate;
    r.status = status;
    r.origin = "fake[" + std::to_string(id) + "]";
    return r;
  }
};

}  // namespace tollgate::testing

// The ConfigSource seam: produces the rules for a new Snapshot. Implementations: the JSON file
// (embedded default) and, later, MySQL. A failed load throws ConfigError and the caller keeps the
// previous snapshot.
#pragma once

#include <optional>
#include <string>

#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/rule.hpp"

namespace tollgate::config {

struct LoadResult {
  ValidatedRules rules;
  std::optional<bool> switch_on;  // set when the source carries the switch
};

class ConfigSource {
 public:
  virtual ~ConfigSource() = default;
  virtual LoadResult load() = 0;
  virtual std::string describe() const = 0;
};

// Rules from the "limits.rules" array of the gateway's JSON file. Files are edited by hand and
// checked before use, so any rejected row fails the whole load with every reason listed.
class FileSource final : public ConfigSource {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {}
  LoadResult load() override;
  std::string describe() const override { return "file:" + path_; }

  // Validates rows already read with the file (used at start-up, so the file is read once).
  static LoadResult from_rows(const std::vector<RawRow>& rows, bool switch_on);

 private:
  std::string path_;
};

}  // namespace tollgate::config

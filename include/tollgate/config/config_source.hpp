// The ConfigSource seam: produces the rules for a new Snapshot. Implementations: the JSON file
// (embedded default) and, later, MySQL. A failed load throws ConfigError and the caller keeps the
// previous snapshot.
#pragma once

#include <optional>
#include <string>

#include "tollgate/config/gateway_config.hpp"
#include "tollgate/config/rule.hpp"
#include "tollgate/config/switch_state.hpp"

namespace tollgate::config {

struct SwitchRecord {
  SwitchMode mode = SwitchMode::enforce;
  std::string changed_by;
  std::int64_t changed_at_ms = 0;
  std::int64_t revert_at_ms = 0;  // 0: none scheduled
  SwitchMode revert_to = SwitchMode::enforce;
  bool operator==(const SwitchRecord&) const = default;
};

struct LoadResult {
  ValidatedRules rules;
  std::optional<SwitchMode> switch_mode;  // the file's start value
  std::optional<SwitchRecord> fleet_switch;  // set when the source carries the fleet's switch
  std::optional<std::string> switch_error;    // the switch row is invalid (why): not applied
};

class ConfigSource {
 public:
  virtual ~ConfigSource() = default;
  // Throws (ConfigError or any std::exception) when nothing could be loaded.
  virtual LoadResult load() = 0;
  virtual std::string describe() const = 0;
  // A cheap value that changes whenever load() would return something else; nullopt: cannot tell.
  virtual std::optional<std::string> fingerprint() { return std::nullopt; }
  // Whether a background loop should poll this source (files are reloaded on demand only).
  virtual bool polled() const { return false; }
  // Called on every poll before the fingerprint: time-driven upkeep (a due switch revert).
  virtual void tick() {}
};

// Where a fleet-wide switch change is written (MySQL). Without one the switch is per process.
struct SwitchChange {
  SwitchMode previous = SwitchMode::enforce;
  SwitchRecord now;
};
class SwitchWriter {
 public:
  virtual ~SwitchWriter() = default;
  // Writes the switch and its audit row atomically. Throws on failure (nothing is changed then).
  // revert_after_ms > 0: the row returns to the previous state by itself after that long.
  virtual SwitchChange write_switch(SwitchMode mode, const std::string& who, std::int64_t revert_after_ms) = 0;
};

// Rules from the "limits.rules" array of the gateway's JSON file. Files are edited by hand and
// checked before use, so any rejected row fails the whole load with every reason listed.
class FileSource final : public ConfigSource {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {}
  LoadResult load() override;
  std::string describe() const override { return "file:" + path_; }

  // Validates rows already read with the file (used at start-up, so the file is read once).
  static LoadResult from_rows(const std::vector<RawRow>& rows, SwitchMode switch_mode);

 private:
  std::string path_;
};

}  // namespace tollgate::config

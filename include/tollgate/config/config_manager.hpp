// Keeps the active Snapshot in step with a ConfigSource: loads, validates and swaps off the request
// threads. A failed load keeps the previous snapshot; its error is recorded and retried with backoff.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "tollgate/config/config_source.hpp"
#include "tollgate/config/snapshot.hpp"
#include "tollgate/config/switch_state.hpp"

namespace tollgate::config {

struct SourceStatus {
  std::string source;               // describe() of the source
  bool healthy = false;             // the last attempt to read the source succeeded
  bool using_fallback = false;      // serving rules that did not come from the source
  std::string last_error;           // of the most recent failure ("" if none since the last success)
  std::int64_t last_success_ms = 0; // Unix ms of the last successful read (load or fingerprint check)
  std::int64_t last_attempt_ms = 0;
  std::uint64_t loads_ok = 0;       // snapshots built from the source
  std::uint64_t loads_failed = 0;
  std::size_t rejected_rows = 0;    // in the active snapshot
};

struct ReloadResult {
  bool ok = false;
  bool changed = false;
  std::uint64_t version = 0;
  std::string error;
};

class ConfigManager {
 public:
  ConfigManager(std::shared_ptr<ConfigSource> source, SnapshotHolder& snapshots, SwitchState& switch_state,
                std::chrono::milliseconds poll_interval);
  ~ConfigManager();

  // Loads now and swaps in the result (forced: no fingerprint shortcut). `accept`, when given,
  // runs after a successful load and before the swap: when it throws, the load counts as failed
  // with its message and nothing is swapped (a SIGHUP applies the file's route table there, so
  // that a file is applied whole or not at all). Never throws.
  ReloadResult reload(const std::function<void()>& accept = {});
  // One poll: checks the fingerprint and loads only when it changed (what the thread does).
  ReloadResult poll_once() { return load_and_swap(false); }
  // Installs rules read elsewhere: the file at start, or the fallback while the source is down.
  void install(ValidatedRules rules, std::string origin, bool fallback);
  // Starts the polling thread if the source is polled.
  void start();
  void stop();
  SourceStatus status() const;
  std::chrono::milliseconds poll_interval() const { return poll_; }

 private:
  ReloadResult load_and_swap(bool force, const std::function<void()>& accept = {});
  void loop();
  void log_rejections(const ValidatedRules& rules);

  std::shared_ptr<ConfigSource> source_;
  SnapshotHolder& snapshots_;
  SwitchState& switch_;
  std::chrono::milliseconds poll_;

  std::mutex load_mu_;  // one load at a time (poller, admin, signal)
  std::optional<std::string> last_fingerprint_;
  std::optional<SwitchRecord> last_switch_;
  std::optional<std::string> last_switch_error_;
  std::set<std::string> logged_rejections_;
  std::uint64_t version_ = 0;

  mutable std::mutex status_mu_;
  SourceStatus status_;

  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tollgate::config

#include "tollgate/config/config_manager.hpp"
#include "tollgate/log_line.hpp"

#include <algorithm>
#include <iostream>

namespace tollgate::config {

ConfigManager::ConfigManager(std::shared_ptr<ConfigSource> source, SnapshotHolder& snapshots,
                             SwitchState& switch_state, std::chrono::milliseconds poll_interval)
    : source_(std::move(source)), snapshots_(snapshots), switch_(switch_state), poll_(poll_interval) {
  status_.source = source_->describe();
}

ConfigManager::~ConfigManager() { stop(); }

void ConfigManager::log_rejections(const ValidatedRules& rules) {
  // Logged once per distinct problem, not on every reload.
  std::set<std::string> now;
  for (const auto& r : rules.rejected) {
    const std::string msg = r.message();
    now.insert(msg);
    if (!logged_rejections_.count(msg)) log_line("tollgate: warn: rule rejected: ", msg);
  }
  logged_rejections_ = std::move(now);
}

void ConfigManager::install(ValidatedRules rules, std::string origin, bool fallback) {
  std::lock_guard lock(load_mu_);
  const std::size_t rejected = rules.rejected.size();
  snapshots_.set(make_snapshot(std::move(rules), ++version_, std::move(origin)));
  std::lock_guard s(status_mu_);
  status_.using_fallback = fallback;
  status_.rejected_rows = rejected;
  if (!fallback) {
    status_.healthy = true;
    status_.last_success_ms = status_.last_attempt_ms = SwitchState::now_ms();
    ++status_.loads_ok;
  }
}

ReloadResult ConfigManager::load_and_swap(bool force, const std::function<void()>& accept) {
  std::lock_guard lock(load_mu_);
  ReloadResult out;
  const std::int64_t now_ms = SwitchState::now_ms();
  try {
    if (!force) source_->tick();
    std::optional<std::string> fp = source_->fingerprint();
    if (!force && fp && last_fingerprint_ && *fp == *last_fingerprint_ && snapshots_.get()) {
      out.ok = true;
      out.version = version_;
      std::lock_guard s(status_mu_);
      if (!status_.healthy) log_line("tollgate: config source ", status_.source, " is back");
      status_.healthy = true;
      status_.last_error.clear();
      status_.last_success_ms = status_.last_attempt_ms = now_ms;
      return out;
    }
    LoadResult loaded = source_->load();
    if (accept) accept();
    if (auto prev = snapshots_.get()) keep_last_good(loaded.rules, *prev);
    // The fingerprint taken before the load: a change made during the load shows on the next poll.
    last_fingerprint_ = fp;
    log_rejections(loaded.rules);
    const std::size_t rejected = loaded.rules.rejected.size();
    const std::size_t active = static_cast<std::size_t>(
        std::count_if(loaded.rules.rules.begin(), loaded.rules.rules.end(), [](const Rule& r) { return r.enabled; }));
    snapshots_.set(make_snapshot(std::move(loaded.rules), ++version_, source_->describe()));
    if (loaded.switch_error != last_switch_error_) {  // logged once per distinct problem
      if (loaded.switch_error) log_line("tollgate: warn: ", *loaded.switch_error);
      last_switch_error_ = loaded.switch_error;
    }
    if (loaded.fleet_switch && loaded.fleet_switch != last_switch_) {
      const SwitchRecord& sw = *loaded.fleet_switch;
      if (switch_.mode() != sw.mode)
        log_line("tollgate: switch ", switch_mode_name(sw.mode), " (changed by ", sw.changed_by, ")");
      switch_.set(sw.mode, sw.changed_by, sw.changed_at_ms, "mysql", sw.revert_at_ms, sw.revert_to);
      last_switch_ = loaded.fleet_switch;
    }
    log_line("tollgate: config v", version_, " loaded from ", source_->describe(), ": ", active,
             " enabled rules, ", rejected, " rejected rows");
    out.ok = true;
    out.changed = true;
    out.version = version_;
    std::lock_guard s(status_mu_);
    if (!status_.healthy && status_.loads_failed > 0)
      log_line("tollgate: config source ", status_.source, " is back");
    status_.healthy = true;
    status_.using_fallback = false;
    status_.last_error.clear();
    status_.last_success_ms = status_.last_attempt_ms = now_ms;
    status_.rejected_rows = rejected;
    ++status_.loads_ok;
  } catch (const std::exception& e) {
    out.ok = false;
    out.error = e.what();
    out.version = version_;
    std::lock_guard s(status_mu_);
    // Logged once per incident: the first failure after a success (or the very first attempt).
    if (status_.healthy || status_.loads_failed == 0)
      log_line("tollgate: warn: config source ", status_.source, " failed, keeping config v", version_, ": ",
               out.error);
    status_.healthy = false;
    status_.last_error = out.error;
    status_.last_attempt_ms = now_ms;
    ++status_.loads_failed;
  }
  return out;
}

ReloadResult ConfigManager::reload(const std::function<void()>& accept) { return load_and_swap(true, accept); }

void ConfigManager::start() {
  if (!source_->polled() || thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void ConfigManager::stop() {
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ConfigManager::loop() {
  // Backoff after failures: poll, 2*poll, 4*poll ... capped at 2 s, so recovery is noticed quickly.
  auto delay = poll_;
  const auto max_delay = std::max<std::chrono::milliseconds>(poll_, std::chrono::milliseconds(2000));
  for (;;) {
    {
      std::unique_lock lock(wake_mu_);
      if (wake_.wait_for(lock, delay, [this] { return stopping_; })) return;
    }
    const ReloadResult r = poll_once();
    delay = r.ok ? poll_ : std::min(max_delay, delay * 2);
  }
}

SourceStatus ConfigManager::status() const {
  std::lock_guard s(status_mu_);
  return status_;
}

}  // namespace tollgate::config

// An immutable set of rules as the request path sees it. Reloads build a new Snapshot and swap a
// shared_ptr; a request keeps the snapshot it started with.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "tollgate/config/rule.hpp"
#include "tollgate/config/suffix_index.hpp"

namespace tollgate::config {

struct Snapshot {
  std::vector<Rule> rules;            // all valid rows, enabled or not
  std::vector<RejectedRow> rejected;  // rows that failed validation, with reasons
  SuffixIndex index;                  // enabled rules only
  std::uint64_t version = 0;
  limiter::Micros loaded_at_us = 0;   // steady clock
  std::string source;                 // "file:conf/gateway.json", "mysql:..."

  // The enabled rule governing `path` (query excluded), or nullptr.
  const Rule* match(std::string_view path) const;
  const Rule* find_by_url(std::string_view url) const;
};

std::shared_ptr<const Snapshot> make_snapshot(ValidatedRules validated, std::uint64_t version, std::string source);

// Holds the current snapshot; readers never block a reload and a reload never blocks readers.
class SnapshotHolder {
 public:
  std::shared_ptr<const Snapshot> get() const { return current_.load(std::memory_order_acquire); }
  void set(std::shared_ptr<const Snapshot> s) { current_.store(std::move(s), std::memory_order_release); }

 private:
  std::atomic<std::shared_ptr<const Snapshot>> current_;
};

}  // namespace tollgate::config

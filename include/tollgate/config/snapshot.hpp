// An immutable set of rules as the request path sees it. Reloads build a new Snapshot and swap a
// shared_ptr; a request keeps the snapshot it started with.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tollgate/config/rule.hpp"
#include "tollgate/config/suffix_index.hpp"

namespace tollgate::config {

struct Snapshot {
  std::vector<Rule> rules;            // all valid rows, enabled or not
  std::vector<RejectedRow> rejected;  // rows that failed validation, with reasons
  SuffixIndex index;                  // enabled interface rules only
  std::unordered_map<std::string, std::size_t> channels;  // channelType -> enabled channel rule
  std::uint64_t version = 0;
  limiter::Micros loaded_at_us = 0;   // steady clock
  std::string source;                 // "file:conf/gateway.json", "mysql:..."

  // The enabled rule governing `path` (query excluded), or nullptr.
  const Rule* match(std::string_view path) const;
  // The enabled channel limit an interface rule also draws from, or nullptr.
  const Rule* channel_of(const Rule& rule) const;
  // A rule by its bucket name (interfaceUrl or "channel:<type>"); enabled rules first.
  const Rule* find_bucket(std::string_view bucket) const;
};

// "Bad input is explained, never applied": a rejected row (or quota row) whose configId (quotaId)
// had a valid version in `prev` keeps that version in force, and its rejection says so. A new bad
// row has nothing to keep and limits nothing. A kept version still holds its interfaceUrl (or
// channel): a later row claiming it is rejected as its duplicate, as if the bad edit had not been
// made (see settle_rows). `next` must come from validate_rows.
void keep_last_good(ValidatedRules& next, const Snapshot& prev);

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

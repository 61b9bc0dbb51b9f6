// Finds the rule governing a request path: the longest interfaceUrl that is a suffix of the path on
// a '/' segment boundary. One hash lookup per candidate suffix, so the cost depends on the path's
// depth (capped by the deepest rule), never on the number of rules.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tollgate::config {

class SuffixIndex {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  // Adds `suffix` -> `value`. The suffix is a validated interfaceUrl ("/a/b"). `fold_case`: it
  // matches whatever the case of its ASCII letters in the path (other bytes, escapes included,
  // compare as they are; escapes are upper-case hex in both). Two suffixes that are equal when
  // folded, one of them folding, must not both be added (config validation refuses them).
  void add(std::string suffix, std::size_t value, bool fold_case = false);
  // Path without query. Returns the value of the longest matching suffix, or npos.
  std::size_t match(std::string_view path) const;
  std::size_t size() const { return map_.size() + folded_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Map = std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>>;
  // Where the deepest suffix any rule could have begins in `path` ('/' at that index).
  std::size_t deepest_start(std::string_view path) const;
  std::size_t match_folded(std::string_view path) const;

  Map map_;     // exact suffixes
  Map folded_;  // case-insensitive suffixes, in lower case
  std::size_t max_segments_ = 0;
  std::size_t max_folded_length_ = 0;  // of folded_'s keys: a longer candidate cannot match one
};

}  // namespace tollgate::config

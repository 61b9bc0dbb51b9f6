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

  // Adds `suffix` -> `value`. The suffix is a validated interfaceUrl ("/a/b").
  void add(std::string suffix, std::size_t value);
  // Path without query. Returns the value of the longest matching suffix, or npos.
  std::size_t match(std::string_view path) const;
  std::size_t size() const { return map_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>> map_;
  std::size_t max_segments_ = 0;
};

}  // namespace tollgate::config

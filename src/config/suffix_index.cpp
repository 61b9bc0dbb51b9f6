#include "tollgate/config/suffix_index.hpp"

#include <algorithm>

namespace tollgate::config {

void SuffixIndex::add(std::string suffix, std::size_t value) {
  const std::size_t segments = static_cast<std::size_t>(std::count(suffix.begin(), suffix.end(), '/'));
  max_segments_ = std::max(max_segments_, segments);
  map_.insert_or_assign(std::move(suffix), value);
}

std::size_t SuffixIndex::match(std::string_view path) const {
  if (map_.empty() || path.empty()) return npos;
  // Start at the '/' that begins the deepest suffix any rule could have, then move right:
  // the first hit is the longest match.
  std::size_t start = path.size();
  std::size_t seen = 0;
  while (seen < max_segments_) {
    const std::size_t slash = path.rfind('/', start == 0 ? 0 : start - 1);
    if (slash == std::string_view::npos) break;
    start = slash;
    ++seen;
    if (slash == 0) break;
  }
  for (std::size_t pos = start; pos < path.size();) {
    if (path[pos] == '/') {
      const std::string_view candidate = path.substr(pos);
      if (auto it = map_.find(candidate); it != map_.end()) return it->second;
    }
    const std::size_t next = path.find('/', pos + 1);
    if (next == std::string_view::npos) break;
    pos = next;
  }
  return npos;
}

}  // namespace tollgate::config

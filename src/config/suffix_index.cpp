#include "tollgate/config/suffix_index.hpp"

#include <algorithm>
#include <array>

namespace tollgate::config {

namespace {
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
}  // namespace

void SuffixIndex::add(std::string suffix, std::size_t value, bool fold_case) {
  const std::size_t segments = static_cast<std::size_t>(std::count(suffix.begin(), suffix.end(), '/'));
  max_segments_ = std::max(max_segments_, segments);
  if (!fold_case) {
    map_.insert_or_assign(std::move(suffix), value);
    return;
  }
  std::transform(suffix.begin(), suffix.end(), suffix.begin(), lower);
  max_folded_length_ = std::max(max_folded_length_, suffix.size());
  folded_.insert_or_assign(std::move(suffix), value);
}

std::size_t SuffixIndex::deepest_start(std::string_view path) const {
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
  return start;
}

std::size_t SuffixIndex::match(std::string_view path) const {
  if (path.empty()) return npos;
  if (!folded_.empty()) return match_folded(path);
  if (map_.empty()) return npos;
  for (std::size_t pos = deepest_start(path); pos < path.size();) {
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

// With case-insensitive suffixes: each candidate is looked up as it is among the exact ones and in
// lower case among the folded ones. Only the path's tail that a folded key can span is lowered,
// once, into a buffer on the stack (a validated interfaceUrl has at most 128 characters).
std::size_t SuffixIndex::match_folded(std::string_view path) const {
  std::array<char, 256> stack;
  std::string heap;
  const std::size_t tail = std::min(path.size(), max_folded_length_);
  char* low = stack.data();
  if (tail > stack.size()) {
    heap.resize(tail);
    low = heap.data();
  }
  const std::size_t tail_at = path.size() - tail;
  std::transform(path.begin() + static_cast<std::ptrdiff_t>(tail_at), path.end(), low, lower);
  for (std::size_t pos = deepest_start(path); pos < path.size();) {
    if (path[pos] == '/') {
      const std::string_view candidate = path.substr(pos);
      if (!map_.empty())
        if (auto it = map_.find(candidate); it != map_.end()) return it->second;
      if (pos >= tail_at)
        if (auto it = folded_.find(std::string_view(low + (pos - tail_at), candidate.size())); it != folded_.end())
          return it->second;
    }
    const std::size_t next = path.find('/', pos + 1);
    if (next == std::string_view::npos) break;
    pos = next;
  }
  return npos;
}

}  // namespace tollgate::config

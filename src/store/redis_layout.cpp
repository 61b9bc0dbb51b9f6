#include "tollgate/store/redis_layout.hpp"

#include <charconv>
#include <map>

#include "tollgate/store/cluster_slot.hpp"

namespace tollgate::store {

std::uint16_t RedisLayout::node_of(std::string_view key) const {
  if (owner.empty()) return nodes.empty() ? kNoOwner : 0;
  return owner[cluster_slot(key)];
}

std::string RedisLayout::describe() const {
  if (owner.empty()) return !nodes.empty() ? nodes.front().to_string() : note.empty() ? std::string("(none)") : note;
  std::string out;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (n > 0) out += ", ";
    out += nodes[n].to_string() + " (slots ";
    bool first = true;
    for (std::size_t s = 0; s < owner.size(); ++s) {
      if (owner[s] != n || (s > 0 && owner[s - 1] == n)) continue;
      std::size_t e = s;
      while (e + 1 < owner.size() && owner[e + 1] == n) ++e;
      if (!first) out += ",";
      first = false;
      out += std::to_string(s);
      if (e > s) out.append(1, '-').append(std::to_string(e));
    }
    out += ")";
  }
  std::size_t unserved = 0;
  for (const auto o : owner) unserved += o == kNoOwner;
  if (unserved > 0) out += "; " + std::to_string(unserved) + " slots unserved";
  return out;
}

std::optional<RedisLayout> layout_of(const std::vector<SlotRange>& ranges) {
  RedisLayout out;
  out.owner.assign(kClusterSlots, RedisLayout::kNoOwner);
  for (const SlotRange& r : ranges) {
    if (r.first > r.last || r.last >= kClusterSlots || r.primary.host.empty() || r.primary.port == 0) return std::nullopt;
    std::size_t n = 0;
    while (n < out.nodes.size() && !(out.nodes[n] == r.primary)) ++n;
    if (n == out.nodes.size()) out.nodes.push_back(r.primary);
    for (std::size_t s = r.first; s <= r.last; ++s) out.owner[s] = static_cast<std::uint16_t>(n);
  }
  if (out.nodes.empty()) return std::nullopt;
  return out;
}

std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect out;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    out.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  const auto s = std::from_chars(error.data(), error.data() + space, slot);
  if (s.ec != std::errc() || s.ptr != error.data() + space || slot >= kClusterSlots) return std::nullopt;
  out.slot = static_cast<std::uint16_t>(slot);
  const std::string_view addr = error.substr(space + 1);
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  unsigned port = 0;
  const auto p = std::from_chars(addr.data() + colon + 1, addr.data() + addr.size(), port);
  if (p.ec != std::errc() || p.ptr != addr.data() + addr.size() || port == 0 || port > 65535) return std::nullopt;
  out.to.host = std::string(addr.substr(0, colon));
  out.to.port = static_cast<std::uint16_t>(port);
  return out;
}

}  // namespace tollgate::store

#include "peer_slots.hpp"

#include <cstring>

namespace tollgate::proxy {

PeerKey peer_key_v4(const std::array<std::uint8_t, 4>& v4) {
  PeerKey k{};
  k[10] = 0xff;
  k[11] = 0xff;
  std::memcpy(k.data() + 12, v4.data(), 4);
  return k;
}

void PeerSlot::reset() {
  if (PeerSlots* owner = std::exchange(owner_, nullptr)) owner->release(key_);
}

std::size_t PeerSlots::KeyHash::operator()(const PeerKey& k) const noexcept {
  std::uint64_t a, b;
  std::memcpy(&a, k.data(), 8);
  std::memcpy(&b, k.data() + 8, 8);
  std::uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<std::size_t>(h);
}

PeerSlots::PeerSlots(std::uint32_t max_per_peer)
    : max_(max_per_peer), shards_(max_per_peer > 0 ? std::make_unique<Shard[]>(kShards) : nullptr) {}

PeerSlots::Shard& PeerSlots::shard_of(const PeerKey& k) const {
  // The last bytes vary most between clients (the host part of an address).
  const std::size_t i = (static_cast<std::size_t>(k[15]) ^ (static_cast<std::size_t>(k[14]) << 3) ^ k[7]) % kShards;
  return shards_[i];
}

bool PeerSlots::acquire(const PeerKey& peer, PeerSlot& slot) {
  slot.reset();
  if (max_ == 0) return true;
  Shard& s = shard_of(peer);
  {
    std::lock_guard lock(s.mu);
    std::uint32_t& n = s.count[peer];
    if (n >= max_) return false;  // (n > 0 here: the entry was there)
    ++n;
  }
  slot = PeerSlot(this, peer);
  return true;
}

void PeerSlots::release(const PeerKey& peer) {
  Shard& s = shard_of(peer);
  std::lock_guard lock(s.mu);
  const auto it = s.count.find(peer);
  if (it == s.count.end()) return;
  if (--it->second == 0) s.count.erase(it);
}

std::uint32_t PeerSlots::held(const PeerKey& peer) const {
  if (max_ == 0) return 0;
  Shard& s = shard_of(peer);
  std::lock_guard lock(s.mu);
  const auto it = s.count.find(peer);
  return it == s.count.end() ? 0 : it->second;
}

std::size_t PeerSlots::peers() const {
  if (max_ == 0) return 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < kShards; ++i) {
    std::lock_guard lock(shards_[i].mu);
    n += shards_[i].count.size();
  }
  return n;
}

}  // namespace tollgate::proxy

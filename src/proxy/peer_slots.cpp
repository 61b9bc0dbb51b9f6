#include "peer_slots.hpp"

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace tollgate::proxy {

PeerKey peer_key_v4(const std::array<std::uint8_t, 4>& v4) {
  PeerKey k{};
  k[10] = 0xff;
  k[11] = 0xff;
  std::memcpy(k.data() + 12, v4.data(), 4);
  return k;
}

namespace {
struct KeyHash {
  std::size_t operator()(const PeerKey& k) const noexcept {
    std::uint64_t a, b;
    std::memcpy(&a, k.data(), 8);
    std::memcpy(&b, k.data() + 8, 8);
    std::uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return static_cast<std::size_t>(h);
  }
};
struct alignas(64) Shard {
  std::mutex mu;
  std::unordered_map<PeerKey, std::uint32_t, KeyHash> count;  // an address with no slot has no entry
};
}  // namespace

struct PeerCounts {
  static constexpr std::size_t kShards = 32;
  std::array<Shard, kShards> shards;
  Shard& shard_of(const PeerKey& k) {
    // The last bytes vary most between clients (the host part of an address).
    return shards[(static_cast<std::size_t>(k[15]) ^ (static_cast<std::size_t>(k[14]) << 3) ^ k[7]) % kShards];
  }
  void release(const PeerKey& peer) {
    Shard& s = shard_of(peer);
    std::lock_guard lock(s.mu);
    const auto it = s.count.find(peer);
    if (it == s.count.end()) return;
    if (--it->second == 0) s.count.erase(it);
  }
};

void PeerSlot::reset() {
  if (const std::shared_ptr<PeerCounts> counts = std::exchange(counts_, nullptr)) counts->release(key_);
}

PeerSlots::PeerSlots(std::uint32_t max_per_peer)
    : max_(max_per_peer), counts_(max_per_peer > 0 ? std::make_shared<PeerCounts>() : nullptr) {}

bool PeerSlots::acquire(const PeerKey& peer, PeerSlot& slot) {
  slot.reset();
  if (max_ == 0) return true;
  Shard& s = counts_->shard_of(peer);
  {
    std::lock_guard lock(s.mu);
    std::uint32_t& n = s.count[peer];
    if (n >= max_) return false;  // (n > 0 here: the entry was there)
    ++n;
  }
  slot = PeerSlot(counts_, peer);
  return true;
}

std::uint32_t PeerSlots::held(const PeerKey& peer) const {
  if (max_ == 0) return 0;
  Shard& s = counts_->shard_of(peer);
  std::lock_guard lock(s.mu);
  const auto it = s.count.find(peer);
  return it == s.count.end() ? 0 : it->second;
}

std::size_t PeerSlots::peers() const {
  if (max_ == 0) return 0;
  std::size_t n = 0;
  for (Shard& s : counts_->shards) {
    std::lock_guard lock(s.mu);
    n += s.count.size();
  }
  return n;
}

}  // namespace tollgate::proxy

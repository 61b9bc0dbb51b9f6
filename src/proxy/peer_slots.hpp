// Internal to the proxy: open client connections counted per client address (the socket peer),
// for proxy.max_connections_per_client. Taken when a connection is accepted and given back when it
// closes, from any worker thread: the counts are in shards, each a small map under its own mutex,
// so that workers accepting from different addresses rarely meet. Nothing here is on a request's
// path, only on accept and close.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace tollgate::proxy {

// An address as 16 bytes: IPv6 as it is, IPv4 as IPv4-mapped IPv6 (so that a client reaching a
// dual-stack listener over IPv4 counts as its IPv4 address).
using PeerKey = std::array<std::uint8_t, 16>;

PeerKey peer_key_v4(const std::array<std::uint8_t, 4>& v4);

class PeerSlots;

// One connection's slot: given back when destroyed (or reset). Empty when the cap is off.
class PeerSlot {
 public:
  PeerSlot() = default;
  PeerSlot(PeerSlot&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), key_(o.key_) {}
  PeerSlot& operator=(PeerSlot&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = std::exchange(o.owner_, nullptr);
      key_ = o.key_;
    }
    return *this;
  }
  PeerSlot(const PeerSlot&) = delete;
  PeerSlot& operator=(const PeerSlot&) = delete;
  ~PeerSlot() { reset(); }
  void reset();
  bool holds() const { return owner_ != nullptr; }

 private:
  friend class PeerSlots;
  PeerSlot(PeerSlots* owner, const PeerKey& key) : owner_(owner), key_(key) {}
  PeerSlots* owner_ = nullptr;
  PeerKey key_{};
};

class PeerSlots {
 public:
  // max_per_peer 0: no cap (nothing is counted).
  explicit PeerSlots(std::uint32_t max_per_peer);
  PeerSlots(const PeerSlots&) = delete;
  PeerSlots& operator=(const PeerSlots&) = delete;

  // A slot for a connection from `peer` into `slot`; false when `peer` holds max_per_peer already
  // (then `slot` is left empty). With the cap off: true, `slot` empty.
  bool acquire(const PeerKey& peer, PeerSlot& slot);
  // The connections `peer` holds now.
  std::uint32_t held(const PeerKey& peer) const;
  // The addresses holding at least one slot now.
  std::size_t peers() const;

 private:
  friend class PeerSlot;
  void release(const PeerKey& peer);
  struct KeyHash {
    std::size_t operator()(const PeerKey& k) const noexcept;
  };
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<PeerKey, std::uint32_t, KeyHash> count;  // an address with no slot has no entry
  };
  static constexpr std::size_t kShards = 32;
  Shard& shard_of(const PeerKey& k) const;

  std::uint32_t max_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace tollgate::proxy

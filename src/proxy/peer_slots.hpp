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
#include <utility>

namespace tollgate::proxy {

// An address as 16 bytes: IPv6 as it is, IPv4 as IPv4-mapped IPv6 (so that a client reaching a
// dual-stack listener over IPv4 counts as its IPv4 address).
using PeerKey = std::array<std::uint8_t, 16>;

PeerKey peer_key_v4(const std::array<std::uint8_t, 4>& v4);

// The counts, in shards each under its own mutex. Shared by PeerSlots and every slot it gave out:
// a session whose frame is destroyed with its worker's io_context (a connection still open at
// exit) gives its slot back after the proxy that made it is gone.
struct PeerCounts;

// One connection's slot: given back when destroyed (or reset). Empty when the cap is off.
class PeerSlot {
 public:
  PeerSlot() = default;
  PeerSlot(PeerSlot&& o) noexcept : counts_(std::move(o.counts_)), key_(o.key_) {}
  PeerSlot& operator=(PeerSlot&& o) noexcept {
    if (this != &o) {
      reset();
      counts_ = std::move(o.counts_);
      key_ = o.key_;
    }
    return *this;
  }
  PeerSlot(const PeerSlot&) = delete;
  PeerSlot& operator=(const PeerSlot&) = delete;
  ~PeerSlot() { reset(); }
  void reset();
  bool holds() const { return counts_ != nullptr; }

 private:
  friend class PeerSlots;
  PeerSlot(std::shared_ptr<PeerCounts> counts, const PeerKey& key) : counts_(std::move(counts)), key_(key) {}
  std::shared_ptr<PeerCounts> counts_;
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
  std::uint32_t max_;
  std::shared_ptr<PeerCounts> counts_;  // null when the cap is off
};

}  // namespace tollgate::proxy

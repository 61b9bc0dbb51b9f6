// Redis Cluster's key-to-slot function: CRC16 (XMODEM: polynomial 0x1021, initial value 0, no
// reflection) of the key's hash tag, or of the whole key when it has none, modulo 16384. The hash
// tag is what lies between the first '{' and the first '}' after it, when that is not empty.
// Tollgate's keys carry one tag per rule (key_schema.hpp), so every key a script call names is in
// one slot; a batch of coalesced decisions names one key.
#pragma once

#include <cstdint>
#include <string_view>

namespace tollgate::store {

inline constexpr std::uint16_t kClusterSlots = 16384;

// CRC16/XMODEM of `data` (the checksum Redis Cluster uses).
std::uint16_t crc16_xmodem(std::string_view data);

// The part of `key` that Redis Cluster hashes: its hash tag, or the whole key.
std::string_view hash_tag_of(std::string_view key);

// The slot of `key` (0 .. 16383), as CLUSTER KEYSLOT answers.
std::uint16_t cluster_slot(std::string_view key);

}  // namespace tollgate::store

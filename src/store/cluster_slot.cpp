#include "tollgate/store/cluster_slot.hpp"

#include <array>

namespace tollgate::store {

namespace {

// One entry per byte value: the CRC of that byte alone, shifted through the polynomial 8 times.
constexpr std::array<std::uint16_t, 256> make_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    auto crc = static_cast<std::uint16_t>(b << 8);
    for (int i = 0; i < 8; ++i)
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    t[b] = crc;
  }
  return t;
}
constexpr std::array<std::uint16_t, 256> kTable = make_table();

}  // namespace

std::uint16_t crc16_xmodem(std::string_view data) {
  std::uint16_t crc = 0;
  for (const char c : data)
    crc = static_cast<std::uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
  return crc;
}

std::string_view hash_tag_of(std::string_view key) {
  const std::size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;  // no '}', or "{}": the whole key
  return key.substr(open + 1, close - open - 1);
}

std::uint16_t cluster_slot(std::string_view key) {
  return static_cast<std::uint16_t>(crc16_xmodem(hash_tag_of(key)) % kClusterSlots);
}

}  // namespace tollgate::store

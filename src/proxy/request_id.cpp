#include "tollgate/proxy/request_id.hpp"

#include <array>
#include <chrono>
#include <cstring>
#include <random>

namespace tollgate::proxy {

namespace {

constexpr std::array<bool, 256> kIdChar = [] {
  std::array<bool, 256> t{};
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (unsigned char c : std::string_view("._:+/=@-")) t[c] = true;
  return t;
}();

// xoshiro256++ (Blackman and Vigna): fast, 256 bits of state, so the threads' sequences (each
// seeded apart) never meet in practice. All zero is not a state: it means "not seeded yet", and
// a plain zero-initialised thread_local needs no guard on each use.
thread_local std::uint64_t t_state[4];

constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

std::uint64_t next(std::uint64_t* s) noexcept {
  const std::uint64_t result = rotl(s[0] + s[3], 23) + s[0];
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Once per thread: 256 bits from std::random_device (the kernel's getrandom on Linux). Should it
// fail, the clock and the thread's own addresses, spread by splitmix64, still differ per thread.
[[gnu::cold, gnu::noinline]] void seed(std::uint64_t* s) noexcept {
  std::uint64_t mix = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                      reinterpret_cast<std::uintptr_t>(s);
  try {
    std::random_device rd;
    for (int i = 0; i < 4; ++i) s[i] = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ splitmix64(mix);
  } catch (...) {
    for (int i = 0; i < 4; ++i) s[i] = splitmix64(mix);
  }
  if ((s[0] | s[1] | s[2] | s[3]) == 0) s[0] = 1;
}

// Eight hex digits from a word whose every byte is a nibble (0 to 15), without a loop or a table:
// the bytes made ASCII digits or letters together, written in one store.
void hex_digits(std::uint64_t nibbles, char* out) noexcept {
  constexpr std::uint64_t kOnes = 0x0101010101010101ull;
  const std::uint64_t letters = ((nibbles + 6 * kOnes) >> 4) & kOnes;  // 1 in the bytes over 9
  nibbles += '0' * kOnes + letters * static_cast<std::uint64_t>('a' - '0' - 10);
  std::memcpy(out, &nibbles, 8);
}

// 16 hex digits carrying the 64 bits of `v`: its high nibbles, then its low ones (an id is random
// bits, so no order of them is better than another; this one is the cheapest).
void hex64(std::uint64_t v, char* out) noexcept {
  constexpr std::uint64_t kLow = 0x0F0F0F0F0F0F0F0Full;
  hex_digits((v >> 4) & kLow, out);
  hex_digits(v & kLow, out + 8);
}

}  // namespace

bool valid_request_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > kMaxRequestIdLength) return false;
  for (const char c : id)
    if (!kIdChar[static_cast<unsigned char>(c)]) return false;
  return true;
}

void make_request_id(char* out) noexcept {
  if ((t_state[0] | t_state[1] | t_state[2] | t_state[3]) == 0) seed(t_state);
  // Worked on in a copy: the stores to `out` (a char*, which may alias anything) would otherwise
  // make the compiler read the state again.
  std::uint64_t s[4] = {t_state[0], t_state[1], t_state[2], t_state[3]};
  const std::uint64_t a = next(s), b = next(s);
  std::memcpy(t_state, s, sizeof s);
  hex64(a, out);
  hex64(b, out + 16);
}

void RequestId::assign(const http1::RequestHead& h) noexcept {
  if (h.has(http1::Name::x_request_id)) {
    const http1::Field* one = nullptr;
    bool twice = false;
    for (const http1::Field& f : h) {
      if (f.id != http1::Name::x_request_id) continue;
      twice = one != nullptr;
      if (twice) break;
      one = &f;
    }
    if (!twice && valid_request_id(one->value)) {
      std::memcpy(text_, one->value.data(), one->value.size());
      size_ = one->value.size();
      return;
    }
  }
  make();
}

}  // namespace tollgate::proxy

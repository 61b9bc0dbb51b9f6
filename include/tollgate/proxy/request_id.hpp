// X-Request-Id: one id per request, to follow it through the gateway, the upstream and the logs.
// The caller's id is kept when it sent exactly one valid X-Request-Id; otherwise the gateway makes
// one (a request is never refused for its id). The id goes upstream, back on every response (the
// upstream's relayed and the gateway's own), into the access log and into every problem body the
// gateway writes (member "request_id").
//   valid: 1 to 128 characters of A-Z a-z 0-9 and . _ : + / = @ -  (UUIDs, hex, base64, ULIDs,
//          "svc@host:123"; nothing a header, a JSON string or a log line has to escape)
//   made:  32 lowercase hex characters, 128 bits from a per-thread xoshiro256++ seeded from
//          std::random_device (unique in practice, not secret: never use an id as a credential)
// No allocation: an id lives in a fixed array of the session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "tollgate/proxy/http1.hpp"

namespace tollgate::proxy {

inline constexpr std::size_t kMaxRequestIdLength = 128;
inline constexpr std::size_t kMadeRequestIdLength = 32;

// Whether `id` is one the gateway keeps (see above).
bool valid_request_id(std::string_view id) noexcept;

// Writes a new id, kMadeRequestIdLength lowercase hex characters, to `out` (no terminator).
void make_request_id(char* out) noexcept;

// Appends the field "X-Request-Id: <id>\r\n" to a message head (id: at most kMaxRequestIdLength
// characters), in one append: it is in every request and response the gateway writes.
inline void append_request_id_field(std::string& out, std::string_view id) {
  static constexpr std::string_view kName = "X-Request-Id: ";
  char field[kName.size() + kMaxRequestIdLength + 2];
  const std::size_t n = id.size() < kMaxRequestIdLength ? id.size() : kMaxRequestIdLength;
  std::memcpy(field, kName.data(), kName.size());
  std::memcpy(field + kName.size(), id.data(), n);
  std::memcpy(field + kName.size() + n, "\r\n", 2);
  out.append(field, kName.size() + n + 2);
}

class RequestId {
 public:
  // The caller's id if `h` has exactly one X-Request-Id and it is valid, else a new one.
  void assign(const http1::RequestHead& h) noexcept;
  // A new id.
  void make() noexcept {
    make_request_id(text_);
    size_ = kMadeRequestIdLength;
  }
  // None yet (for the next request).
  void clear() noexcept { size_ = 0; }
  bool empty() const noexcept { return size_ == 0; }
  std::string_view view() const noexcept { return {text_, size_}; }

 private:
  char text_[kMaxRequestIdLength];
  std::size_t size_ = 0;
};

}  // namespace tollgate::proxy

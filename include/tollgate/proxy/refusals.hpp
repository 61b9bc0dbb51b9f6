// The most recent refusals (429 and the limiter's 503), for an operator's eyes (the console,
// GET /admin/refusals): a fixed-size ring, written only when a request is refused, so a request
// that is let through never touches it. It keeps the shape of the client key, never the key.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/proxy/request_policy.hpp"

namespace tollgate::proxy {

struct Refusal {
  std::int64_t at_ms = 0;       // wall clock (ms since the epoch)
  int status = 429;             // 429, or 503 (store down, fail_closed)
  std::string path;             // the request's path (no query), cut at kMaxPath bytes
  std::string bucket;           // the rule's bucket
  std::string policy;           // the policy that bound a 429 ("" for a 503)
  std::string key_by;           // how the client was keyed ("" when no per-client check applied)
  std::string key_shape;        // the key's first characters and length, never the whole key
  long long retry_after_s = 0;
};

// "203.…(11)": at most three leading characters of a client key and its length ("" for none).
std::string key_shape(std::string_view client_key);

// The refusal of a planned request, from its plan and verdict.
Refusal refusal_of(const Plan& plan, const Verdict& verdict, std::string_view path, int status, std::int64_t at_ms);

class RefusalLog {
 public:
  static constexpr std::size_t kCapacity = 300;
  static constexpr std::size_t kMaxPath = 200;
  explicit RefusalLog(std::size_t capacity = kCapacity);
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;

  // Any thread. Under contention (another thread writing or reading the ring at that instant) the
  // entry is dropped rather than waited for: a flood of 429s never lines the proxy threads up
  // behind one lock. total() counts every refusal either way.
  void record(Refusal r);
  // Newest first, at most `limit`.
  std::vector<Refusal> recent(std::size_t limit) const;
  std::uint64_t total() const;  // refusals recorded since start (the ring keeps the last kCapacity)
  std::size_t capacity() const { return ring_.size(); }

 private:
  mutable std::mutex mu_;
  std::vector<Refusal> ring_;
  std::uint64_t written_ = 0;  // entries written to the ring (under mu_)
  std::atomic<std::uint64_t> total_{0};
};

}  // namespace tollgate::proxy

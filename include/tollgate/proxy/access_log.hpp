// One JSON line per request, written by a thread of its own: request threads only append to a
// bounded queue, so a slow disk or a full stdout pipe never stalls a request (lines past the bound
// are dropped and counted).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tollgate::proxy {

struct AccessRecord {
  std::string_view client;
  std::string_view method;
  std::string_view path;
  std::string_view bucket;  // "" when no rule applied
  std::string_view policy;  // the policy that bound a 429 ("" otherwise; not written then)
  const char* outcome = "";
  double wait_ms = 0;
  int status = 0;           // what the client got (0: nothing, the connection closed)
  int upstream_status = 0;  // 0: the upstream was not reached
  double duration_ms = 0;
};

std::string access_line(const AccessRecord& r);  // JSON, no newline

class AccessLog {
 public:
  // target: "off", "stdout", or a file path (appended to).
  explicit AccessLog(const std::string& target);
  ~AccessLog();
  bool enabled() const { return out_ != nullptr; }
  void write(const AccessRecord& r);
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  void run();
  static constexpr std::size_t kMaxQueued = 100'000;
  std::FILE* out_ = nullptr;
  bool owns_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> queue_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace tollgate::proxy

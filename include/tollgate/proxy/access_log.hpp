// One JSON line per request, written by a thread of its own (spdlog's asynchronous logger): request
// threads only append to a bounded queue, so a slow disk or a full stdout pipe never stalls a
// request. Past the bound the oldest queued lines are dropped, and counted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace spdlog {
class async_logger;
namespace details {
class thread_pool;
}
}  // namespace spdlog

namespace tollgate::proxy {

struct AccessRecord {
  std::string_view request_id;  // X-Request-Id (proxy/request_id); "" not written
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
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;
  bool enabled() const { return logger_ != nullptr; }
  void write(const AccessRecord& r);
  std::uint64_t dropped() const;  // lines lost because the queue was full

 private:
  static constexpr std::size_t kMaxQueued = 100'000;
  std::shared_ptr<spdlog::details::thread_pool> pool_;  // the writer thread and its queue
  std::shared_ptr<spdlog::async_logger> logger_;
};

}  // namespace tollgate::proxy

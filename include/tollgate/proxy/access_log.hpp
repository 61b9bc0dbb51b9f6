// One JSON line per request, written by a thread of its own (spdlog's asynchronous logger): request
// threads only append to a bounded queue, so a slow disk or a full stdout pipe never stalls a
// request. A line that finds the queue full (kMaxQueued lines waiting to be written) is dropped,
// and counted: the lines already queued are kept, so the log holds every line up to the stall
// and the newest ones resume when the writer catches up.
#pragma once

#include <atomic>
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

namespace prometheus {
class Counter;
}

namespace tollgate::proxy {

struct AccessRecord {
  std::string_view request_id;  // X-Request-Id (proxy/request_id); "" not written
  std::string_view client;
  std::string_view method;
  std::string_view path;
  std::string_view bucket;  // "" when no rule applied
  std::string_view policy;  // the policy that bound a 429 ("" otherwise; not written then)
  std::string_view klass;   // the request's priority class ("" none: not written), field "class"
  std::string_view color;   // a meter's colour for the request ("" none: not written); a static string
  const char* outcome = "";
  double wait_ms = 0;
  int status = 0;           // what the client got (0: nothing, the connection closed)
  int upstream_status = 0;  // 0: the upstream was not reached
  double duration_ms = 0;
};

std::string access_line(const AccessRecord& r);  // JSON, no newline

class AccessLog {
 public:
  static constexpr std::size_t kMaxQueued = 100'000;

  // target: "off", "stdout", or a file path (appended to). `dropped_total` (may be null) counts
  // the lines dropped because `max_queued` lines were already waiting (tollgate_access_log_dropped_total).
  explicit AccessLog(const std::string& target, prometheus::Counter* dropped_total = nullptr,
                     std::size_t max_queued = kMaxQueued);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;
  bool enabled() const { return logger_ != nullptr; }
  void write(const AccessRecord& r);
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }  // lines lost to a full queue

 private:
  // Lines handed to the writer and not written yet: raised by write(), lowered by the writer
  // thread once a line is out (shared with the writer's sink, which may outlive this object's
  // members by the pool's join).
  std::shared_ptr<std::atomic<std::size_t>> queued_ = std::make_shared<std::atomic<std::size_t>>(0);
  std::atomic<std::uint64_t> dropped_{0};
  prometheus::Counter* dropped_total_;
  std::size_t max_queued_;
  std::shared_ptr<spdlog::details::thread_pool> pool_;  // the writer thread and its queue
  std::shared_ptr<spdlog::async_logger> logger_;
};

}  // namespace tollgate::proxy

#include "tollgate/proxy/access_log.hpp"

#include <chrono>
#include <ctime>
#include <prometheus/counter.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <stdexcept>

namespace tollgate::proxy {

namespace {
void json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {  // keep the line ASCII: request paths are untrusted
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

// The writer thread's sink: the file or stdout sink, flushed after every line (a line is never held
// back while the gateway is quiet, and container logs read stdout line by line), and each line
// written (or failed) taken off the count of queued lines. Only the pool's one thread calls it.
class LineSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  LineSink(spdlog::sink_ptr inner, std::shared_ptr<std::atomic<std::size_t>> queued)
      : inner_(std::move(inner)), queued_(std::move(queued)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    struct Done {
      std::atomic<std::size_t>& queued;
      ~Done() { queued.fetch_sub(1, std::memory_order_release); }
    } done{*queued_};
    inner_->log(msg);
    inner_->flush();
  }
  void flush_() override { inner_->flush(); }

 private:
  spdlog::sink_ptr inner_;
  std::shared_ptr<std::atomic<std::size_t>> queued_;
};

std::string now_iso() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}
}  // namespace

std::string access_line(const AccessRecord& r) {
  std::string out;
  out.reserve(320);
  out += "{\"time\":\"" + now_iso() + "\",";
  if (!r.request_id.empty()) {
    out += "\"request_id\":";
    json_string(out, r.request_id);
    out.push_back(',');
  }
  out += "\"client\":";
  json_string(out, r.client);
  out += ",\"method\":";
  json_string(out, r.method);
  out += ",\"path\":";
  json_string(out, r.path);
  out += ",\"bucket\":";
  json_string(out, r.bucket);
  if (!r.klass.empty()) {
    out += ",\"class\":";
    json_string(out, r.klass);
  }
  if (!r.color.empty()) {
    out += ",\"color\":";
    json_string(out, r.color);
  }
  if (!r.policy.empty()) {
    out += ",\"policy\":";
    json_string(out, r.policy);
  }
  out += ",\"outcome\":\"";
  out += r.outcome;
  char buf[128];
  std::snprintf(buf, sizeof buf, "\",\"wait_ms\":%.3f,\"status\":%d,\"upstream_status\":%d,\"duration_ms\":%.3f}",
                r.wait_ms, r.status, r.upstream_status, r.duration_ms);
  out += buf;
  return out;
}

AccessLog::AccessLog(const std::string& target, prometheus::Counter* dropped_total, std::size_t max_queued)
    : dropped_total_(dropped_total), max_queued_(max_queued > 0 ? max_queued : 1) {
  if (target == "off" || target.empty()) return;
  spdlog::sink_ptr sink;
  if (target == "stdout") {
    sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  } else {
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(target, /*truncate=*/false);
    } catch (const spdlog::spdlog_ex& e) {
      throw std::runtime_error("access_log: cannot open " + target + ": " + e.what());
    }
  }
  sink->set_pattern("%v");  // the line as access_line made it, and a newline
  // The queue holds only lines (no flush messages: the sink flushes each line itself), and
  // write() never lets more than max_queued_ wait, so it never fills: the overflow policy is
  // only a guarantee that a request thread never blocks on it.
  pool_ = std::make_shared<spdlog::details::thread_pool>(max_queued_, 1);
  logger_ = std::make_shared<spdlog::async_logger>("access", std::make_shared<LineSink>(std::move(sink), queued_),
                                                    pool_, spdlog::async_overflow_policy::overrun_oldest);
  logger_->set_level(spdlog::level::info);
}

// The writer thread writes what is queued before it stops (the pool's destructor joins it after
// the queue), so every line of a request that finished is in the log at exit.
AccessLog::~AccessLog() {
  logger_.reset();
  pool_.reset();
}

void AccessLog::write(const AccessRecord& r) {
  if (!logger_) return;
  // Past the bound the new line is dropped, never one already queued: what is written stays in
  // order, and the count says how many lines are missing.
  if (queued_->fetch_add(1, std::memory_order_acq_rel) >= max_queued_) {
    queued_->fetch_sub(1, std::memory_order_relaxed);
    dropped_.fetch_add(1, std::memory_order_relaxed);
    if (dropped_total_) dropped_total_->Increment();
    return;
  }
  const std::string line = access_line(r);
  logger_->log(spdlog::level::info, spdlog::string_view_t(line.data(), line.size()));
}

}  // namespace tollgate::proxy

#include "tollgate/proxy/access_log.hpp"

#include <chrono>
#include <ctime>
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
  out.reserve(256);
  out += "{\"time\":\"" + now_iso() + "\",\"client\":";
  json_string(out, r.client);
  out += ",\"method\":";
  json_string(out, r.method);
  out += ",\"path\":";
  json_string(out, r.path);
  out += ",\"bucket\":";
  json_string(out, r.bucket);
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

AccessLog::AccessLog(const std::string& target) {
  if (target == "off" || target.empty()) return;
  if (target == "stdout") {
    out_ = stdout;
  } else {
    out_ = std::fopen(target.c_str(), "a");
    if (!out_) throw std::runtime_error("access_log: cannot open " + target);
    owns_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

AccessLog::~AccessLog() {
  if (!out_) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
  if (owns_) std::fclose(out_);
}

void AccessLog::write(const AccessRecord& r) {
  if (!out_) return;
  std::string line = access_line(r);
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= kMaxQueued) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(line));
  }
  cv_.notify_one();
}

void AccessLog::run() {
  std::vector<std::string> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty() && stopping_) return;
      batch.swap(queue_);
    }
    for (const auto& line : batch) {
      std::fwrite(line.data(), 1, line.size(), out_);
      std::fputc('\n', out_);
    }
    std::fflush(out_);
    batch.clear();
  }
}

}  // namespace tollgate::proxy

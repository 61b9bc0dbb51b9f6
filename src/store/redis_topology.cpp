#include "redis_topology.hpp"
#include "tollgate/log_line.hpp"

#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <charconv>
#include <iostream>
#include <vector>

namespace tollgate::store {

using std::chrono::milliseconds;

namespace {

constexpr milliseconds kPeriod{1000};      // asked again this often with nothing to prompt it
constexpr milliseconds kMinInterval{50};   // and at most this often when prompted
constexpr milliseconds kFailoverPause{10000};  // the longest a sentinel failover keeps decisions off Redis

struct ReplyPtr {
  redisReply* r = nullptr;
  ~ReplyPtr() {
    if (r) freeReplyObject(r);
  }
};

std::optional<std::uint16_t> port_of_text(std::string_view text) {
  unsigned p = 0;
  const auto res = std::from_chars(text.data(), text.data() + text.size(), p);
  if (res.ec != std::errc() || res.ptr != text.data() + text.size() || p == 0 || p > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(p);
}

std::optional<std::uint16_t> port_of(const redisReply* e) {
  if (e->type == REDIS_REPLY_INTEGER) {
    if (e->integer <= 0 || e->integer > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(e->integer);
  }
  if (e->type != REDIS_REPLY_STRING) return std::nullopt;
  return port_of_text(std::string_view(e->str, e->len));
}

timeval to_timeval(std::uint32_t ms) { return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)}; }

}  // namespace

RedisTopology::RedisTopology(const RedisOptions& options, Listener on_change)
    : opt_(options), on_change_(std::move(on_change)) {}

RedisTopology::~RedisTopology() { stop(); }

void RedisTopology::start() {
  if (opt_.mode == RedisMode::standalone) {
    RedisLayout one;
    one.nodes.push_back({opt_.host, opt_.port});
    publish(std::move(one), "");
    return;
  }
  thread_ = std::thread([this] { run(); });
}

void RedisTopology::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (query_) redisFree(query_);
  query_ = nullptr;
  for (auto& s : subscribers_) redisFree(s.c);
  subscribers_.clear();
}

void RedisTopology::refresh() {
  if (opt_.mode == RedisMode::standalone) return;
  {
    std::lock_guard lock(mu_);
    refresh_wanted_ = true;
  }
  cv_.notify_all();
}

std::shared_ptr<const RedisLayout> RedisTopology::current() const {
  std::lock_guard lock(mu_);
  return layout_;
}

void RedisTopology::publish(RedisLayout layout, const std::string& why) {
  auto next = std::make_shared<const RedisLayout>(std::move(layout));
  {
    std::lock_guard lock(mu_);
    if (layout_ && *layout_ == *next) return;
    layout_ = next;
  }
  if (!why.empty()) log_line("tollgate: ", why, ": ", next->describe());
  on_change_(std::move(next));
}

void RedisTopology::warn_once(const std::string& what) {
  if (failing_) return;
  failing_ = true;
  log_line("tollgate: warn: ", what, "; asking again every ", kPeriod.count(), " ms");
}

redisContext* RedisTopology::connect(const RedisAddress& a, const std::string& password, std::string& error,
                                     std::uint32_t timeout_ms) const {
  if (timeout_ms == 0 || timeout_ms > opt_.connect_timeout_ms) timeout_ms = opt_.connect_timeout_ms;
  redisContext* c = redisConnectWithTimeout(a.host.c_str(), a.port, to_timeval(timeout_ms));
  if (c == nullptr || c->err) {
    error = a.to_string() + ": " + (c ? c->errstr : "out of memory");
    if (c) redisFree(c);
    return nullptr;
  }
  redisSetTimeout(c, to_timeval(opt_.connect_timeout_ms));
  if (!password.empty()) {
    ReplyPtr r{static_cast<redisReply*>(redisCommand(c, "AUTH %b", password.data(), password.size()))};
    if (r.r == nullptr || r.r->type == REDIS_REPLY_ERROR) {
      error = a.to_string() + ": AUTH " + (r.r ? std::string(r.r->str, r.r->len) : std::string(c->errstr));
      redisFree(c);
      return nullptr;
    }
  }
  return c;
}

void RedisTopology::run() {
  auto last = std::chrono::steady_clock::now() - kPeriod;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      refresh_wanted_ = false;
    }
    last = std::chrono::steady_clock::now();
    const bool ok = opt_.mode == RedisMode::cluster ? ask_cluster() : ask_sentinels();
    if (ok && failing_) {
      failing_ = false;
      log_line("tollgate: redis ", (opt_.mode == RedisMode::cluster ? "cluster" : "sentinels"), " answer again");
    }
    // At least kMinInterval between asks, however often the store prompts (a prompt already
    // pending must not turn this into a spin).
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, last + kMinInterval, [this] { return stopping_; });
    }
    const auto until = last + kPeriod;
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (stopping_ || refresh_wanted_) break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) break;
      wait(std::min(milliseconds(100), std::chrono::duration_cast<milliseconds>(until - now) + milliseconds(1)));
    }
  }
}

void RedisTopology::wait(milliseconds period) {
  if (opt_.mode == RedisMode::sentinel && !subscribers_.empty()) return follow_switch(period);
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, period, [this] { return stopping_ || refresh_wanted_; });
}

// The query connection to `a`: the one open if it is to `a`, else a new one (the old closed); a
// failure is added to `errors`.
bool RedisTopology::query_to(const RedisAddress& a, const std::string& password, std::string& errors) {
  if (query_ && query_addr_ == a) return true;
  if (query_) redisFree(query_);
  std::string error;
  query_ = connect(a, password, error);
  query_addr_ = a;
  if (!query_) errors += (errors.empty() ? "" : "; ") + error;
  return query_ != nullptr;
}

bool RedisTopology::ask_cluster() {
  // Known primaries first (the seeds may be gone), then the seeds.
  std::vector<RedisAddress> candidates;
  if (query_) candidates.push_back(query_addr_);
  if (const auto known = current())
    for (const auto& n : known->nodes) candidates.push_back(n);
  for (const auto& s : opt_.seeds) candidates.push_back(s);
  std::string errors;
  for (const RedisAddress& a : candidates) {
    if (!query_to(a, opt_.password, errors)) continue;
    ReplyPtr r{static_cast<redisReply*>(redisCommand(query_, "CLUSTER SLOTS"))};
    if (r.r == nullptr || r.r->type != REDIS_REPLY_ARRAY) {
      errors += (errors.empty() ? "" : "; ") + a.to_string() + ": CLUSTER SLOTS " +
                (r.r && r.r->type == REDIS_REPLY_ERROR ? std::string(r.r->str, r.r->len) : std::string(query_->errstr));
      redisFree(query_);
      query_ = nullptr;
      continue;
    }
    std::vector<SlotRange> ranges;
    for (std::size_t i = 0; i < r.r->elements; ++i) {
      const redisReply* e = r.r->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
          e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
          e->element[2]->elements < 2)
        continue;
      const redisReply* primary = e->element[2];
      SlotRange range;
      range.first = static_cast<std::uint16_t>(e->element[0]->integer);
      range.last = static_cast<std::uint16_t>(e->element[1]->integer);
      // An empty host is the node asked; "?" an address the node does not know yet (skipped).
      const std::string host(primary->element[0]->str ? primary->element[0]->str : "", primary->element[0]->len);
      if (host == "?") continue;
      range.primary.host = host.empty() ? a.host : host;
      const auto port = port_of(primary->element[1]);
      if (!port) continue;
      range.primary.port = *port;
      ranges.push_back(std::move(range));
    }
    auto layout = layout_of(ranges);
    if (!layout) {
      errors += (errors.empty() ? "" : "; ") + a.to_string() + ": no slot served";
      continue;
    }
    publish(std::move(*layout), "redis cluster layout");
    return true;
  }
  warn_once("redis cluster: no node answers CLUSTER SLOTS (" + errors + ")");
  return false;
}

bool RedisTopology::ask_sentinels() {
  std::vector<RedisAddress> candidates;
  if (query_) candidates.push_back(query_addr_);
  for (const auto& s : opt_.seeds) candidates.push_back(s);
  std::string errors;
  for (const RedisAddress& a : candidates) {
    if (!query_to(a, opt_.sentinel_password, errors)) continue;
    ReplyPtr r{static_cast<redisReply*>(
        redisCommand(query_, "SENTINEL get-master-addr-by-name %b", opt_.master_name.data(), opt_.master_name.size()))};
    if (r.r == nullptr || r.r->type != REDIS_REPLY_ARRAY || r.r->elements != 2 ||
        r.r->element[0]->type != REDIS_REPLY_STRING) {
      const std::string why = r.r == nullptr ? std::string(query_->errstr)
                              : r.r->type == REDIS_REPLY_ERROR ? std::string(r.r->str, r.r->len)
                              : r.r->type == REDIS_REPLY_NIL   ? "does not monitor '" + opt_.master_name + "'"
                                                               : "unexpected reply";
      errors += (errors.empty() ? "" : "; ") + a.to_string() + ": " + why;
      redisFree(query_);
      query_ = nullptr;
      continue;
    }
    const auto port = port_of(r.r->element[1]);
    if (!port) continue;
    const RedisAddress primary{std::string(r.r->element[0]->str, r.r->element[0]->len), *port};
    subscribe_all();
    // During a failover the sentinels name the old primary until it ends: it stays unused. After
    // it, a sentinel that has not heard of it yet still names the old one for a while (the
    // sentinels tell each other every 2 s): not believed for kFailoverPause.
    const auto now = std::chrono::steady_clock::now();
    if (paused_ && primary == paused_from_ && now < paused_until_) return true;
    if (!paused_ && primary == switched_from_ && now < switched_until_) return true;
    if (paused_ && primary == paused_from_)
      log_line("tollgate: warn: redis sentinel: the failover of '", opt_.master_name, "' did not end within ",
               kFailoverPause.count(), " ms; using the primary the sentinels name");
    paused_ = false;
    RedisLayout one;
    one.nodes.push_back(primary);
    publish(std::move(one), "redis sentinel: primary '" + opt_.master_name + "'");
    return true;
  }
  warn_once("redis sentinel: no sentinel names the primary '" + opt_.master_name + "' (" + errors + ")");
  return false;
}

// Every sentinel that answers gets a subscription of its own: the events of a failover are
// published by the sentinel that leads it, which may be any of them.
void RedisTopology::subscribe_all() {
  // A sentinel that is down (a connect can take connect_timeout_ms) is tried again every 5 s.
  const auto now = std::chrono::steady_clock::now();
  if (subscribers_.size() == opt_.seeds.size() || now < next_subscribe_) return;
  next_subscribe_ = now + std::chrono::seconds(5);
  for (const RedisAddress& a : opt_.seeds) {
    if (std::any_of(subscribers_.begin(), subscribers_.end(), [&](const Subscriber& s) { return s.sentinel == a; }))
      continue;
    std::string error;
    redisContext* c = connect(a, opt_.sentinel_password, error, 250);
    if (c == nullptr) continue;  // down: tried again at the next ask
    redisEnableKeepAlive(c);  // a sentinel whose host vanished is noticed, and subscribed to again
    bool ok = redisAppendCommand(c, "PSUBSCRIBE +switch-master +selected-slave -failover-abort-*") == REDIS_OK;
    for (int i = 0; ok && i < 3; ++i) {  // one confirmation per pattern
      void* raw = nullptr;
      ok = redisGetReply(c, &raw) == REDIS_OK && raw != nullptr;
      ReplyPtr r{static_cast<redisReply*>(raw)};
      ok = ok && r.r->type == REDIS_REPLY_ARRAY;
    }
    if (!ok) {
      redisFree(c);
      continue;
    }
    subscribers_.push_back({a, c});
  }
}

// Reads the sentinels' events for up to `slice`; each is acted on at once.
void RedisTopology::follow_switch(milliseconds slice) {
  std::vector<pollfd> fds;
  for (const auto& s : subscribers_) fds.push_back({s.c->fd, POLLIN, 0});
  // Replies already read into a context's buffer come first.
  bool buffered = false;
  for (std::size_t i = 0; i < subscribers_.size() && !buffered; ++i) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(subscribers_[i].c, &raw) == REDIS_OK && raw != nullptr) {
      ReplyPtr r{static_cast<redisReply*>(raw)};
      buffered = true;
      if (r.r->type == REDIS_REPLY_ARRAY && r.r->elements == 4 && r.r->element[2]->type == REDIS_REPLY_STRING &&
          r.r->element[3]->type == REDIS_REPLY_STRING)
        on_sentinel_event(std::string(r.r->element[2]->str, r.r->element[2]->len),
                          std::string(r.r->element[3]->str, r.r->element[3]->len));
    }
  }
  if (buffered) return;
  if (::poll(fds.data(), fds.size(), static_cast<int>(slice.count())) <= 0) return;
  for (std::size_t i = fds.size(); i-- > 0;) {
    if (fds[i].revents == 0) continue;
    if (redisBufferRead(subscribers_[i].c) != REDIS_OK) {  // that sentinel went away: subscribed again later
      redisFree(subscribers_[i].c);
      subscribers_.erase(subscribers_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

// "+selected-slave": "slave <ip>:<port> <ip> <port> @ <name> <ip> <port>"; "+switch-master":
// "<name> <old ip> <old port> <new ip> <new port>"; "-failover-abort-*": "master <name> <ip> <port>".
void RedisTopology::on_sentinel_event(const std::string& channel, const std::string& text) {
  std::vector<std::string> words;
  for (std::size_t at = 0; at <= text.size();) {
    const auto space = std::min(text.find(' ', at), text.size());
    words.push_back(text.substr(at, space - at));
    at = space + 1;
  }
  const std::string& name = opt_.master_name;
  if (channel == "+switch-master") {
    if (words.size() != 5 || words[0] != name) return;
    const auto port = port_of_text(words[4]);
    if (!port) return;
    paused_ = false;
    RedisLayout one;
    one.nodes.push_back({words[3], *port});
    if (const auto from_port = port_of_text(words[2])) {
      switched_from_ = {words[1], *from_port};
      switched_until_ = std::chrono::steady_clock::now() + kFailoverPause;
    }
    publish(std::move(one), "redis sentinel: +switch-master '" + name + "'");
  } else if (channel == "+selected-slave") {
    if (words.size() != 8 || words[4] != "@" || words[5] != name || paused_) return;
    // Only a failover of the primary in use (a late event of one already followed is not).
    const auto known = current();
    const auto master_port = port_of_text(words[7]);
    if (!known || known->nodes.empty() || !master_port || !(known->nodes.front() == RedisAddress{words[6], *master_port}))
      return;
    paused_ = true;
    paused_from_ = known->nodes.front();
    paused_until_ = std::chrono::steady_clock::now() + kFailoverPause;
    RedisLayout none;
    none.note = "redis sentinel: failover of '" + name + "' under way (" + words[1] + " to be promoted, " +
                paused_from_.to_string() + " no longer written to)";
    publish(std::move(none), "redis sentinel");
  } else if (channel.starts_with("-failover-abort")) {
    if (words.size() < 2 || words[0] != "master" || words[1] != name || !paused_) return;
    paused_ = false;
    log_line("tollgate: redis sentinel: ", channel, " '", name, "': asking for the primary again");
    std::lock_guard lock(mu_);
    refresh_wanted_ = true;
  }
}

}  // namespace tollgate::store

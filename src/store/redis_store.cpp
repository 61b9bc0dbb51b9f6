#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/store/redis_store.hpp"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cmath>
#include <cstdio>
#include <deque>
#include <future>
#include <iostream>
#include <unordered_map>

#include "redis_connection.hpp"
#include "redis_scripts.hpp"
#include "tollgate/store/redis_codec.hpp"
#include "tollgate/store/metric_series.hpp"

namespace tollgate::store {

namespace net = boost::asio;
using std::chrono::milliseconds;


namespace {
using redis_detail::Reply;
using redis_detail::unix_ms;

thread_local const RedisStore* t_owner = nullptr;
thread_local RedisStore::Connection* t_connection = nullptr;

}  // namespace


RedisStore::RedisStore(RedisOptions options, std::vector<net::io_context*> contexts, const limiter::Clock& clock)
    : options_(std::move(options)), contexts_(std::move(contexts)) {
  (void)clock;  // decisions use Redis TIME; kept so that every store is made the same way
  instance_id_ = options_.instance_id;
  if (instance_id_.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    instance_id_ = std::string(host) + ":" + std::to_string(getpid());
  }
  for (std::size_t i = 0; i < contexts_.size(); ++i)
    connections_.push_back(std::make_shared<Connection>(*contexts_[i], *this, i == 0));
}

RedisStore::~RedisStore() = default;

void RedisStore::start() {
  for (auto& c : connections_) {
    net::post(c->ctx, [this, c] {
      t_owner = this;
      t_connection = c.get();
      c->connect();
    });
  }
}

void RedisStore::stop() {
  for (auto& c : connections_) net::post(c->ctx, [c] { c->stop(); });
}

RedisStore::Connection* RedisStore::connection_for_current_thread() {
  return t_owner == this ? t_connection : nullptr;
}

void RedisStore::record_success() {
  if (up_flag_.load(std::memory_order_relaxed)) return;  // the common case: no lock
  // An incident ends when every thread's connection is back: until then some decisions still go
  // to the failure policy.
  if (connections_ready_.load(std::memory_order_relaxed) < static_cast<int>(connections_.size())) return;
  std::lock_guard lock(incident_mu_);
  if (up_) return;
  // Again under the lock: a connection torn down meanwhile counted itself out before its failure
  // was recorded, so a stale count cannot end the incident that failure belongs to.
  if (connections_ready_.load(std::memory_order_relaxed) < static_cast<int>(connections_.size())) return;
  up_ = true;
  up_flag_.store(true, std::memory_order_relaxed);
  if (ever_up_ && incidents_ > 0) {
    const double secs = static_cast<double>(unix_ms() - incident_started_ms_) / 1e3;
    std::cerr << "tollgate: redis store incident ended after " << secs << " s: " << incident_failures_
              << " decisions were made by the failure policy" << std::endl;
  }
  ever_up_ = true;
}

void RedisStore::connection_ready() {
  // Said once, when every thread's connection has answered: from then on no decision of this
  // instance falls to the failure policy unless Redis fails.
  if (ready_connections_.fetch_add(1) + 1 == connections_.size())
    std::cerr << "tollgate: redis store connected to " << options_.host << ":" << options_.port << " ("
              << connections_.size() << " connections)" << std::endl;
}

void RedisStore::record_failure(const std::string& error) {
  std::lock_guard lock(incident_mu_);
  last_error_ = error;
  if (!up_ && incidents_ > 0) return;  // already in an incident: logged once
  up_ = false;
  up_flag_.store(false, std::memory_order_relaxed);
  ++incidents_;
  incident_started_ms_ = unix_ms();
  incident_failures_ = 0;
  std::cerr << "tollgate: warn: redis store incident started: " << error
            << "; decisions go to the failure policy until it answers" << std::endl;
}

StoreDecision RedisStore::unavailable(std::string error) {
  {
    std::lock_guard lock(incident_mu_);
    ++incident_failures_;
    last_error_ = error;
  }
  StoreDecision out;
  out.status = StoreStatus::unavailable;
  out.error = std::move(error);
  return out;
}

boost::asio::awaitable<StoreDecision> RedisStore::try_acquire(AcquireRequest req) {
  Connection* c = connection_for_current_thread();
  if (c == nullptr || !c->ready) {
    // Named, not a temporary of the co_return expression (g++ 12 may destroy a conditional's
    // string temporary there twice).
    std::string why = c ? last_error() : "redis store not on this thread";
    co_return unavailable(std::move(why));
  }
  // The common case (one bucket, nothing else) takes the lean script, coalesced per bucket.
  if (lean_request(req)) {
    StoreDecision d = co_await c->async_decide(std::move(req), net::use_awaitable);
    if (d.status == StoreStatus::unavailable) co_return unavailable(std::move(d.error));
    record_success();
    co_return std::move(d);
  }
  std::vector<std::string> args{"EVALSHA", c->acquire_sha};
  for (auto& a : acquire_call(req, options_.key_prefix, "")) args.push_back(std::move(a));
  Reply r = co_await c->async_call(std::move(args), acquire_script(), net::use_awaitable);
  std::optional<StoreDecision> out;
  if (r.ok) out = parse_acquire_reply(r.items, req.quotas.size());
  if (!out) {
    std::string why = r.ok ? "redis: unexpected script reply" : std::move(r.error);
    co_return unavailable(std::move(why));
  }
  record_success();
  co_return std::move(*out);
}

boost::asio::awaitable<bool> RedisStore::refund(AcquireRequest req, Reservation res) {
  co_return (co_await refund_slots(std::move(req), res)).any();
}

boost::asio::awaitable<RefundResult> RedisStore::refund_slots(AcquireRequest req, Reservation res) {
  Connection* c = connection_for_current_thread();
  if (c == nullptr || !c->ready) co_return RefundResult{};
  if (lean_request(req)) {  // in the bucket's lane, with its decisions
    const RefundResult out = co_await c->async_refund(std::move(req), res, net::use_awaitable);
    refunds_.fetch_add(out.reservations(), std::memory_order_relaxed);
    co_return out;
  }
  std::vector<std::string> args{"EVALSHA", c->refund_sha};
  for (auto& a : refund_call(req, options_.key_prefix, res)) args.push_back(std::move(a));
  Reply r = co_await c->async_call(std::move(args), refund_script(), net::use_awaitable);
  std::optional<RefundResult> out;
  if (r.ok) out = parse_refund_reply(req, r.items);
  if (!out) co_return RefundResult{};
  refunds_.fetch_add(out->reservations(), std::memory_order_relaxed);
  co_return *out;
}

namespace {
// A command sent from a thread that is not the connection's (the admin thread): posted to the
// connection's event loop, waited for at most `bound`. nullopt when it could not be sent or did not
// answer in time; the connection's own deadline fails it long before on a stalled Redis.
std::optional<Reply> call_from_outside(const std::shared_ptr<RedisStore::Connection>& c, std::vector<std::string> args,
                                       milliseconds bound) {
  if (t_connection != nullptr) return std::nullopt;  // a request thread would wait for itself
  auto done = std::make_shared<std::promise<Reply>>();
  std::future<Reply> reply = done->get_future();
  net::post(c->ctx, [c, args = std::move(args), done]() mutable {
    if (!c->ready) return done->set_value(Reply{false, "redis not connected", {}, 0, {}});
    c->internal(std::move(args), [done](Reply r) { done->set_value(std::move(r)); });
  });
  if (reply.wait_for(bound) != std::future_status::ready) return std::nullopt;
  Reply r = reply.get();
  if (!r.ok) return std::nullopt;
  return r;
}
}  // namespace

std::optional<BucketSnapshot> RedisStore::inspect(const BucketRef& ref, std::string_view hash_tag) {
  return inspect_many({{ref, hash_tag}}).front();
}

std::vector<std::optional<BucketSnapshot>> RedisStore::inspect_many(const std::vector<BucketProbe>& probes) {
  std::vector<std::optional<BucketSnapshot>> out(probes.size());
  if (probes.empty() || connections_.empty()) return out;
  std::vector<std::string> args{"EVAL", scripts::kInspect, std::to_string(2 * probes.size())};
  args.reserve(3 + 2 * probes.size());
  for (const BucketProbe& p : probes) {
    args.push_back(redis_key(options_.key_prefix, p.hash_tag, p.bucket.name));
    args.push_back(abandoned_key(options_.key_prefix, p.hash_tag, p.bucket.name));
  }
  const auto r = call_from_outside(connections_.front(), std::move(args), milliseconds(options_.connect_timeout_ms));
  if (!r || r->items.size() != 2 + 3 * probes.size()) return out;
  try {
    const Micros now = std::stoll(r->items[0]) * 1'000'000 + std::stoll(r->items[1]);
    for (std::size_t i = 0; i < probes.size(); ++i) {
      const std::string* f = &r->items[2 + 3 * i];
      const limiter::Shape shape = limiter::shape_of(probes[i].bucket.params);
      BucketSnapshot snap;
      snap.now = now;
      snap.max_permits = shape.max_permits;
      if (!f[0].empty()) {
        limiter::BucketState st{std::stod(f[0]), static_cast<Micros>(std::stod(f[1]))};
        limiter::resync(st, shape, now);
        snap.stored = st.stored;
        snap.next_free = st.next_free;
        snap.tracked = true;
        // Released slots stay in the set until the next give-back: only those still ahead count.
        snap.abandoned = static_cast<std::size_t>(std::stoull(f[2]));
      } else {
        snap.stored = shape.max_permits;
        snap.next_free = now;
      }
      out[i] = snap;
    }
  } catch (const std::exception&) {  // not a number where one belongs: no figures rather than wrong ones
    std::fill(out.begin(), out.end(), std::nullopt);
  }
  return out;
}

std::optional<std::uint64_t> RedisStore::client_keys() const {
  std::lock_guard lock(count_mu_);
  const std::int64_t now = unix_ms();
  if (counted_at_ms_ != 0 && now - counted_at_ms_ < 10'000) return client_keys_;
  counted_at_ms_ = now;
  client_keys_.reset();
  if (connections_.empty()) return client_keys_;
  const std::string pattern = client_keys_pattern(options_.key_prefix);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(options_.connect_timeout_ms) * 2;
  std::string cursor = "0";
  std::uint64_t n = 0;
  for (int round = 0; round < 10'000 && std::chrono::steady_clock::now() < deadline; ++round) {
    const auto r = call_from_outside(connections_.front(), {"EVAL", scripts::kScanCount, "0", cursor, pattern},
                                     milliseconds(options_.connect_timeout_ms));
    if (!r || r->items.size() != 2) return client_keys_;
    cursor = r->items[0];
    n += std::strtoull(r->items[1].c_str(), nullptr, 10);
    if (cursor == "0") {
      client_keys_ = n;
      break;
    }
  }
  return client_keys_;
}

std::string RedisStore::last_error() const {
  std::lock_guard lock(incident_mu_);
  return last_error_.empty() ? "redis not connected" : last_error_;
}

RedisStats RedisStore::stats() const {
  RedisStats s;
  std::lock_guard lock(incident_mu_);
  s.up = up_;
  s.refunds = refunds_.load();
  s.incidents = incidents_;
  s.live_instances = live_instances_.load();
  s.last_error = last_error_;
  return s;
}

void RedisStore::publish_metrics(prometheus::Registry& registry) const {
  const RedisStats st = stats();
  gauge(registry, "tollgate_store_up", "Whether the shared bucket store (Redis) answers.").Set(st.up ? 1 : 0);
  advance_to(counter(registry, "tollgate_store_incidents_total", "Store outages (each logged once at start and end)."),
             static_cast<double>(st.incidents));
  gauge(registry, "tollgate_store_live_instances", "Gateway instances heartbeating in the store.").Set(st.live_instances);
  auto& keys = prometheus::BuildGauge()
                   .Name("tollgate_client_keys")
                   .Help("Per-client keys in Redis (keyed buckets, quota counters, maxShare sets), "
                         "counted with SCAN at most every 10 s.")
                   .Register(registry);
  if (const auto n = client_keys()) {
    keys.Add({}).Set(static_cast<double>(*n));
  } else if (keys.Has({})) {
    keys.Remove(&keys.Add({}));  // Redis cannot be read: no figure rather than a stale one
  }
}

}  // namespace tollgate::store

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "tollgate/store/redis_store.hpp"

#include "tollgate/limiter/clock.hpp"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <future>
#include <iostream>
#include <unordered_map>

#include "redis_connection.hpp"
#include "redis_scripts.hpp"
#include "redis_topology.hpp"
#include "tollgate/store/cluster_slot.hpp"
#include "tollgate/store/redis_codec.hpp"
#include "tollgate/store/metric_series.hpp"
#include "tollgate/log_line.hpp"

namespace tollgate::store {

std::string hiredis_version() {
  return std::to_string(HIREDIS_MAJOR) + "." + std::to_string(HIREDIS_MINOR) + "." + std::to_string(HIREDIS_PATCH);
}


namespace net = boost::asio;
using std::chrono::milliseconds;


namespace {
using redis_detail::Reply;
using redis_detail::unix_ms;

thread_local const RedisStore* t_owner = nullptr;
thread_local RedisStore::Link* t_link = nullptr;

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
  for (std::size_t i = 0; i < contexts_.size(); ++i) links_.push_back(std::make_shared<Link>(*contexts_[i], *this, i == 0));
  // Each layout the watcher finds goes to every thread, which connects to its primaries there.
  topology_ = std::make_unique<RedisTopology>(options_, [this](std::shared_ptr<const RedisLayout> layout) {
    // No primary to use (a failover under way): an incident from now, ended when the new one's
    // connections are ready.
    // Until every thread has applied it, the counts of connections describe the old layout: no
    // incident may end on them (Link::apply counts itself out).
    layouts_pending_.fetch_add(static_cast<int>(links_.size()));
    if (layout->nodes.empty()) record_failure(layout->note);
    for (auto& l : links_) net::post(l->ctx, [l, layout] { l->apply(layout); });
  });
}

RedisStore::~RedisStore() { topology_->stop(); }  // its thread uses members destroyed before it

void RedisStore::start() {
  for (auto& l : links_) {
    net::post(l->ctx, [this, l] {
      t_owner = this;
      t_link = l.get();
    });
  }
  topology_->start();
}

void RedisStore::stop() {
  topology_->stop();
  for (auto& l : links_) net::post(l->ctx, [l] { l->stop(); });
}

RedisStore::Link* RedisStore::link_for_current_thread() { return t_owner == this ? t_link : nullptr; }

void RedisStore::record_success() {
  if (up_flag_.load(std::memory_order_relaxed)) return;  // the common case: no lock
  // An incident ends when every thread's connection to every primary is back: until then some
  // decisions still go to the failure policy.
  const auto all_ready = [this] {
    const int made = connections_.load(std::memory_order_relaxed);
    return made > 0 && layouts_pending_.load() == 0 && connections_ready_.load(std::memory_order_relaxed) >= made;
  };
  if (!all_ready()) return;
  std::lock_guard lock(incident_mu_);
  if (up_) return;
  // Again under the lock: a connection torn down meanwhile counted itself out before its failure
  // was recorded, so a stale count cannot end the incident that failure belongs to.
  if (!all_ready()) return;
  up_ = true;
  up_flag_.store(true, std::memory_order_relaxed);
  if (ever_up_ && incidents_ > 0) {
    const double secs = static_cast<double>(unix_ms() - incident_started_ms_) / 1e3;
    log_line("tollgate: redis store incident ended after ", secs, " s: ", incident_failures_,
             " decisions were made by the failure policy");
  }
  ever_up_ = true;
}

void RedisStore::count_connection(const RedisAddress& node, int made, int ready) {
  std::lock_guard lock(nodes_mu_);
  const std::string name = node.to_string();
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n.first == name; });
  if (it == nodes_.end()) it = nodes_.insert(nodes_.end(), {name, NodeCount{}});
  it->second.made += made;
  it->second.ready += ready;
  if (it->second.made == 0) nodes_.erase(it);
  // Counted in this order: never more ready than made, seen from record_success.
  if (made > 0) connections_.fetch_add(made, std::memory_order_relaxed);
  connections_ready_.fetch_add(ready, std::memory_order_relaxed);
  if (made < 0) connections_.fetch_add(made, std::memory_order_relaxed);
  // Said once, when every thread's connections have answered: from then on no decision of this
  // instance falls to the failure policy unless Redis fails.
  // Every thread must have applied the layout first: one thread's connection ready before another
  // thread has even made its own is not "connected" (the other's decisions still go to the policy).
  if (ready > 0 && !announced_ && layouts_pending_.load() == 0 && connections_ready_.load() == connections_.load()) {
    announced_ = true;
    std::string where;
    for (const auto& n : nodes_) where += (where.empty() ? "" : ", ") + n.first;
    log_line("tollgate: redis store connected to ", where, " (", connections_.load(), " connections)");
  }
}

std::vector<std::pair<std::string, bool>> RedisStore::nodes_up() const {
  std::lock_guard lock(nodes_mu_);
  std::vector<std::pair<std::string, bool>> out;
  for (const auto& [name, n] : nodes_) out.emplace_back(name, n.ready == n.made);
  return out;
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
  log_line("tollgate: warn: redis store incident started: ", error,
           "; decisions go to the failure policy until it answers");
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

namespace {
// Why a request found no ready connection.
std::string no_connection(const RedisStore::Link* l, const RedisStore::Connection* c, std::string last) {
  if (l == nullptr) return "redis store not on this thread";
  if (l->by_node.empty())
    return l->layout && !l->layout->note.empty() ? l->layout->note : "redis: where the primaries are is not known yet";
  if (c == nullptr) return "redis: no primary serves the key's slot";
  return last;
}
}  // namespace

// A script call that is not coalesced, sent where the thread's layout says and again where a
// cluster redirects it (MOVED, ASK after ASKING) or 20 ms later on TRYAGAIN, ten times at most.
boost::asio::awaitable<redis_detail::Reply> RedisStore::call_routed(Link& l, Connection* c, std::vector<std::string> args,
                                                                    const char* script) {
  for (int hop = 0;; ++hop) {
    Reply r = co_await c->async_call(args, script, net::use_awaitable);
    if (r.ok || hop == 10) co_return r;  // as a coalesced batch: at most ~200 ms of TRYAGAIN
    if (const auto to = parse_redirect(r.error)) {
      if (!to->ask) topology_->refresh();  // ASK: a migration under way, the map is right
      Connection* target = l.find(to->to);
      if (target == nullptr || !target->ready) co_return r;
      if (to->ask) target->internal({"ASKING"}, [](Reply) {});  // then the call, with nothing between
      c = target;
      continue;
    }
    if (!r.error.starts_with("TRYAGAIN")) co_return r;
    net::steady_timer pause(l.ctx, milliseconds(20));
    co_await pause.async_wait(net::use_awaitable);
    c = l.route(args[3]);  // the first key
    if (c == nullptr || !c->ready) co_return r;
  }
}

boost::asio::awaitable<StoreDecision> RedisStore::try_acquire(AcquireRequest req) {
  Link* l = link_for_current_thread();
  Connection* c = l ? l->route(req) : nullptr;
  if (c == nullptr || !c->ready) {
    // Named, not a temporary of the co_return expression (g++ 12 may destroy a conditional's
    // string temporary there twice).
    std::string why = no_connection(l, c, c ? last_error() : std::string());
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
  Reply r = co_await call_routed(*l, c, std::move(args), acquire_script());
  std::optional<StoreDecision> out;
  if (r.ok)
    out = parse_acquire_reply(r.items, req.quotas.size(), req.use_bucket && req.adaptive != limiter::Adaptive::off,
                              req.meter.has_value());
  if (!out) {
    std::string why = r.ok ? "redis: unexpected script reply" : std::move(r.error);
    co_return unavailable(std::move(why));
  }
  record_success();
  co_return std::move(*out);
}

boost::asio::awaitable<AdaptOutcome> RedisStore::throttled(AcquireRequest req, Micros pause_us, Micros jitter_us) {
  AdaptOutcome out;
  Link* l = link_for_current_thread();
  Connection* c = l ? l->route(req) : nullptr;
  if (c == nullptr || !c->ready) {
    out.error = no_connection(l, c, c ? last_error() : std::string());
    co_return out;
  }
  if (req.adaptive == limiter::Adaptive::off || !req.use_bucket) {
    out.error = "not an adaptive bucket";
    co_return out;
  }
  // Rare (once per throttled response), so sent as EVAL with the script's text.
  std::vector<std::string> args{"EVAL", adapt_script()};
  for (auto& a : adapt_call(req, options_.key_prefix, pause_us, jitter_us)) args.push_back(std::move(a));
  Reply r = co_await call_routed(*l, c, std::move(args), nullptr);
  const Micros now = limiter::steady_now_us();
  std::optional<AdaptOutcome> parsed;
  if (r.ok) parsed = parse_adapt_reply(r.items, now);
  if (!parsed) {
    out.error = r.ok ? "redis: unexpected adapt reply" : std::move(r.error);
    co_return out;
  }
  co_return std::move(*parsed);
}

boost::asio::awaitable<Micros> RedisStore::last_cut(const AcquireRequest& req) {
  Link* l = link_for_current_thread();
  Connection* c = l ? l->route(req) : nullptr;
  if (c == nullptr || !c->ready || req.adaptive == limiter::Adaptive::off || !req.use_bucket) co_return 0;
  const std::string_view tag = req.hash_tag.empty() ? req.bucket.name : req.hash_tag;
  // Rare (a held request of an adaptive bucket, as it wakes), so sent as EVAL with the script's text.
  std::vector<std::string> args{"EVAL", scripts::kLastCut, "1", adaptive_key(options_.key_prefix, tag, req.bucket.name)};
  Reply r = co_await call_routed(*l, c, std::move(args), nullptr);
  co_return r.ok ? static_cast<Micros>(r.integer) : 0;
}

boost::asio::awaitable<RefundResult> RedisStore::return_unused(AcquireRequest req) {
  Link* l = link_for_current_thread();
  Connection* c = l ? l->route(req) : nullptr;
  if (c == nullptr || !c->ready || (!req.use_bucket && !req.parent)) co_return RefundResult{};
  // Rare (a request no endpoint could take), so sent as EVAL with the script's text.
  std::vector<std::string> args{"EVAL", restore_script()};
  for (auto& a : restore_call(req, options_.key_prefix)) args.push_back(std::move(a));
  Reply r = co_await call_routed(*l, c, std::move(args), nullptr);
  std::optional<RefundResult> out;
  if (r.ok) out = parse_restore_reply(req, r.items);
  co_return out ? *out : RefundResult{};
}

boost::asio::awaitable<SharedTokenReply> RedisStore::shared_token(SharedTokenOp op) {
  SharedTokenReply out;
  Link* l = link_for_current_thread();
  if (l == nullptr) co_return out;
  std::string key;
  append_redis_key(key, options_.key_prefix, "auth:" + op.name, ":token");
  Connection* c = l->route(key);
  if (c == nullptr || !c->ready) co_return out;
  std::vector<std::string> args{"EVAL", scripts::kSharedToken, "1", key};
  switch (op.kind) {
    case SharedTokenOp::get:
      args.insert(args.end(), {"get", op.holder, std::to_string(op.lease_ms), std::to_string(op.before_ms), op.token});
      break;
    case SharedTokenOp::put:
      args.insert(args.end(), {"put", op.holder, op.token, std::to_string(op.ttl_ms), std::to_string(op.hold_ms)});
      break;
    case SharedTokenOp::fail:
      args.insert(args.end(), {"fail", op.holder, std::to_string(op.hold_ms)});
      break;
  }
  Reply r = co_await call_routed(*l, c, std::move(args), nullptr);
  if (!r.ok) co_return out;
  if (op.kind != SharedTokenOp::get) {
    out.answered = true;
    out.stored = r.integer == 1;
    co_return out;
  }
  if (r.items.size() != 6) co_return out;
  out.token = r.items[0];
  out.ttl_ms = std::strtoll(r.items[1].c_str(), nullptr, 10);
  out.leased = r.items[2] == "1";
  out.due = r.items[3] == "1";
  out.lifetime_ms = std::strtoll(r.items[4].c_str(), nullptr, 10);
  out.failed_ms = std::strtoll(r.items[5].c_str(), nullptr, 10);
  out.answered = true;
  co_return out;
}

boost::asio::awaitable<bool> RedisStore::refund(AcquireRequest req, Reservation res) {
  co_return (co_await refund_slots(std::move(req), res)).any();
}

boost::asio::awaitable<RefundResult> RedisStore::refund_slots(AcquireRequest req, Reservation res) {
  Link* l = link_for_current_thread();
  Connection* c = l ? l->route(req) : nullptr;
  if (c == nullptr || !c->ready) co_return RefundResult{};
  if (lean_request(req)) {  // in the bucket's lane, with its decisions
    const RefundResult out = co_await c->async_refund(std::move(req), res, net::use_awaitable);
    refunds_.fetch_add(out.reservations(), std::memory_order_relaxed);
    co_return out;
  }
  std::vector<std::string> args{"EVALSHA", c->refund_sha};
  for (auto& a : refund_call(req, options_.key_prefix, res)) args.push_back(std::move(a));
  Reply r = co_await call_routed(*l, c, std::move(args), refund_script());
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
// `pick` chooses the connection there, by the thread's layout.
using Pick = std::function<RedisStore::Connection*(RedisStore::Link&)>;
std::optional<Reply> call_from_outside(const std::shared_ptr<RedisStore::Link>& l, Pick pick,
                                       std::vector<std::string> args, milliseconds bound) {
  if (t_link != nullptr) return std::nullopt;  // a request thread would wait for itself
  auto done = std::make_shared<std::promise<Reply>>();
  std::future<Reply> reply = done->get_future();
  net::post(l->ctx, [l, pick = std::move(pick), args = std::move(args), done]() mutable {
    RedisStore::Connection* c = pick(*l);
    if (c == nullptr || !c->ready) return done->set_value(Reply{false, "redis not connected", {}, 0, {}});
    c->internal(std::move(args), [done](Reply r) { done->set_value(std::move(r)); });
  });
  if (reply.wait_for(bound) != std::future_status::ready) return std::nullopt;
  Reply r = reply.get();
  if (!r.ok) return std::nullopt;
  return r;
}
}  // namespace

bool RedisStore::reset_adaptive(const BucketRef& ref, std::string_view hash_tag) {
  if (links_.empty()) return false;
  std::string key = adaptive_key(options_.key_prefix, hash_tag.empty() ? ref.name : hash_tag, ref.name);
  Pick pick = [key](Link& l) { return l.route(key); };
  return call_from_outside(links_.front(), std::move(pick), {"DEL", key}, milliseconds(options_.connect_timeout_ms))
      .has_value();
}

std::optional<BucketSnapshot> RedisStore::inspect(const BucketRef& ref, std::string_view hash_tag) {
  return inspect_many({{ref, hash_tag}}).front();
}

std::vector<std::optional<BucketSnapshot>> RedisStore::inspect_many(const std::vector<BucketProbe>& probes) {
  std::vector<std::optional<BucketSnapshot>> out(probes.size());
  if (probes.empty() || links_.empty()) return out;
  // One script call per slot (a cluster runs a script only on keys of one slot; outside cluster
  // mode, one call for all).
  const bool cluster = options_.mode == RedisMode::cluster;
  std::vector<std::pair<std::uint16_t, std::vector<std::size_t>>> groups;
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const std::uint16_t slot =
        cluster ? cluster_slot(redis_key(options_.key_prefix, probes[i].hash_tag, probes[i].bucket.name)) : 0;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == slot; });
    if (g == groups.end()) g = groups.insert(groups.end(), {slot, {}});
    g->second.push_back(i);
  }
  for (const auto& [slot, members] : groups) {
    std::vector<std::string> args{"EVAL", scripts::kInspect, std::to_string(2 * members.size())};
    for (const std::size_t i : members) {
      args.push_back(redis_key(options_.key_prefix, probes[i].hash_tag, probes[i].bucket.name));
      args.push_back(abandoned_key(options_.key_prefix, probes[i].hash_tag, probes[i].bucket.name));
    }
    Pick pick = [key = args[3]](Link& l) { return l.route(key); };
    const auto r = call_from_outside(links_.front(), std::move(pick), std::move(args),
                                     milliseconds(options_.connect_timeout_ms));
    if (!r || r->items.size() != 2 + 3 * members.size()) continue;
    read_snapshots(probes, members, r->items, out);
  }
  return out;
}

void RedisStore::read_snapshots(const std::vector<BucketProbe>& probes, const std::vector<std::size_t>& members,
                                const std::vector<std::string>& items, std::vector<std::optional<BucketSnapshot>>& out) {
  try {
    const Micros now = std::stoll(items[0]) * 1'000'000 + std::stoll(items[1]);
    for (std::size_t m = 0; m < members.size(); ++m) {
      const std::size_t i = members[m];
      const std::string* f = &items[2 + 3 * m];
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
    for (const std::size_t i : members) out[i].reset();
  }
}

std::optional<std::uint64_t> RedisStore::client_keys() const {
  std::lock_guard lock(count_mu_);
  const std::int64_t now = unix_ms();
  if (counted_at_ms_ != 0 && now - counted_at_ms_ < 10'000) return client_keys_;
  counted_at_ms_ = now;
  client_keys_.reset();
  const auto layout = topology_->current();
  if (links_.empty() || !layout) return client_keys_;
  const std::string pattern = client_keys_pattern(options_.key_prefix);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(options_.connect_timeout_ms) * 2;
  std::uint64_t n = 0;
  // Every primary's keys (one server outside cluster mode).
  for (std::size_t node = 0; node < layout->nodes.size(); ++node) {
    const Pick pick = [a = layout->nodes[node]](Link& l) { return l.find(a); };
    std::string cursor = "0";
    for (int round = 0;; ++round) {
      if (round == 10'000 || std::chrono::steady_clock::now() >= deadline) return client_keys_;
      const auto r = call_from_outside(links_.front(), pick, {"EVAL", scripts::kScanCount, "0", cursor, pattern},
                                       milliseconds(options_.connect_timeout_ms));
      if (!r || r->items.size() != 2) return client_keys_;
      cursor = r->items[0];
      n += std::strtoull(r->items[1].c_str(), nullptr, 10);
      if (cursor == "0") break;
    }
  }
  client_keys_ = n;
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

StoreHealth RedisStore::health() const {
  const RedisStats st = stats();
  StoreHealth h;
  h.name = name();
  h.shared = true;
  h.up = st.up;
  h.incidents = st.incidents;
  h.live_instances = st.live_instances;
  h.last_error = st.last_error;
  h.nodes = nodes_up();
  return h;
}

void RedisStore::publish_metrics(prometheus::Registry& registry) const {
  const RedisStats st = stats();
  gauge(registry, "tollgate_store_up", "Whether the shared bucket store (Redis) answers.").Set(st.up ? 1 : 0);
  // Per primary (one outside cluster mode): whether every thread's connection to it is ready. A
  // primary that left the layout leaves the series.
  auto& per_node = prometheus::BuildGauge()
                       .Name("tollgate_store_node_up")
                       .Help("Whether every gateway thread's connection to this Redis primary is ready.")
                       .Register(registry);
  const auto nodes = nodes_up();
  {
    std::lock_guard lock(nodes_mu_);
    for (const auto& name : shown_nodes_)
      if (std::none_of(nodes.begin(), nodes.end(), [&](const auto& n) { return n.first == name; }))
        per_node.Remove(&per_node.Add({{"node", name}}));
    shown_nodes_.clear();
    for (const auto& [name, up] : nodes) {
      per_node.Add({{"node", name}}).Set(up ? 1 : 0);
      shown_nodes_.push_back(name);
    }
  }
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

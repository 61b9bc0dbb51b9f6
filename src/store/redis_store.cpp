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

#include "redis_scripts.hpp"
#include "tollgate/store/redis_codec.hpp"
#include "tollgate/store/metric_series.hpp"

namespace tollgate::store {

namespace net = boost::asio;
using std::chrono::milliseconds;


namespace {

struct Reply {
  bool ok = false;
  std::string error;
  std::vector<std::string> items;  // array elements (integers as decimal text)
  long long integer = 0;
  std::string text;
};

Reply parse(const redisReply* r) {
  Reply out;
  if (r == nullptr) {
    out.error = "connection lost";
    return out;
  }
  switch (r->type) {
    case REDIS_REPLY_ERROR:
      out.error = std::string(r->str, r->len);
      return out;
    case REDIS_REPLY_INTEGER:
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.text.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      for (size_t i = 0; i < r->elements; ++i) {
        const redisReply* e = r->element[i];
        if (e->type == REDIS_REPLY_INTEGER) out.items.push_back(std::to_string(e->integer));
        else if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) out.items.emplace_back(e->str, e->len);
        else out.items.emplace_back();
      }
      break;
    default:
      break;
  }
  out.ok = true;
  return out;
}

// A command in flight: keeps its arguments (to resend as EVAL after NOSCRIPT) and its completion.
struct Op {
  virtual ~Op() = default;
  virtual void complete(Reply r) = 0;  // never inline: completions are posted
  std::vector<std::string> args;
  const char* script = nullptr;  // set for EVALSHA: the body to fall back on
};

template <class Handler>
struct OpImpl final : Op {
  OpImpl(Handler h, net::any_io_executor e) : handler(std::move(h)), ex(std::move(e)) {}
  void complete(Reply r) override {
    net::post(ex, [h = std::move(handler), r = std::move(r)]() mutable { h(std::move(r)); });
  }
  Handler handler;
  net::any_io_executor ex;
};

std::int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

thread_local const RedisStore* t_owner = nullptr;
thread_local RedisStore::Connection* t_connection = nullptr;

}  // namespace

// One hiredis async connection, owned by one io_context thread.
struct RedisStore::Connection : std::enable_shared_from_this<RedisStore::Connection> {
  Connection(net::io_context& c, RedisStore& s, bool heartbeats)
      : ctx(c), store(s), opt(s.options_), watchdog(c), retry(c), heartbeat(c), beats(heartbeats) {}

  net::io_context& ctx;
  RedisStore& store;
  const RedisOptions& opt;
  redisAsyncContext* ac = nullptr;
  std::unique_ptr<net::posix::stream_descriptor> sd;
  std::uint64_t generation = 0;
  bool want_read = false, want_write = false, reading = false, writing = false;
  bool ready = false, connecting = false, stopping = false, retry_armed = false, watchdog_armed = false;
  std::deque<limiter::Micros> in_flight;  // send times, oldest first (replies come in order)
  limiter::Micros connect_started = 0;
  std::chrono::steady_clock::time_point watchdog_deadline{};
  std::uint64_t watchdog_gen = 0;
  milliseconds backoff{100};
  net::steady_timer watchdog, retry, heartbeat;
  bool ever_ready = false;
  std::string acquire_sha, lean_sha, refund_sha;
  bool beats;

  static Connection* of(const redisAsyncContext* c) { return static_cast<Connection*>(c->data); }

  // ---- event-loop hooks (hiredis asks, Asio waits) ----
  static void add_read(void* p) {
    auto* c = static_cast<Connection*>(p);
    c->want_read = true;
    c->arm_read();
  }
  static void del_read(void* p) { static_cast<Connection*>(p)->want_read = false; }
  static void add_write(void* p) {
    auto* c = static_cast<Connection*>(p);
    c->want_write = true;
    c->arm_write();
  }
  static void del_write(void* p) { static_cast<Connection*>(p)->want_write = false; }
  static void cleanup(void* p) {
    auto* c = static_cast<Connection*>(p);
    c->want_read = c->want_write = false;
    if (c->sd) c->sd->release();  // hiredis closes the fd itself
  }

  // Waits for the fd to be readable (writable) while hiredis wants it, then lets hiredis read
  // (write) and waits again. `busy` marks a wait in progress; `want` is hiredis's wish.
  void arm(bool Connection::*busy, bool Connection::*want, net::posix::stream_descriptor::wait_type what,
           void (*handle)(redisAsyncContext*)) {
    if (this->*busy || !(this->*want) || !sd || !ac) return;
    this->*busy = true;
    sd->async_wait(what, [self = shared_from_this(), gen = generation, busy, want, what, handle](auto ec) {
      if (gen != self->generation) return;
      (*self).*busy = false;
      if (ec || !self->ac) return;
      if ((*self).*want) handle(self->ac);
      self->arm(busy, want, what, handle);
    });
  }
  void arm_read() {
    arm(&Connection::reading, &Connection::want_read, net::posix::stream_descriptor::wait_read, redisAsyncHandleRead);
  }
  void arm_write() {
    arm(&Connection::writing, &Connection::want_write, net::posix::stream_descriptor::wait_write, redisAsyncHandleWrite);
  }

  // ---- connection lifecycle ----
  void connect() {
    if (stopping) return;
    ++generation;
    reading = writing = want_read = want_write = false;
    ready = false;
    in_flight.clear();
    ac = redisAsyncConnect(opt.host.c_str(), opt.port);
    if (ac == nullptr || ac->err) {
      const std::string err = ac ? ac->errstr : "out of memory";
      if (ac) redisAsyncFree(ac);
      ac = nullptr;
      store.record_failure("redis connect: " + err);
      schedule_reconnect();
      return;
    }
    ac->data = this;
    ac->ev.data = this;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    sd = std::make_unique<net::posix::stream_descriptor>(ctx, ac->c.fd);
    connecting = true;
    connect_started = limiter::steady_now_us();
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    arm_watchdog(milliseconds(opt.connect_timeout_ms));
  }

  static void on_connect(const redisAsyncContext* c, int status) {
    Connection* self = of(c);
    self->connecting = false;
    if (status != REDIS_OK) {
      self->ac = nullptr;  // hiredis frees the context after this callback
      self->store.record_failure(std::string("redis connect: ") + (c->errstr[0] ? c->errstr : "failed"));
      self->schedule_reconnect();
      return;
    }
    self->handshake();
  }

  // hiredis calls this with the context it is about to free; every command still in flight has
  // already had its callback (with no reply).
  static void on_disconnect(const redisAsyncContext* c, int status) {
    Connection* self = of(c);
    self->ac = nullptr;
    self->ready = false;
    self->in_flight.clear();
    if (!self->stopping) {
      self->store.record_failure(status == REDIS_OK ? "redis connection closed" : std::string("redis: ") + c->errstr);
      self->schedule_reconnect();
    }
  }

  void handshake() {
    auto after = [self = shared_from_this()](Reply r, const char* what) -> bool {
      if (!r.ok) {
        self->teardown(std::string("redis ") + what + ": " + r.error);
        return false;
      }
      return true;
    };
    if (!opt.password.empty()) internal({"AUTH", opt.password}, [after](Reply r) { after(std::move(r), "AUTH"); });
    if (opt.database != 0)
      internal({"SELECT", std::to_string(opt.database)}, [after](Reply r) { after(std::move(r), "SELECT"); });
    internal({"SCRIPT", "LOAD", refund_script()}, [self = shared_from_this(), after](Reply r) {
      if (after(r, "SCRIPT LOAD")) self->refund_sha = r.text;
    });
    internal({"SCRIPT", "LOAD", lean_acquire_script()}, [self = shared_from_this(), after](Reply r) {
      if (after(r, "SCRIPT LOAD")) self->lean_sha = r.text;
    });
    internal({"SCRIPT", "LOAD", acquire_script()}, [self = shared_from_this(), after](Reply r) {
      if (!after(r, "SCRIPT LOAD")) return;
      self->acquire_sha = r.text;
      self->ready = true;
      self->backoff = milliseconds(100);
      if (!self->ever_ready) {
        self->ever_ready = true;
        self->store.connection_ready();
      }
      self->store.record_success();
      if (self->beats) self->beat();
    });
  }

  void teardown(const std::string& why) {
    if (!ac) return;
    store.record_failure(why);
    redisAsyncContext* c = ac;
    ac = nullptr;
    ready = false;
    redisAsyncFree(c);  // fails every command in flight (callbacks with no reply), then on_disconnect
    schedule_reconnect();
  }

  void schedule_reconnect() {
    if (stopping || retry_armed) return;
    retry_armed = true;
    retry.expires_after(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
    retry.async_wait([self = shared_from_this()](auto ec) {
      self->retry_armed = false;
      if (!ec && !self->stopping && !self->ac) self->connect();
    });
  }

  // One timer per connection watches the oldest command in flight (and the connect). Arming it
  // for an earlier deadline than the pending one moves it; a later one leaves it be.
  void arm_watchdog(milliseconds after) {
    const auto deadline = std::chrono::steady_clock::now() + after;
    if (watchdog_armed && watchdog_deadline <= deadline) return;
    watchdog_armed = true;
    watchdog_deadline = deadline;
    const std::uint64_t gen = ++watchdog_gen;
    watchdog.expires_at(deadline);
    watchdog.async_wait([self = shared_from_this(), gen](auto ec) {
      if (gen != self->watchdog_gen) return;  // superseded by a re-arm
      self->watchdog_armed = false;
      if (!ec) self->check_deadlines();
    });
  }

  void check_deadlines() {
    if (!ac) return;
    const limiter::Micros now = limiter::steady_now_us();
    if (connecting) {
      const limiter::Micros left = connect_started + opt.connect_timeout_ms * 1000LL - now;
      if (left <= 0) return teardown("redis connect: no answer within " + std::to_string(opt.connect_timeout_ms) + " ms");
      return arm_watchdog(milliseconds(left / 1000 + 1));
    }
    if (in_flight.empty()) return;
    const limiter::Micros left = in_flight.front() + opt.decision_timeout_ms * 1000LL - now;
    if (left <= 0)
      return teardown("redis: no answer within " + std::to_string(opt.decision_timeout_ms) + " ms (decision timeout)");
    arm_watchdog(milliseconds(left / 1000 + 1));
  }

  // ---- commands ----
  static void on_reply(redisAsyncContext* c, void* r, void* privdata) {
    Connection* self = of(c);
    std::unique_ptr<Op> op(static_cast<Op*>(privdata));
    if (!self->in_flight.empty()) self->in_flight.pop_front();
    auto* reply = static_cast<redisReply*>(r);
    if (reply && reply->type == REDIS_REPLY_ERROR && op->script &&
        std::string_view(reply->str, reply->len).starts_with("NOSCRIPT")) {
      // The server lost its scripts (restart, SCRIPT FLUSH): send the body once with EVAL.
      op->args[0] = "EVAL";
      op->args[1] = op->script;
      op->script = nullptr;
      self->send(op.release(), true);
      return;
    }
    op->complete(parse(reply));
  }

  void send(Op* op, bool internal_ok) {
    if (!ac || (!ready && !internal_ok)) {
      op->complete(Reply{false, "redis not connected", {}, 0, {}});
      delete op;
      return;
    }
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : op->args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAsyncCommandArgv(ac, on_reply, op, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      op->complete(Reply{false, "redis: command not accepted (disconnecting)", {}, 0, {}});
      delete op;
      return;
    }
    in_flight.push_back(limiter::steady_now_us());
    arm_watchdog(milliseconds(opt.decision_timeout_ms));
  }

  template <class F>
  void internal(std::vector<std::string> args, F f) {
    auto* op = new OpImpl<F>(std::move(f), ctx.get_executor());
    op->args = std::move(args);
    send(op, true);
  }

  template <class Token>
  auto async_call(std::vector<std::string> args, const char* script, Token&& token) {
    return net::async_initiate<Token, void(Reply)>(
        [this](auto handler, std::vector<std::string> a, const char* s) {
          auto ex = net::get_associated_executor(handler, ctx.get_executor());
          auto* op = new OpImpl<decltype(handler)>(std::move(handler), ex);
          op->args = std::move(a);
          op->script = s;
          send(op, false);
        },
        token, std::move(args), script);
  }

  // ---- coalesced decisions (the lean script) ----
  // At most one lean call per bucket key in flight on this connection: decisions that arrive
  // meanwhile queue in the key's lane and go together in the next call, decided in arrival order at
  // one Redis TIME. A script runs atomically, so each gets what a call of its own at that instant
  // would have given it; under load N decisions cost one round trip and one read and write.
  struct Waiter {
    explicit Waiter(AcquireRequest r) : req(std::move(r)) {}
    virtual ~Waiter() = default;
    virtual void complete(StoreDecision d) = 0;  // never inline: completions are posted
    AcquireRequest req;
  };
  template <class Handler>
  struct WaiterImpl final : Waiter {
    WaiterImpl(AcquireRequest r, Handler h, net::any_io_executor e)
        : Waiter(std::move(r)), handler(std::move(h)), ex(std::move(e)) {}
    void complete(StoreDecision d) override {
      net::post(ex, [h = std::move(handler), d = std::move(d)]() mutable { h(std::move(d)); });
    }
    Handler handler;
    net::any_io_executor ex;
  };
  using Batch = std::vector<std::unique_ptr<Waiter>>;
  struct Lane {
    bool busy = false;  // a call for this key is in flight
    std::deque<std::unique_ptr<Waiter>> queued;
  };
  static constexpr std::size_t kMaxBatch = 128;  // bounds one script's run time and arguments
  std::unordered_map<std::string, Lane> lanes;

  // One lean decision: its answer, or a StoreDecision with status `unavailable` and the error.
  template <class Token>
  auto async_decide(AcquireRequest req, Token&& token) {
    return net::async_initiate<Token, void(StoreDecision)>(
        [this](auto handler, AcquireRequest r) {
          auto ex = net::get_associated_executor(handler, ctx.get_executor());
          std::string key = redis_key(opt.key_prefix, r.hash_tag.empty() ? r.bucket.name : r.hash_tag, r.bucket.name);
          Lane& lane = lanes[key];
          lane.queued.push_back(std::make_unique<WaiterImpl<decltype(handler)>>(std::move(r), std::move(handler), ex));
          if (!lane.busy) send_batch(key);
        },
        token, std::move(req));
  }

  // Sends the key's next batch: the oldest waiter and those queued after it that can share its
  // call (same shape: a rule edited in between starts the next batch). No waiter left: the lane goes.
  void send_batch(const std::string& key) {
    auto it = lanes.find(key);
    if (it == lanes.end()) return;
    Lane& lane = it->second;
    if (lane.queued.empty()) {
      lanes.erase(it);
      return;
    }
    auto batch = std::make_shared<Batch>();
    do {
      batch->push_back(std::move(lane.queued.front()));
      lane.queued.pop_front();
    } while (!lane.queued.empty() && batch->size() < kMaxBatch && batchable(batch->front()->req, lane.queued.front()->req));
    lane.busy = true;
    std::vector<const AcquireRequest*> reqs;
    reqs.reserve(batch->size());
    for (const auto& w : *batch) reqs.push_back(&w->req);
    std::vector<std::string> args{"EVALSHA", lean_sha};
    for (auto& a : lean_batch_call(reqs, opt.key_prefix, "")) args.push_back(std::move(a));
    auto done = [self = shared_from_this(), key, batch](Reply r) { self->finish_batch(key, *batch, std::move(r)); };
    auto* op = new OpImpl<decltype(done)>(std::move(done), ctx.get_executor());
    op->args = std::move(args);
    op->script = lean_acquire_script();
    send(op, false);
  }

  void finish_batch(const std::string& key, Batch& batch, Reply r) {
    std::vector<const AcquireRequest*> reqs;
    reqs.reserve(batch.size());
    for (const auto& w : batch) reqs.push_back(&w->req);
    std::optional<std::vector<StoreDecision>> ds;
    if (r.ok) ds = parse_lean_batch_reply(reqs, r.items);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (ds) {
        batch[i]->complete(std::move((*ds)[i]));
        continue;
      }
      StoreDecision failed;
      failed.status = StoreStatus::unavailable;
      failed.error = r.ok ? "redis: unexpected script reply" : r.error;
      batch[i]->complete(std::move(failed));
    }
    if (auto it = lanes.find(key); it != lanes.end()) {
      it->second.busy = false;
      send_batch(key);
    }
  }

  // ---- heartbeats: how many instances share the fleet's limits (for the `local` policy) ----
  void beat() {
    if (stopping || !ready) return;
    static constexpr const char* kBeat = R"LUA(
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return redis.call('ZCARD', KEYS[1])
)LUA";
    const std::string window = std::to_string(opt.heartbeat_ms * 3);
    internal({"EVAL", kBeat, "1", opt.key_prefix + "{instances}", store.instance_id_, window},
             [self = shared_from_this()](Reply r) {
               if (r.ok && r.integer > 0) self->store.live_instances_.store(static_cast<unsigned>(r.integer));
             });
    heartbeat.expires_after(milliseconds(opt.heartbeat_ms));
    heartbeat.async_wait([self = shared_from_this()](auto ec) {
      if (!ec) self->beat();
    });
  }

  void stop() {
    stopping = true;
    retry.cancel();
    watchdog.cancel();
    heartbeat.cancel();
    if (ac) {
      redisAsyncContext* c = ac;
      ac = nullptr;
      ready = false;
      redisAsyncFree(c);
    }
  }
};

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
  std::lock_guard lock(incident_mu_);
  if (up_) return;
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
  failures_.fetch_add(1, std::memory_order_relaxed);
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
    co_return d;
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
  s.failures = failures_.load();
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

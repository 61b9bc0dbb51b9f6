// One hiredis async connection of the Redis store to one server (a primary), owned by one gateway
// thread's io_context: the event-loop hooks (hiredis asks, Asio waits on the fd),
// connect/handshake/reconnect with backoff, one deadline timer for the oldest command in flight,
// NOSCRIPT recovery, coalesced lean decisions per bucket key, and what a cluster or a failover
// answers (MOVED, ASK, TRYAGAIN, READONLY). Then a thread's Link: its connections, one per primary
// of the current layout, the routing of a key to one of them, and heartbeats. Included by
// redis_store.cpp only (hiredis and Asio stay in this one translation unit).
#pragma once

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <vector>

#include "redis_scripts.hpp"
#include "redis_topology.hpp"
#include "tollgate/store/redis_codec.hpp"
#include "tollgate/store/redis_layout.hpp"
#include "tollgate/store/redis_store.hpp"

namespace tollgate::store {

namespace net = boost::asio;

namespace redis_detail {

using std::chrono::milliseconds;


struct Reply {
  bool ok = false;
  std::string error;
  std::vector<std::string> items;  // array elements (integers as decimal text)
  long long integer = 0;
  std::string text;
};

inline Reply parse(const redisReply* r) {
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

// A command in flight: its wire text (kept for EVALSHA, to send again as EVAL after NOSCRIPT) and
// what to do with the answer.
struct Op {
  virtual ~Op() = default;
  // The reply, on the connection's thread inside hiredis's callback; nullptr when the command
  // failed or the connection was lost (`error` says which). Whatever it completes is posted.
  virtual void finish(const redisReply* r, std::string_view error) = 0;
  std::string wire;              // the command in Redis's wire format
  const char* script = nullptr;  // set for EVALSHA: the body to fall back on
};

template <class Handler>
struct OpImpl final : Op {
  OpImpl(Handler h, net::any_io_executor e) : handler(std::move(h)), ex(std::move(e)) {}
  void finish(const redisReply* r, std::string_view error) override {
    Reply out = parse(r);
    if (r == nullptr) out.error = error;
    net::post(ex, [h = std::move(handler), out = std::move(out)]() mutable { h(std::move(out)); });
  }
  Handler handler;
  net::any_io_executor ex;
};

// hiredis's reply objects made in an arena of the connection's instead of a calloc per object and
// a malloc per string (~2k instructions a batch reply). They are real redisReply structs (hiredis
// itself reads the type of an unexpected reply). hiredis builds one reply at a time and frees only
// the whole reply, after its callback: that free empties the arena. A top-level reply carries its
// arena just before it, which is how the free (given only the object) finds it.
class ReplyArena {
 public:
  static redisReplyObjectFunctions functions;
  void attach(redisReader* reader) {
    reader->fn = &functions;
    reader->privdata = this;
  }

 private:
  struct Top {
    ReplyArena* arena;
    redisReply reply;
  };
  static ReplyArena* of(const redisReadTask* t) { return static_cast<ReplyArena*>(t->privdata); }
  redisReply* make(const redisReadTask* task, int type) {
    redisReply* r;
    if (task->parent == nullptr) {
      auto* top = static_cast<Top*>(mem_.allocate(sizeof(Top), alignof(Top)));
      top->arena = this;
      r = &top->reply;
    } else {
      r = static_cast<redisReply*>(mem_.allocate(sizeof(redisReply), alignof(redisReply)));
      static_cast<redisReply*>(task->parent->obj)->element[task->idx] = r;
    }
    *r = redisReply{};
    r->type = type;
    return r;
  }
  // Called from hiredis's C code: no exception may leave them. Out of memory, they return NULL,
  // which hiredis turns into a reader error (and a dropped connection) as with its own functions.
  static void* create_string(const redisReadTask* t, char* str, size_t len) noexcept try {
    ReplyArena* a = of(t);
    redisReply* r = a->make(t, t->type);
    auto* text = static_cast<char*>(a->mem_.allocate(len + 1, 1));
    std::memcpy(text, str, len);
    text[len] = '\0';
    r->str = text;
    r->len = len;
    return r;
  } catch (...) {
    return nullptr;
  }
  static void* create_array(const redisReadTask* t, int elements) noexcept try {
    ReplyArena* a = of(t);
    redisReply* r = a->make(t, REDIS_REPLY_ARRAY);
    if (elements > 0) {
      const auto n = static_cast<std::size_t>(elements);
      r->element = static_cast<redisReply**>(a->mem_.allocate(n * sizeof(redisReply*), alignof(redisReply*)));
      std::fill_n(r->element, n, nullptr);
    }
    r->elements = static_cast<std::size_t>(std::max(elements, 0));
    return r;
  } catch (...) {
    return nullptr;
  }
  static void* create_integer(const redisReadTask* t, long long value) noexcept try {
    redisReply* r = of(t)->make(t, REDIS_REPLY_INTEGER);
    r->integer = value;
    return r;
  } catch (...) {
    return nullptr;
  }
  static void* create_nil(const redisReadTask* t) noexcept try {
    return of(t)->make(t, REDIS_REPLY_NIL);
  } catch (...) {
    return nullptr;
  }
  static void free_object(void* reply) {
    auto* top = reinterpret_cast<Top*>(static_cast<char*>(reply) - offsetof(Top, reply));
    top->arena->mem_.release();
  }

  alignas(std::max_align_t) std::byte initial_[16 * 1024];
  std::pmr::monotonic_buffer_resource mem_{initial_, sizeof initial_};
};
inline redisReplyObjectFunctions ReplyArena::functions{create_string, create_array, create_integer, create_nil,
                                                       free_object};

inline std::int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace redis_detail

// A gateway thread's connections: one per primary of the current layout (one outside cluster mode),
// made and retired on the thread as layouts arrive, and the routing of a key to one of them.
struct RedisStore::Link : std::enable_shared_from_this<RedisStore::Link> {
  Link(net::io_context& c, RedisStore& s, bool heartbeats) : ctx(c), store(s), heartbeat(c), beats(heartbeats) {}
  net::io_context& ctx;
  RedisStore& store;
  std::shared_ptr<const RedisLayout> layout;
  std::vector<std::shared_ptr<Connection>> by_node;  // in the order of layout->nodes
  std::string key_scratch;
  net::steady_timer heartbeat;
  bool beats;  // this thread says the instance is alive (one thread does)
  bool beating = false, stopping = false;

  // The connection for a request's keys (its hash tag's slot), or nullptr when none serves it.
  Connection* route(const AcquireRequest& r) {
    if (by_node.size() == 1) return by_node.front().get();  // standalone, sentinel, a one-node cluster
    if (by_node.empty()) return nullptr;
    append_redis_key(key_scratch, store.options_.key_prefix, r.hash_tag.empty() ? r.bucket.name : r.hash_tag,
                     r.bucket.name);
    return route(key_scratch);
  }
  Connection* route(std::string_view key) {
    if (by_node.empty()) return nullptr;
    const std::uint16_t n = layout->node_of(key);
    return n < by_node.size() ? by_node[n].get() : nullptr;
  }
  Connection* find(const RedisAddress& a);
  // A lean decision or refund routed by the current layout, or failed when no ready connection serves it.
  template <class W>
  void enqueue(std::unique_ptr<W> w);
  void apply(std::shared_ptr<const RedisLayout> next);
  void connection_ready(Connection* c);
  void beat();
  void stop();
};

// One hiredis async connection, owned by one io_context thread.
struct RedisStore::Connection : std::enable_shared_from_this<RedisStore::Connection> {
  using Reply = redis_detail::Reply;
  using Op = redis_detail::Op;
  template <class H>
  using OpImpl = redis_detail::OpImpl<H>;
  using milliseconds = std::chrono::milliseconds;
  Connection(net::io_context& c, RedisStore& s, Link& l, RedisAddress a)
      : ctx(c), store(s), link(l), opt(s.options_), address(std::move(a)), watchdog(c), retry(c) {}

  net::io_context& ctx;
  RedisStore& store;
  Link& link;
  const RedisOptions& opt;
  const RedisAddress address;  // the server (a primary) this connection talks to
  redisAsyncContext* ac = nullptr;
  std::unique_ptr<net::posix::stream_descriptor> sd;
  std::uint64_t generation = 0;
  bool want_read = false, want_write = false, reading = false, writing = false;
  bool ready = false, connecting = false, stopping = false, retry_armed = false, watchdog_armed = false;
  bool retired = false;  // no longer in the layout: finishing what it has in flight, then stopped
  std::deque<limiter::Micros> in_flight;  // send times, oldest first (replies come in order)
  limiter::Micros connect_started = 0;
  std::chrono::steady_clock::time_point watchdog_deadline{};
  std::uint64_t watchdog_gen = 0;
  milliseconds backoff{100};
  net::steady_timer watchdog, retry;
  std::string acquire_sha, lean_sha, refund_sha;
  redis_detail::ReplyArena arena;  // every reply's objects; outlives the context (freed in stop())

  static Connection* of(const redisAsyncContext* c) { return static_cast<Connection*>(c->data); }

  // The store counts the connections ready for decisions: an incident ends when all are back.
  void set_ready(bool now_ready) {
    if (now_ready == ready) return;
    ready = now_ready;
    if (!retired) store.count_connection(address, 0, now_ready ? 1 : -1);
  }

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
    set_ready(false);
    in_flight.clear();
    ac = redisAsyncConnect(address.host.c_str(), address.port);
    if (ac == nullptr || ac->err) {
      const std::string err = ac ? ac->errstr : "out of memory";
      if (ac) redisAsyncFree(ac);
      ac = nullptr;
      store.record_failure("redis connect " + address.to_string() + ": " + err);
      schedule_reconnect();
      return;
    }
    ac->data = this;
    arena.attach(ac->c.reader);
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
      if (!self->retired)
        self->store.record_failure("redis connect " + self->address.to_string() + ": " +
                                   (c->errstr[0] ? c->errstr : "failed"));
      self->store.topology_->refresh();
      self->schedule_reconnect();
      return;
    }
    self->handshake();
  }

  // hiredis calls this with the context it is about to free; every command still in flight has
  // already had its callback (with no reply).
  static void on_disconnect(const redisAsyncContext* c, int status) {
    Connection* self = of(c);
    // Torn down by us (teardown cleared `ac` first and recorded why): the why stays the error.
    const bool ours = self->ac != c;
    self->ac = nullptr;
    self->set_ready(false);
    self->in_flight.clear();
    if (!self->stopping && !self->retired) {
      if (!ours)
        self->store.record_failure(status == REDIS_OK ? "redis connection to " + self->address.to_string() + " closed"
                                                      : "redis " + self->address.to_string() + ": " + c->errstr);
      self->store.topology_->refresh();
      self->schedule_reconnect();
    }
  }

  void handshake() {
    // A reply of a connection that has since gone (torn down by an earlier reply of the same
    // read, closed, timed out) counts for nothing: only the current connection may become ready.
    auto after = [self = shared_from_this(), gen = generation](Reply r, const char* what) -> bool {
      if (gen != self->generation || !self->ac) return false;
      if (!r.ok) {
        self->teardown(std::string("redis ") + what + ": " + r.error);
        return false;
      }
      return true;
    };
    if (!opt.password.empty()) internal({"AUTH", opt.password}, [after](Reply r) { after(std::move(r), "AUTH"); });
    // Only a primary takes decisions: a replica (a stale layout, a demoted primary) is left at once.
    internal({"ROLE"}, [self = shared_from_this(), after](Reply r) {
      if (!after(r, "ROLE")) return;
      if (r.items.empty() || r.items.front() != "master")
        self->teardown("redis " + self->address.to_string() + " is a " + (r.items.empty() ? "?" : r.items.front()) +
                       ", not a primary");
    });
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
      self->set_ready(true);
      self->backoff = milliseconds(100);
      self->store.record_success();
      self->link.connection_ready(self.get());
    });
  }

  void teardown(const std::string& why) {
    if (!ac) return;
    set_ready(false);  // before the failure is recorded: an incident never ends on a stale count
    if (!retired) store.record_failure(why);
    store.topology_->refresh();
    redisAsyncContext* c = ac;
    ac = nullptr;
    redisAsyncFree(c);  // fails every command in flight (callbacks with no reply), then on_disconnect
    schedule_reconnect();
  }

  void schedule_reconnect() {
    if (stopping || retired || retry_armed) return;
    retry_armed = true;
    retry.expires_after(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
    retry.async_wait([self = shared_from_this()](auto ec) {
      self->retry_armed = false;
      if (!ec && !self->stopping && !self->retired && !self->ac) self->connect();
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
      if (auto eval = evalsha_as_eval(op->wire, op->script)) {
        op->wire = std::move(*eval);
        op->script = nullptr;
        self->send(op.release(), true);
        return;
      }
    }
    // Redis 7 answers READONLY; Redis 6 wraps it in a script error ("... -READONLY ...").
    if (reply && reply->type == REDIS_REPLY_ERROR &&
        std::string_view(reply->str, reply->len).find("READONLY") != std::string_view::npos) {
      // A replica now (the sentinels promoted another server): no decision is made here again.
      net::post(self->ctx, [s = self->shared_from_this(), gen = self->generation] {
        if (gen == s->generation) s->teardown("redis " + s->address.to_string() + " is a replica now (READONLY)");
      });
    }
    op->finish(reply, "connection lost");
  }

  void send(Op* op, bool internal_ok) {
    std::unique_ptr<Op> owned(op);
    if (!ac || (!ready && !internal_ok)) return owned->finish(nullptr, "redis not connected");
    if (redisAsyncFormattedCommand(ac, on_reply, op, op->wire.data(), op->wire.size()) != REDIS_OK)
      return owned->finish(nullptr, "redis: command not accepted (disconnecting)");
    owned.release();  // hiredis holds it until on_reply
    if (!op->script) std::string().swap(op->wire);  // hiredis has its own copy
    in_flight.push_back(limiter::steady_now_us());
    arm_watchdog(milliseconds(opt.decision_timeout_ms));
  }

  template <class F>
  void internal(const std::vector<std::string>& args, F f) {
    auto* op = new OpImpl<F>(std::move(f), ctx.get_executor());
    op->wire = resp_command(args);
    send(op, true);
  }

  template <class Token>
  auto async_call(std::vector<std::string> args, const char* script, Token&& token) {
    return net::async_initiate<Token, void(Reply)>(
        [this](auto handler, std::vector<std::string> a, const char* s) {
          auto ex = net::get_associated_executor(handler, ctx.get_executor());
          auto* op = new OpImpl<decltype(handler)>(std::move(handler), ex);
          // Formatted here in one string (hiredis's own formatting costs ~2k instructions a command).
          op->wire = resp_command(a);
          op->script = s;
          send(op, false);
        },
        token, std::move(args), script);
  }

  // ---- coalesced decisions (the lean script) ----
  // At most one lean call per bucket key in flight on this connection: decisions (and refunds of
  // what such decisions granted) that arrive meanwhile queue in the key's lane and go together in
  // the next call, in arrival order at one Redis TIME. A script runs atomically, so each gets what a
  // call of its own at that instant would have given it; under load N decisions cost one round
  // trip and one read and write.
  struct Waiter {
    Waiter(AcquireRequest r, std::optional<Reservation> g) : req(std::move(r)), give_back(g) {}
    virtual ~Waiter() = default;
    // A decision's answer, or a refund's; never inline: completions are posted.
    virtual void complete(LeanAnswer a) = 0;
    virtual void fail(const std::string& why) = 0;
    AcquireRequest req;
    std::optional<Reservation> give_back;  // set: a refund of this reservation, not a decision
    std::uint8_t hops = 0;                 // sent again after MOVED, ASK or TRYAGAIN
  };
  template <class Handler>
  struct DecisionWaiter final : Waiter {
    DecisionWaiter(AcquireRequest r, Handler h, net::any_io_executor e)
        : Waiter(std::move(r), std::nullopt), handler(std::move(h)), ex(std::move(e)) {}
    void complete(LeanAnswer a) override { done(std::move(a.decision)); }
    void fail(const std::string& why) override {
      StoreDecision failed;
      failed.status = StoreStatus::unavailable;
      failed.error = why;
      done(std::move(failed));
    }
    void done(StoreDecision d) {
      net::post(ex, [h = std::move(handler), d = std::move(d)]() mutable { h(std::move(d)); });
    }
    Handler handler;
    net::any_io_executor ex;
  };
  template <class Handler>
  struct RefundWaiter final : Waiter {
    RefundWaiter(AcquireRequest r, Reservation g, Handler h, net::any_io_executor e)
        : Waiter(std::move(r), g), handler(std::move(h)), ex(std::move(e)) {}
    void complete(LeanAnswer a) override { done(a.refund); }
    void fail(const std::string&) override { done(RefundResult{}); }  // nothing was given back
    void done(RefundResult r) {
      net::post(ex, [h = std::move(handler), r]() mutable { h(r); });
    }
    Handler handler;
    net::any_io_executor ex;
  };
  struct Lane {
    bool busy = false;  // a call for this key is in flight
    std::deque<std::unique_ptr<Waiter>> queued;
  };
  using LaneEntry = std::pair<const std::string, Lane>;  // the key, as the script's KEYS[1]
  static constexpr std::size_t kMaxBatch = 128;  // bounds one script's run time and arguments
  // Idle lanes are kept (no map node, key or deque made again per call) up to this many keys; past
  // it an idle lane goes when its call ends, so per-client buckets cannot grow the map unbounded.
  static constexpr std::size_t kIdleLanes = 1024;
  std::unordered_map<std::string, Lane> lanes;
  std::string key_scratch;               // the key of the entry being queued
  std::vector<ReplyItem> reply_scratch;  // a batch reply's elements as the codec reads them

  // One call of coalesced entries: their waiters, and what the codec reads of them in the same
  // order. Parsed straight from hiredis's reply, with no strings made.
  struct BatchOp final : Op {
    BatchOp(std::shared_ptr<Connection> c, LaneEntry* l) : conn(std::move(c)), lane(l) {}
    // A batch of no lane (sent after ASK) names its own key.
    void finish(const redisReply* r, std::string_view error) override {
      std::optional<std::vector<LeanAnswer>> answers;
      if (r != nullptr && r->type == REDIS_REPLY_ARRAY) {
        auto& items = conn->reply_scratch;
        items.resize(r->elements);
        for (std::size_t i = 0; i < r->elements; ++i) {
          const redisReply* e = r->element[i];
          items[i].is_integer = e->type == REDIS_REPLY_INTEGER;
          items[i].integer = e->integer;
          items[i].text = items[i].is_integer ? std::string_view() : std::string_view(e->str, e->len);
        }
        answers = parse_lean_batch_reply(entries, items.data(), items.size());
      }
      std::string why;
      if (!answers) why = r == nullptr ? std::string(error)
                          : r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len)
                                                         : "redis: unexpected script reply";
      if (r != nullptr) return conn->finish_batch(lane, waiters, std::move(answers), why);
      // No reply: hiredis may be freeing the context; the next call waits for the event loop.
      net::post(conn->ctx, [c = conn, l = lane, w = std::move(waiters), why = std::move(why)]() mutable {
        c->finish_batch(l, w, std::nullopt, why);
      });
    }
    std::shared_ptr<Connection> conn;
    LaneEntry* lane;  // nullptr: a batch sent once after ASK, outside the lanes
    std::vector<std::unique_ptr<Waiter>> waiters;
    std::vector<LeanEntry> entries;
  };

  // Queues a waiter in its key's lane and sends the lane's next batch if none is in flight. The
  // caller has checked that the connection is ready.
  void enqueue(std::unique_ptr<Waiter> w) {
    const AcquireRequest& r = w->req;
    append_redis_key(key_scratch, opt.key_prefix, r.hash_tag.empty() ? r.bucket.name : r.hash_tag, r.bucket.name);
    auto it = lanes.find(key_scratch);
    if (it == lanes.end()) it = lanes.try_emplace(key_scratch).first;
    it->second.queued.push_back(std::move(w));
    if (!it->second.busy) send_batch(&*it);
  }

  // One lean decision: its answer, or a StoreDecision with status `unavailable` and the error.
  template <class Token>
  auto async_decide(AcquireRequest req, Token&& token) {
    return net::async_initiate<Token, void(StoreDecision)>(
        [this](auto handler, AcquireRequest r) {
          auto ex = net::get_associated_executor(handler, ctx.get_executor());
          enqueue(std::make_unique<DecisionWaiter<decltype(handler)>>(std::move(r), std::move(handler), ex));
        },
        token, std::move(req));
  }

  // The refund of a reservation a lean decision granted, in the same lane: what was given back
  // (nothing when Redis did not answer).
  template <class Token>
  auto async_refund(AcquireRequest req, Reservation res, Token&& token) {
    return net::async_initiate<Token, void(RefundResult)>(
        [this](auto handler, AcquireRequest r, Reservation g) {
          auto ex = net::get_associated_executor(handler, ctx.get_executor());
          enqueue(std::make_unique<RefundWaiter<decltype(handler)>>(std::move(r), g, std::move(handler), ex));
        },
        token, std::move(req), res);
  }

  // Sends the key's next batch: the oldest entry and those queued after it that can share its
  // call (refunds always; decisions of the same shape and mode as the batch's first decision: a
  // rule edited in between starts the next batch).
  void send_batch(LaneEntry* entry) {
    Lane& lane = entry->second;
    if (lane.queued.empty()) {
      if (lanes.size() > kIdleLanes) lanes.erase(entry->first);
      return;
    }
    if (retired) return reroute_queued(lane);
    auto op = std::make_unique<BatchOp>(shared_from_this(), entry);
    op->waiters.reserve(std::min(lane.queued.size(), kMaxBatch));
    op->entries.reserve(std::min(lane.queued.size(), kMaxBatch));
    const AcquireRequest* shape = nullptr;  // the batch's first decision
    do {
      Waiter& w = *lane.queued.front();
      if (!w.give_back) {
        if (shape != nullptr && !batchable(*shape, w.req)) break;
        if (shape == nullptr) shape = &w.req;
      }
      // The waiter's request does not move with it.
      op->entries.push_back({&w.req, w.give_back ? &*w.give_back : nullptr});
      op->waiters.push_back(std::move(lane.queued.front()));
      lane.queued.pop_front();
    } while (!lane.queued.empty() && op->waiters.size() < kMaxBatch);
    lane.busy = true;
    try {
      lean_batch_command(op->wire, lean_sha, entry->first, opt.key_prefix, op->entries);
    } catch (const std::exception& e) {
      // Not sendable (out of memory): its waiters are answered as a failed call, never lost.
      net::post(ctx, [c = shared_from_this(), entry, w = std::move(op->waiters),
                      why = std::string("redis: ") + e.what()]() mutable { c->finish_batch(entry, w, std::nullopt, why); });
      return;
    }
    op->script = lean_acquire_script();
    send(op.release(), false);
  }

  void finish_batch(LaneEntry* entry, std::vector<std::unique_ptr<Waiter>>& waiters,
                    std::optional<std::vector<LeanAnswer>> answers, const std::string& why) {
    if (!answers && !waiters.empty() && redirected(waiters, why)) {
      waiters.clear();
    } else {
      for (std::size_t i = 0; i < waiters.size(); ++i) {
        if (answers) waiters[i]->complete(std::move((*answers)[i]));
        else waiters[i]->fail(why);
      }
    }
    if (entry == nullptr) return;  // an ASK batch
    entry->second.busy = false;
    send_batch(entry);
  }

  // What a cluster answers while a slot moves, or a connection being retired lost: the batch's
  // waiters sent again where the slot is now (at most a few hops each). False: answer them as failed.
  bool redirected(std::vector<std::unique_ptr<Waiter>>& waiters, const std::string& why) {
    // A MOVED or ASK is followed at once (a hop or two); TRYAGAIN (keys of a slot half moved)
    // every 20 ms: together at most ~200 ms, then the failure policy decides.
    static constexpr std::uint8_t kMaxHops = 10;
    for (const auto& w : waiters)
      if (w->hops >= kMaxHops) return false;
    for (auto& w : waiters) ++w->hops;
    if (const auto to = parse_redirect(why)) {
      if (!to->ask) store.topology_->refresh();  // the slot moved for good: the map is stale
      Connection* target = link.find(to->to);
      if (target == nullptr || !target->ready) {
        store.topology_->refresh();
        return false;
      }
      if (to->ask) return target->send_asking(waiters), true;
      for (auto& w : waiters) target->enqueue(std::move(w));
      return true;
    }
    if (why.starts_with("TRYAGAIN")) {  // a multi-key call while the slot's keys move: shortly again
      auto timer = std::make_shared<net::steady_timer>(ctx, milliseconds(20));
      timer->async_wait([timer, l = &link, w = std::move(waiters)](auto) mutable {
        for (auto& one : w) l->enqueue(std::move(one));
      });
      return true;
    }
    // Not sent, or refused unrun, by a connection leaving the layout: the current one routes them.
    // A call that may have run (no answer in time, connection lost) is answered as failed, never
    // run twice.
    if (retired && (why.starts_with("redis not connected") || why.starts_with("redis: command not accepted") ||
                    why.find("READONLY") != std::string::npos)) {
      for (auto& w : waiters) link.enqueue(std::move(w));
      return true;
    }
    return false;
  }

  // After ASK: the batch once on this node, right behind ASKING (replies come in order, and
  // nothing else is written between the two).
  void send_asking(std::vector<std::unique_ptr<Waiter>>& waiters) {
    auto op = std::make_unique<BatchOp>(shared_from_this(), nullptr);
    const AcquireRequest& r = waiters.front()->req;
    std::string key;
    append_redis_key(key, opt.key_prefix, r.hash_tag.empty() ? r.bucket.name : r.hash_tag, r.bucket.name);
    for (auto& w : waiters) {
      op->entries.push_back({&w->req, w->give_back ? &*w->give_back : nullptr});
      op->waiters.push_back(std::move(w));
    }
    lean_batch_command(op->wire, lean_sha, key, opt.key_prefix, op->entries);
    op->script = lean_acquire_script();
    internal({"ASKING"}, [](Reply) {});
    send(op.release(), false);
  }

  // Waiters queued here that were not sent: routed again by the thread's current layout.
  void reroute_queued(Lane& lane) {
    while (!lane.queued.empty()) {
      auto w = std::move(lane.queued.front());
      lane.queued.pop_front();
      link.enqueue(std::move(w));
    }
  }

  // No longer a primary of the layout: what is queued goes where the layout says, what is in
  // flight is answered (or redirected), and the connection closes a little later.
  void retire() {
    if (retired) return;
    store.count_connection(address, -1, ready ? -1 : 0);
    retired = true;
    for (auto& [key, lane] : lanes)
      if (!lane.busy) reroute_queued(lane);
    retry.cancel();
    retry_armed = true;  // no reconnect
    retry.expires_after(milliseconds(2 * opt.decision_timeout_ms + 100));
    retry.async_wait([self = shared_from_this()](auto) { self->stop(); });
  }

  void stop() {
    stopping = true;
    retry.cancel();
    watchdog.cancel();
    if (ac) {
      redisAsyncContext* c = ac;
      ac = nullptr;
      set_ready(false);
      redisAsyncFree(c);
    }
  }
};

inline RedisStore::Connection* RedisStore::Link::find(const RedisAddress& a) {
  for (auto& c : by_node)
    if (c->address == a) return c.get();
  return nullptr;
}

template <class W>
void RedisStore::Link::enqueue(std::unique_ptr<W> w) {
  Connection* c = route(w->req);
  if (c == nullptr || !c->ready)
    return w->fail(c != nullptr ? "redis not connected"
                   : by_node.empty() && layout && !layout->note.empty() ? layout->note
                                                                        : "redis: no primary serves the key's slot");
  c->enqueue(std::move(w));
}

inline void RedisStore::Link::apply(std::shared_ptr<const RedisLayout> next) {
  if (stopping) return;
  std::vector<std::shared_ptr<Connection>> fresh, gone;
  for (const RedisAddress& a : next->nodes) {
    auto it = std::find_if(by_node.begin(), by_node.end(), [&](const auto& c) { return c && c->address == a; });
    if (it != by_node.end()) {
      fresh.push_back(std::move(*it));
      continue;
    }
    fresh.push_back(std::make_shared<Connection>(ctx, store, *this, a));
    store.count_connection(a, 1, 0);
    fresh.back()->connect();
  }
  for (auto& c : by_node)
    if (c) gone.push_back(std::move(c));
  by_node = std::move(fresh);
  layout = std::move(next);
  for (auto& c : gone) c->retire();  // after by_node: what they had queued goes by the new layout
  store.layouts_pending_.fetch_sub(1);
  if (beats && !beating) {
    beating = true;
    beat();
  }
}

// Heartbeats: how many instances share the fleet's limits (for the `local` policy's rate / N). One
// key, in the slot of "{instances}", written by one thread of each instance.
inline void RedisStore::Link::connection_ready(Connection* c) {
  if (beats && route(store.options_.key_prefix + "{instances}") == c) {
    heartbeat.cancel();  // beats at once (and from then on every heartbeat_ms)
  }
}

inline void RedisStore::Link::beat() {
  if (stopping) return;
  static constexpr const char* kBeat = R"LUA(
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return redis.call('ZCARD', KEYS[1])
)LUA";
  const RedisOptions& opt = store.options_;
  const std::string key = opt.key_prefix + "{instances}";
  if (Connection* c = route(key); c != nullptr && c->ready) {
    c->internal({"EVAL", kBeat, "1", key, store.instance_id_, std::to_string(opt.heartbeat_ms * 3)},
                [s = &store](redis_detail::Reply r) {
                  if (r.ok && r.integer > 0) s->live_instances_.store(static_cast<unsigned>(r.integer));
                });
  }
  heartbeat.expires_after(std::chrono::milliseconds(opt.heartbeat_ms));
  heartbeat.async_wait([self = shared_from_this()](auto) { self->beat(); });
}

inline void RedisStore::Link::stop() {
  stopping = true;
  heartbeat.cancel();
  for (auto& c : by_node) c->stop();
}

}  // namespace tollgate::store

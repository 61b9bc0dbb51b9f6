// One hiredis async connection of the Redis store, owned by one gateway thread's io_context: the
// event-loop hooks (hiredis asks, Asio waits on the fd), connect/handshake/reconnect with backoff,
// one deadline timer for the oldest command in flight, NOSCRIPT recovery, coalesced lean
// decisions per bucket key, and heartbeats. Included by redis_store.cpp only (hiredis and Asio
// stay in this one translation unit).
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
#include "tollgate/store/redis_codec.hpp"
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

// One hiredis async connection, owned by one io_context thread.
struct RedisStore::Connection : std::enable_shared_from_this<RedisStore::Connection> {
  using Reply = redis_detail::Reply;
  using Op = redis_detail::Op;
  template <class H>
  using OpImpl = redis_detail::OpImpl<H>;
  using milliseconds = std::chrono::milliseconds;
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
  redis_detail::ReplyArena arena;  // every reply's objects; outlives the context (freed in stop())

  static Connection* of(const redisAsyncContext* c) { return static_cast<Connection*>(c->data); }

  // The store counts the connections ready for decisions: an incident ends when all are back.
  void set_ready(bool now_ready) {
    if (now_ready == ready) return;
    ready = now_ready;
    store.connections_ready_.fetch_add(now_ready ? 1 : -1, std::memory_order_relaxed);
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
    // Torn down by us (teardown cleared `ac` first and recorded why): the why stays the error.
    const bool ours = self->ac != c;
    self->ac = nullptr;
    self->set_ready(false);
    self->in_flight.clear();
    if (!self->stopping) {
      if (!ours)
        self->store.record_failure(status == REDIS_OK ? "redis connection closed" : std::string("redis: ") + c->errstr);
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
    set_ready(false);  // before the failure is recorded: an incident never ends on a stale count
    store.record_failure(why);
    redisAsyncContext* c = ac;
    ac = nullptr;
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
      if (auto eval = evalsha_as_eval(op->wire, op->script)) {
        op->wire = std::move(*eval);
        op->script = nullptr;
        self->send(op.release(), true);
        return;
      }
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
    LaneEntry* lane;
    std::vector<std::unique_ptr<Waiter>> waiters;
    std::vector<LeanEntry> entries;
  };

  // Queues a waiter in its key's lane and sends the lane's next batch if none is in flight.
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
    for (std::size_t i = 0; i < waiters.size(); ++i) {
      if (answers) waiters[i]->complete(std::move((*answers)[i]));
      else waiters[i]->fail(why);
    }
    entry->second.busy = false;
    send_batch(entry);
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
      set_ready(false);
      redisAsyncFree(c);
    }
  }
};

}  // namespace tollgate::store

#include "session.hpp"

#include <boost/beast/core/string.hpp>
#include <cstdint>
#include <optional>
#include <random>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include "outcomes.hpp"
#include "responses.hpp"
#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/deadline.hpp"
#include "tollgate/proxy/refusals.hpp"
#include "tollgate/proxy/request_id.hpp"
#include "tollgate/proxy/request_target.hpp"
#include "tollgate/proxy/throttle.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/log_line.hpp"
#include "tls_io.hpp"
#include "upstream.hpp"

namespace tollgate::proxy {

namespace {

// Writes the access log line when the request is done, whichever way it ended.
struct LogOnExit {
  // The line's own copies: made only when the log is on (a held request's frame carries a pointer,
  // not four strings).
  struct Text {
    std::string method, path, bucket, policy, klass;
  };
  AccessLog* log;
  AccessRecord rec;
  std::unique_ptr<Text> text;  // set when log is
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~LogOnExit() {
    if (!log) return;
    rec.method = text->method;
    rec.path = text->path;
    rec.bucket = text->bucket;
    rec.policy = text->policy;
    rec.klass = text->klass;
    rec.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    log->write(rec);
  }
};

// The request's fields for the decision (a key header, X-Forwarded-For).
class HeadFields final : public HeaderSource {
 public:
  explicit HeadFields(const http1::RequestHead& h) : h_(h) {}
  std::optional<std::string_view> find(std::string_view name) const override {
    const http1::Field* f = h_.find(name);
    if (f == nullptr) return std::nullopt;
    return f->value;
  }
  std::string joined(std::string_view name) const override {
    std::string out;
    for (const http1::Field& f : h_.all()) {
      if (!beast::iequals(f.name, name)) continue;
      if (!out.empty()) out += ',';
      out.append(f.value);
    }
    return out;
  }

 private:
  const http1::RequestHead& h_;
};

// A held request's timer and whether its client left meanwhile: shared with the handler watching
// the socket, which may run after the hold is over.
struct Hold {
  explicit Hold(net::any_io_executor ex) : timer(std::move(ex)) {}
  net::steady_timer timer;
  beast::error_code ec;  // how the timer's wait ended (not looked at)
  bool gone = false;
};

// The store's decision as an awaitable: the request is copied into the store's frame here, not
// into a temporary of the caller's frame.
net::awaitable<store::StoreDecision> acquire(store::BucketStore& store, const store::AcquireRequest& req) {
  return store.try_acquire(req);
}

// Asio keeps the last coroutine frame a thread freed (up to 1 KiB) for the next frame it makes:
// after the store's decision that is the store's frame (~570 bytes), and the next frame made is
// the hold's timer wait, which would keep it for the whole wait. Awaiting a coroutine that awaits
// another leaves the inner, small frame cached and frees the larger one.
net::awaitable<void> nothing() { co_return; }
net::awaitable<void> shed_cached_frame() { co_await nothing(); }

// Why a request is answered before any rule (Session::check_early).
enum class Early : std::uint8_t { none, transfer_encoding, target, host, method, budget, loop, underscore };

// Whether a Via value names `pseudonym` as a hop that received the message (RFC 9110 7.6.3:
// "1.1 name", "HTTP/1.1 name (comment)", comma-separated), host names being case-insensitive.
bool via_names(std::string_view value, std::string_view pseudonym) {
  for (std::size_t at = 0; at < value.size();) {
    std::size_t end = value.find(',', at);
    if (end == std::string_view::npos) end = value.size();
    std::string_view element = value.substr(at, end - at);
    at = end + 1;
    // received-protocol RWS received-by [RWS comment]
    const std::size_t proto_end = element.find_first_of(" \t", element.find_first_not_of(" \t"));
    if (proto_end == std::string_view::npos) continue;
    element.remove_prefix(proto_end);
    const std::size_t by = element.find_first_not_of(" \t");
    if (by == std::string_view::npos) continue;
    element.remove_prefix(by);
    const std::string_view received_by = element.substr(0, element.find_first_of(" \t"));
    if (beast::iequals(received_by, pseudonym)) return true;
  }
  return false;
}

// A request that came round a forwarding loop (its Via names this gateway), or one with a field
// name holding '_' under proxy.underscores_in_headers "reject". Only called for a request with a
// Via or such a name, and out of line: Session::check_early stays small enough to be inlined into
// handle (bench/instructions.sh T0).
[[gnu::noinline]] Early refused_hop(const http1::RequestHead& h, const config::ProxyLimits& limits) {
  if (h.has(http1::Name::via))
    for (const http1::Field& f : h.all())
      if (f.id == http1::Name::via && via_names(f.value, limits.via_pseudonym)) return Early::loop;
  if (h.underscore_names && limits.underscores_in_headers == config::UnderscoreHeaders::reject)
    return Early::underscore;
  return Early::none;
}

class Session {
 public:
  Session(ProxyContext& px, Worker& w, PeerSlot slot) : px_(px), w_(w), limits_(px.limits), slot_(std::move(slot)) {}

  net::awaitable<void> run(tcp::socket sock, const net::ip::address& peer);

 private:
  milliseconds write_timeout() const { return milliseconds(limits_.body_timeout_ms); }
  // The views of the current snapshot; rebuilt by this worker when the snapshot changed. A request
  // keeps the views (and so the snapshot) it started with.
  std::shared_ptr<const RuleViews> rule_views() {
    std::shared_ptr<const config::Snapshot> snap = px_.deps.snapshots.get();
    if (!snap) return nullptr;
    if (!w_.rules || &w_.rules->snapshot() != snap.get())
      w_.rules = std::make_shared<const RuleViews>(std::move(snap), px_.deps.metrics);
    return w_.rules;
  }
  // Reads the next request into buffer_: its head (parsed into head_, views into buffer_) and its
  // body (a view into buffer_, or the decoded body_ when chunked). Returns the bytes it takes in
  // buffer_, or 0 when the connection is to close (answered already if there was anything to say).
  net::awaitable<std::size_t> read_request(std::string_view& body);
  // The body of the request whose head is in head_, as read_request reads it; 0: the connection
  // is to close (answered already if there was anything to say).
  net::awaitable<std::size_t> read_body(std::string_view& body);
  // A request that said Expect: 100-continue and sent nothing of its body (body_deferred_) is to be
  // forwarded: 100 Continue, then its body (used_ grows by it). False: the connection is to close.
  net::awaitable<bool> read_deferred_body(std::string_view& body);
  net::awaitable<beast::error_code> read_more(Deadline deadline) {
    return proxy::read_more(*stream_, buffer_, deadline);
  }
  // The listener serves HTTPS: the handshake, within proxy.header_timeout_ms. False: no session.
  net::awaitable<bool> accept_tls(const TlsServerProfile& profile);
  net::awaitable<void> refuse(int status, std::string_view code, std::string_view detail);
  // X-Real-IP and Forwarded for the current request (client_key.hpp: hop_fields). X-Real-IP is the
  // client's address as proxy.trusted_proxies find it: the peer's, unless the peer is a trusted
  // proxy; then it is read from X-Forwarded-For (as the limits read it), and the proxy's Forwarded
  // elements are kept. From another peer the fields are made again only when the Host changes.
  std::string_view hop_fields_now() {
    const http1::RequestHead& h = *head_;
    const std::string_view host = h.value(http1::Name::host);
    if (!peer_trusted_ && hop_made_ && host == hop_host_) return hop_fields_;
    std::string kept;
    std::string real_ip = client_ip_;
    if (peer_trusted_) {
      for (const http1::Field& f : h.all()) {
        if (f.id != http1::Name::forwarded || f.value.empty()) continue;
        if (!kept.empty()) kept.append(", ", 2);
        kept.append(f.value);
      }
      real_ip = client_address(client_ip_, HeadFields(h).joined("X-Forwarded-For"), px_.trusted);
    }
    hop_fields_ = hop_fields(real_ip, kept, client_ip_, stream_->tls() != nullptr, host);
    hop_host_.assign(host);
    hop_made_ = true;
    return hop_fields_;
  }
  net::awaitable<void> refuse_body_too_large();  // 413 naming proxy.max_body_bytes
  net::awaitable<void> answer_read_error(beast::error_code ec);
  net::awaitable<bool> handle(std::string_view body);
  // The caller's time budget, if it sent one; what is wrong with it, if anything.
  std::optional<std::string> read_budget_of(const http1::RequestHead& h, Budget& budget, bool& has_budget) const;
  // Whether the gateway answers the request itself before any rule (and the budget, read).
  Early check_early(const http1::RequestHead& h, const RequestTarget& target, unsigned version, Budget& budget,
                    bool& has_budget) const;
  void plan_for(const RequestTarget& target, const RuleViews* rules, config::SwitchMode global, const Budget* budget,
                Plan& plan) const;
  // The rare answers, each a coroutine of its own (see handle).
  net::awaitable<bool> answer_early(Early e, const RequestTarget& target, unsigned version, bool keep,
                                    OutcomeCounter& count);
  net::awaitable<bool> answer_error(unsigned version, bool keep, int status, std::string_view code,
                                    std::string_view detail);
  net::awaitable<bool> answer_too_late(const Plan& plan, const Budget& budget, std::string_view path, unsigned version,
                                       bool keep, LogOnExit& access);
  // A reject (429) or unavailable (503) verdict.
  net::awaitable<bool> answer_refused(const Plan& plan, const Verdict& verdict, std::string_view path, unsigned version,
                                      bool keep, LogOnExit& access);
  // The client left before its slot: its slot comes back now if nobody live queued behind it
  // (with any abandoned ones it unblocks), or later with the ones after it. Returns false.
  net::awaitable<bool> client_left(const Plan& plan, store::Reservation reservation, OutcomeCounter& count);
  // An adaptive bucket cut its rate while its request was held: the store is asked again.
  net::awaitable<void> ask_again(Plan& plan, const RuleViews& rules, store::StoreDecision& sd, Verdict& verdict);
  // After a hold on an adaptive bucket: whether the latest cut heard of (`cut`; a cut voids the
  // slots granted before it: the store restarted the schedule at the new rate) is later than the
  // one its slot was granted knowing of; then the request asks again with what is left of its window.
  static bool voided_meanwhile(std::int64_t cut, std::int64_t known_cut, std::int64_t window_end, int round,
                               Plan& plan);
  // An adaptive bucket's decision: its effective rate and pause, published.
  static void note_adaptive(const Plan& plan, const RuleViews& rules, const store::StoreDecision& sd);
  static void note_supplier_fields(BucketMetrics& bm, double grant_seq, const ThrottleSignal& signal);
  // A held request keeps its read buffer for the whole wait: the buffer comes down to the bytes
  // it holds, and the views into them (head, body, target) are made again.
  void compact_for_hold(std::string_view& body, RequestTarget& target);
  // A hold: its timer set, the client watched, counted held (start_hold); then uncounted, and
  // whether the client is still there (end_hold).
  std::shared_ptr<Hold> start_hold(BucketMetrics& bm, std::chrono::microseconds wait);
  bool end_hold(BucketMetrics& bm, const Hold& hold);
  // The upstream throttled a request `plan` governs: counted, and told to the store when
  // the rule adapts (cut, pause, logged once per episode).
  net::awaitable<void> report_throttle(const Plan& plan, BucketMetrics& bm, const ThrottleSignal& signal,
                                       std::int64_t sent_wall);
  // The answer to a refused request (a 429, or the limiter's 503): its verdict's body and
  // Retry-After, and its RateLimit fields if it has them. The refusal goes into the ring of recent
  // refusals (the console's list) too.
  OwnAnswer refused_answer(const Plan& plan, const Verdict& v, std::string_view path, int status,
                         const RateLimitFields* fields) const {
    if (RefusalLog* log = px_.deps.refusals) {
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      log->record(refusal_of(plan, v, path, status, std::chrono::duration_cast<milliseconds>(now).count()));
    }
    OwnAnswer answer;
    answer.status = status;
    answer.body.reserve(v.body.size() + 16 + request_id_.view().size());
    answer.body = v.body;
    set_request_id(answer, request_id_.view());
    answer.retry_after_s = v.retry_after_s;
    if (fields) {
      answer.policy_header = fields->policy_header;
      answer.limit_header = fields->limit_header;
    }
    return answer;
  }

  ProxyContext& px_;
  Worker& w_;
  const config::ProxyLimits& limits_;
  PeerSlot slot_;  // under proxy.max_connections_per_client, for the connection's life
  std::string client_ip_;  // the socket peer (IPv4-mapped IPv6 as IPv4)
  bool peer_trusted_ = false;  // the peer is one of proxy.trusted_proxies
  std::string hop_fields_;  // hop_fields_now()'s, for a request with Host hop_host_
  std::string hop_host_;
  bool hop_made_ = false;
  std::optional<TimedSocket> stream_;
  beast::flat_buffer buffer_;
  // 100 fields of views: allocated once per connection, reused by each of its requests.
  std::unique_ptr<http1::RequestHead> head_ = std::make_unique<http1::RequestHead>();
  std::string body_;  // a chunked request's body, decoded
  // The current request's X-Request-Id (proxy/request_id): chosen once its head is parsed, or
  // made when it is refused before that.
  RequestId request_id_;
  bool linger_ = false;  // refused mid-request: drain what the client still sends before closing
  std::size_t used_ = 0;  // the bytes of buffer_ the current request takes (head, and body once read)
  // Expect: 100-continue and nothing of the body sent yet: the body is invited and read only once
  // the request is to be forwarded, so a refusal never asks for it (RFC 9110 10.1.1).
  bool body_deferred_ = false;
  std::chrono::steady_clock::time_point budget_from_{};  // when a request with a budget was read
};

net::awaitable<void> Session::run(tcp::socket sock, const net::ip::address& peer) {
  Metrics& metrics = px_.deps.metrics;
  metrics.connections.Increment();
  client_ip_ = peer.to_string();
  peer_trusted_ = px_.trusted.contains(client_ip_);
  stream_.emplace(std::move(sock), w_.timeouts);
  TimedSocket& stream = *stream_;
  std::shared_ptr<const TlsServerProfile> tls = px_.deps.tls ? px_.deps.tls->listener() : nullptr;
  if (tls && !co_await accept_tls(*tls)) {
    metrics.connections.Decrement();
    co_return;
  }
  // A new connection's first request must start within header_timeout_ms (after the TLS
  // handshake, which has its own bound): a connection that says nothing does not keep its slot for
  // the keep-alive idle time. Between requests: idle_timeout_ms.
  milliseconds wait_first_byte(limits_.header_timeout_ms);
  for (;;) {
    if (buffer_.size() == 0) {
      if (w_.draining) break;  // shutting down: no new request on this connection
      // Keep-alive idle: wait for the first byte of the next request. 1 KiB, as nginx's
      // client_header_buffer_size: most requests fit, and an idle or held connection keeps
      // no more than that (larger requests continue in bigger reads).
      beast::error_code ec;
      stream.start(deadline_after(std::exchange(wait_first_byte, milliseconds(limits_.idle_timeout_ms))));
      w_.idle.insert(&stream);
      const std::size_t n = co_await read_some(stream, buffer_.prepare(1024), ec);
      w_.idle.erase(&stream);
      stream.end(ec);
      if (ec) break;
      buffer_.commit(n);
    }
    std::string_view body;
    used_ = co_await read_request(body);
    if (used_ == 0) break;
    bool keep = co_await handle(body);
    if (body_deferred_) {
      // Answered without inviting its body (refused, or an answer of the gateway's own): what the
      // client may still send is no request. The answer said Connection: close.
      body_deferred_ = false;
      linger_ = true;
      keep = false;
    }
    buffer_.consume(used_);
    if (!keep) break;
  }
  beast::error_code ignored;
  if (SSL* ssl = stream.tls()) tls_close(ssl);
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  if (linger_) {
    // After a refusal the client may still be sending (the rest of a refused body): closing with
    // its bytes unread would reset the connection, and a reset can destroy our answer before the
    // client reads it. So read and discard until it closes, as nginx's lingering close does,
    // bounded in time and bytes.
    const Deadline until = deadline_after(milliseconds(1000));
    for (std::size_t discarded = 0; discarded < 1024 * 1024;) {
      buffer_.clear();
      if (const beast::error_code ec = co_await read_more(until)) break;
      discarded += buffer_.size();
    }
  }
  metrics.connections.Decrement();
}

net::awaitable<std::size_t> Session::read_request(std::string_view& body) {
  http1::RequestHead& h = *head_;
  request_id_.clear();
  std::size_t scanned = 0;
  const Deadline head_deadline = deadline_after(milliseconds(limits_.header_timeout_ms));
  http1::Error e;
  while ((e = http1::parse_request_head(view(buffer_), limits_.max_header_bytes, h, scanned)) == http1::Error::need_more) {
    if (const beast::error_code ec = co_await read_more(head_deadline)) {
      co_await answer_read_error(ec);
      co_return 0;
    }
  }
  if (e == http1::Error::header_too_large || e == http1::Error::too_many_fields) {
    // Named, not a temporary of the co_await expression: g++ 12 destroys a conditional's string
    // temporary there twice.
    const std::string detail = e == http1::Error::too_many_fields
                                   ? "request has more than " + std::to_string(http1::kMaxFields) + " header fields"
                                   : "request headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes";
    co_await refuse(431, "headers_too_large", detail);
    co_return 0;
  }
  if (e != http1::Error::none) {
    co_await refuse(400, "bad_request", http1::describe(e));
    co_return 0;
  }
  request_id_.assign(h);
  body = {};
  // A request with a time budget: counted from now, the head read (not after its body).
  if (h.has(http1::Name::grpc_timeout) || h.has(http1::Name::request_timeout))
    budget_from_ = std::chrono::steady_clock::now();
  if (h.other_transfer_encoding) co_return h.head_bytes;  // answered 501 unread, then closed (handle)
  const http1::BodyFraming framing = http1::request_body(h);
  if (framing.kind == http1::BodyKind::none) co_return h.head_bytes;
  // A declared length over the limit is refused before any 100 Continue: a client that waits for
  // it then never sends the body it would have to send only to be refused.
  if (framing.kind == http1::BodyKind::length && framing.length > limits_.max_body_bytes) {
    co_await refuse_body_too_large();
    co_return 0;
  }
  if (h.expect_continue && buffer_.size() == h.head_bytes) {
    // The client waits to be invited: it is, once the request is decided and is to be forwarded
    // (handle), so that a 429 or any other refusal goes out without asking for the body.
    body_deferred_ = true;
    co_return h.head_bytes;
  }
  co_return co_await read_body(body);
}

net::awaitable<bool> Session::read_deferred_body(std::string_view& body) {
  body_deferred_ = false;
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  beast::error_code ec;
  stream_->start(deadline_after(write_timeout()));
  co_await write_both(*stream_, net::buffer(kContinue.data(), kContinue.size()), {}, ec);
  stream_->end(ec);
  if (ec) co_return false;
  used_ = co_await read_body(body);
  co_return used_ != 0;
}

net::awaitable<std::size_t> Session::read_body(std::string_view& body) {
  http1::RequestHead& h = *head_;
  const http1::BodyFraming framing = http1::request_body(h);
  const char* const head_at = view(buffer_).data();  // where the head's views point
  const Deadline body_deadline = deadline_after(milliseconds(limits_.body_timeout_ms));
  std::size_t used = 0;
  if (framing.kind == http1::BodyKind::length) {
    used = h.head_bytes + framing.length;
    while (buffer_.size() < used) {
      if (const beast::error_code ec = co_await read_more(body_deadline)) {
        co_await answer_read_error(ec);
        co_return 0;
      }
    }
    body = view(buffer_).substr(h.head_bytes, framing.length);
  } else {
    http1::ChunkedDecoder decoder(limits_.max_body_bytes, limits_.max_header_bytes);
    body_.clear();
    used = h.head_bytes;
    for (;;) {
      used += decoder.decode(view(buffer_).substr(used), [this](const char* p, std::size_t n) { body_.append(p, n); });
      if (decoder.error() == http1::Error::body_too_large) {
        co_await refuse_body_too_large();
        co_return 0;
      }
      if (decoder.error() != http1::Error::none) {
        co_await refuse(400, "bad_request", http1::describe(decoder.error()));
        co_return 0;
      }
      if (decoder.done()) break;
      if (const beast::error_code ec = co_await read_more(body_deadline)) {
        co_await answer_read_error(ec);
        co_return 0;
      }
    }
    body = body_;
  }
  // Reading the body may have moved the buffer: then the head's views are made again over it.
  if (view(buffer_).data() != head_at) {
    std::size_t again = 0;
    http1::parse_request_head(view(buffer_), limits_.max_header_bytes, h, again);
  }
  co_return used;
}

net::awaitable<bool> Session::accept_tls(const TlsServerProfile& profile) {
  TimedSocket& stream = *stream_;
  const Deadline until = deadline_after(milliseconds(limits_.header_timeout_ms));
  const int fd = stream.socket().native_handle();
  // A TLS client speaks first with a handshake record (0x16). Anything else is answered in
  // plain text when it looks like an HTTP request (the client's mistake deserves words, as nginx
  // gives them) and closed otherwise.
  for (;;) {
    unsigned char first = 0;
    const ssize_t n = ::recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 1 && first == 0x16) break;
    if (n == 1) {
      px_.deps.tls->count_listener("plain_http");
      if (first >= 'A' && first <= 'Z') {
        linger_ = true;
        px_.deps.metrics.bad_requests.Increment();
        request_id_.make();
        const OwnAnswer answer = error_answer(400, "plain_http_to_https_port", "this port serves HTTPS: use https://",
                                              request_id_.view());
        co_await send_answer(stream, 11, false, answer, write_timeout());
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      }
      co_return false;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) co_return false;
    beast::error_code ec;
    stream.start(until);
    co_await stream.socket().async_wait(tcp::socket::wait_read, with(ec));
    stream.end(ec);
    if (ec) {
      px_.deps.tls->count_listener(ec == beast::error::timeout ? "timeout" : "failed");
      co_return false;
    }
  }
  beast::error_code ec;
  stream.socket().non_blocking(true, ec);
  SSL* ssl = profile.new_connection(fd);
  if (ssl == nullptr) co_return false;
  stream.set_tls(ssl);
  stream.start(until);
  ec = co_await tls_handshake(stream);
  stream.end(ec);
  if (ec) {
    px_.deps.tls->count_listener(ec == beast::error::timeout ? "timeout" : "failed");
    co_return false;
  }
  px_.deps.tls->count_listener(SSL_session_reused(ssl) == 1 ? "resumed" : "full");
  co_return true;
}

net::awaitable<void> Session::refuse(int status, std::string_view code, std::string_view detail) {
  linger_ = true;
  px_.deps.metrics.bad_requests.Increment();
  if (request_id_.empty()) request_id_.make();  // refused before its head was read
  const OwnAnswer answer = error_answer(status, code, detail, request_id_.view());
  co_await send_answer(*stream_, 11, false, answer, write_timeout());
}

net::awaitable<void> Session::refuse_body_too_large() {
  const std::string detail = "request body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes";
  co_await refuse(413, "body_too_large", detail);
}

net::awaitable<void> Session::answer_read_error(beast::error_code ec) {
  // The client went away before a whole request: nothing to answer, unless it sent part of one.
  if (ec == net::error::connection_reset || ec == net::error::operation_aborted) co_return;
  if (ec == net::error::eof && buffer_.size() == 0) co_return;
  if (ec == beast::error::timeout) {  // cut off at the deadline: a slow client gets no answer
    px_.deps.metrics.bad_requests.Increment();
    co_return;
  }
  const std::string detail = ec == net::error::eof ? "partial message" : ec.message();  // named: see read_request
  co_await refuse(400, "bad_request", detail);
}

// A held request keeps Session::handle's coroutine frame for its whole wait, and g++ gives every
// local of a coroutine (each branch's, and each temporary a co_await expression needs) a slot of
// its own in that frame. So handle keeps only what a request needs from its decision to its
// answer; the rare paths (the gateway's own answers, a client gone, an adaptive re-ask) are
// coroutines of their own, whose frames exist only when they run, and the store is called through
// functions that copy the request outside the frame.
// Longer than a function should be (about 140 lines): its steps (plan, decide, hold, forward, note
// the answer) share one frame on purpose. Each step a coroutine of its own costs a frame a request:
// the steps after the decision as one `send` coroutine measured +320 Ir a request, T1 18,397 ->
// 18,716 (docs/history/benchmarks.md, the held request's frame).
net::awaitable<bool> Session::handle(std::string_view body) {
  const http1::RequestHead& h = *head_;
  const unsigned version = h.version_minor == 0 ? 10 : 11;
  // Draining: answer, then close. A body not yet invited (Expect: 100-continue): any answer of
  // the gateway's own closes the connection, as the body may still come.
  const bool keep = h.keep_alive && !w_.draining && !body_deferred_;
  // Routes and rules see the normalised path, and the upstream gets that path: what is limited
  // is what the upstream acts on, however the client spelled it.
  RequestTarget target;
  parse_target(h.target, target);
  LogOnExit access{px_.deps.access_log && px_.deps.access_log->enabled() ? px_.deps.access_log : nullptr, {}, {}};
  if (access.log) {
    access.rec.client = client_ip_;
    access.text = std::make_unique<LogOnExit::Text>();
    access.text->method = std::string(h.method_text);
    access.text->path = std::string(target.error == TargetError::none ? target.path : path_of(h.target));
  }
  access.rec.request_id = request_id_.view();  // also where forward() finds it for a 502 or 504 of its own
  OutcomeCounter count(px_.deps.metrics, access.rec);
  // The caller's time budget (proxy/deadline), counted from when its head was read (budget_from_).
  Budget budget;
  bool has_budget = false;
  if (const Early e = check_early(h, target, version, budget, has_budget); e != Early::none)
    co_return co_await answer_early(e, target, version, keep, count);

  std::string rewritten;  // the normalised target, when the client spelled it otherwise
  if (target.rewritten) rewritten.append(target.path).append(target.query);
  // The route table it starts on is the one it finishes on, whatever a SIGHUP swaps meanwhile.
  const std::shared_ptr<WorkerTable> table = w_.table;
  const Route* route = table->routes->route_for(target.path);
  if (route == nullptr) {
    count.bad_request(404);
    co_return co_await answer_error(version, keep, 404, "no_route", "no route for this path");
  }
  // Its names do not resolve yet: 503 before the limiter is asked, so no permit is taken.
  if (Upstream& up = table->routes->upstreams()[route->upstream]; !up.endpoints->resolved())
    co_return co_await answer_unresolved(px_, *stream_, version, keep, up, access.rec);

  const config::SwitchMode global = px_.deps.switch_state.mode();
  const std::shared_ptr<const RuleViews> rules = global == config::SwitchMode::off ? nullptr : rule_views();
  Plan plan;
  plan_for(target, rules.get(), global, has_budget ? &budget : nullptr, plan);
  count.use(rules.get());
  if (access.log && plan.rule && plan.step != Step::bypass) access.text->bucket = plan.rule->bucket;
  if (access.log && plan.priority) access.text->klass = plan.priority->classes[plan.priority_class];
  if (plan.step == Step::bad_key) {
    count.bad_request(400);
    co_return co_await answer_error(version, keep, 400, "missing_client_key", plan.detail);
  }
  if (plan.step == Step::too_late) {
    // Its budget would run out before the upstream answered: 429 now, nothing reserved.
    count.planned(plan);
    access.rec.status = 429;
    co_return co_await answer_too_late(plan, budget, target.path, version, keep, access);
  }
  ThrottleSignal signal;  // what the upstream's answer says about its own limit
  signal.want_advert = plan.step == Step::decide && plan.request.adaptive != limiter::Adaptive::off;
  double grant_seq = 0;   // the store's count of the bucket's grants, this one's included
  Verdict verdict;  // a plan without a decision forwards with no fields of the limiter's
  const store::AcquireRequest* permit = nullptr;  // granted: given back if no upstream could take it
  if (plan.step != Step::decide) {
    count.planned(plan);
  } else {
    store::StoreDecision sd;
    if (!px_.deps.store.decide_now(plan.request, sd)) sd = co_await acquire(px_.deps.store, plan.request);
    note_adaptive(plan, *rules, sd);
    verdict = verdict_for(plan, sd);
    count.decided(plan, sd, verdict);
    if (verdict.action == Action::hold) {
      BucketMetrics& bm = rules->metrics_of(*plan.rule);
      const bool adaptive = plan.request.adaptive == limiter::Adaptive::on && sd.effective_rate > 0;
      // Only an adaptive bucket's hold may need it: no clock read otherwise.
      const std::int64_t window_end = adaptive ? limiter::steady_now_us() + plan.request.timeout_us : 0;
      // The cut this slot was granted knowing of (the decision's own, not the shared marker: another
      // thread may have set that for a cut the store made just after this grant): only a later one
      // voids it.
      std::int64_t known_cut = sd.last_cut_us;
      compact_for_hold(body, target);
      for (int round = 0; verdict.action == Action::hold; ++round) {
        // Held on a timer (never a thread), the client watched meanwhile: its slot comes back if
        // it leaves first.
        co_await shed_cached_frame();
        std::shared_ptr<Hold> held = start_hold(bm, std::chrono::microseconds(verdict.wait_us));
        co_await held->timer.async_wait(with(held->ec));
        if (!end_hold(bm, *held)) co_return co_await client_left(plan, sd.reservation, count);
        // An adaptive bucket cut its rate while it waited (the upstream throttled): its slot, at
        // the old rate, went with the cut. It asks again with what is left of its window: a slot
        // at the new rate (after the pause, if any), or a 429 saying when. (A cut known when the
        // slot was granted does not count.)
        if (!adaptive) break;
        std::int64_t heard = bm.last_cut_us.load(std::memory_order_relaxed);
        // Another gateway's cut reaches this one with its next decision for the bucket: on a fleet's
        // store the slot asks (one read) before it goes, so that it is not sent into a supplier that
        // has just refused (two or three such requests per cut, behind three gateways). Only for a
        // bucket that has adapted (a cut the store still remembers, or a rate below the rule's):
        // one that never did holds requests as any other. Not for a slot the local fallback
        // granted (its cuts are on another clock than the shared store's).
        if (heard <= known_cut && !sd.degraded && px_.deps.store.shared_by_fleet() &&
            (known_cut > 0 || sd.effective_rate < plan.request.bucket.params.rate))
          heard = std::max<std::int64_t>(heard, co_await px_.deps.store.last_cut(plan.request));
        if (!voided_meanwhile(heard, known_cut, window_end, round, plan)) break;
        co_await ask_again(plan, *rules, sd, verdict);
        known_cut = sd.last_cut_us;
        if (verdict.action == Action::reject) {
          // Counted as delayed when it was held; the cut that caught it is counted here.
          bm.adaptive().paused_rejections.Increment();
          access.rec.status = 429;
        } else if (verdict.action == Action::unavailable) {
          access.rec.status = 503;
        }
      }
    }
    if (verdict.action == Action::reject || verdict.action == Action::unavailable)
      co_return co_await answer_refused(plan, verdict, target.path, version, keep, access);
    if (sd.decision.granted) permit = &plan.request;
    grant_seq = sd.grant_seq;
    // Admitted: now its body is invited. A client that does not send it gives its slot back.
    if (body_deferred_ && !co_await read_deferred_body(body)) co_return co_await client_left(plan, sd.reservation, count);
  }
  if (body_deferred_ && !co_await read_deferred_body(body)) co_return false;
  // X-Tollgate-Shadow: only the gateway says that (a client's is never forwarded).
  const RateLimitFields fields{verdict.policy_header, verdict.limit_header, request_id_.view()};
  const UpstreamRequest out{h, target.rewritten ? std::string_view(rewritten) : h.target, body, verdict.shadow_header,
                            request_id_.view(), client_ip_, has_budget ? &budget : nullptr,
                            budget_from_ + std::chrono::microseconds(budget.us),
                            plan.rule ? &rules->metrics_of(*plan.rule).upstream_latency : nullptr,
                            plan.rule ? &signal : nullptr, stream_->tls() != nullptr,
                            permit, hop_fields_now(), verdict.color};
  // An adaptive rule's answers say where the supplier's windows start, by when each was sent.
  const bool adapts = plan.step == Step::decide && plan.request.adaptive != limiter::Adaptive::off;
  const std::int64_t sent_wall = adapts ? limiter::wall_now_us() : 0;
  const bool open = co_await forward(px_, w_, *table, *stream_, out, *route, fields, access.rec);
  if (signal.throttled) {
    co_await report_throttle(plan, rules->metrics_of(*plan.rule), signal, sent_wall);
  } else if (access.rec.upstream_status != 0 && adapts) {
    BucketMetrics& bm = rules->metrics_of(*plan.rule);
    bm.note_admitted();  // the supplier admitted it: told with the next decision
    bm.note_admitted_sent(sent_wall);
  }
  if (signal.advert_read != AdvertRead::none) note_supplier_fields(rules->metrics_of(*plan.rule), grant_seq, signal);
  co_return open;
}

std::optional<std::string> Session::read_budget_of(const http1::RequestHead& h, Budget& budget,
                                                   bool& has_budget) const {
  // Each header at most once, and not empty: which of two would the upstream believe?
  if (!px_.settings.deadlines || !(h.has(http1::Name::grpc_timeout) || h.has(http1::Name::request_timeout)))
    return std::nullopt;
  int grpc = 0, timeout = 0;
  for (const http1::Field& f : h.all()) {
    grpc += f.id == http1::Name::grpc_timeout;
    timeout += f.id == http1::Name::request_timeout;
  }
  if (grpc > 1 || timeout > 1) return "grpc-timeout and Request-Timeout may each be sent once";
  if ((grpc && h.value(http1::Name::grpc_timeout).empty()) ||
      (timeout && h.value(http1::Name::request_timeout).empty()))
    return "an empty grpc-timeout or Request-Timeout says no budget";
  return read_budget(h.value(http1::Name::grpc_timeout), h.value(http1::Name::request_timeout), budget, has_budget);
}

Early Session::check_early(const http1::RequestHead& h, const RequestTarget& target, unsigned version, Budget& budget,
                           bool& has_budget) const {
  const bool bad_budget = read_budget_of(h, budget, has_budget).has_value();
  if (h.other_transfer_encoding) return Early::transfer_encoding;
  if (target.error != TargetError::none) return Early::target;
  if (const auto hosts = h.host_count; hosts > 1 || (hosts == 0 && version >= 11)) return Early::host;
  if (h.method == http1::Method::connect || (h.method == http1::Method::trace && !limits_.allow_trace))
    return Early::method;
  if (h.has(http1::Name::via) || h.underscore_names)
    if (const Early e = refused_hop(h, limits_); e != Early::none) return e;
  return bad_budget ? Early::budget : Early::none;
}

void Session::plan_for(const RequestTarget& target, const RuleViews* rules, config::SwitchMode global,
                       const Budget* budget, Plan& plan) const {
  const HeadFields headers(*head_);
  const std::int64_t arrived_us =
      std::chrono::duration_cast<std::chrono::microseconds>(budget_from_.time_since_epoch()).count();
  const RequestFacts facts{target.match, client_ip_, headers, static_cast<std::int64_t>(px_.deps.metrics.held.Value()),
                           budget, arrived_us, head_->method_text};
  plan_request(facts, rules, global, px_.settings, plan);
}

net::awaitable<bool> Session::answer_early(Early e, const RequestTarget& target, unsigned version, bool keep,
                                           OutcomeCounter& count) {
  const http1::RequestHead& h = *head_;
  OwnAnswer answer;
  bool close_after = true;  // the rest of the request (a body of unknown framing) is not read
  switch (e) {
    case Early::none:  // not called with none
    case Early::transfer_encoding:
      // Only chunked framing is understood; anything else could be read differently upstream.
      answer = error_answer(501, "unsupported_transfer_encoding", "only Transfer-Encoding: chunked is accepted",
                            request_id_.view());
      break;
    case Early::target:
      answer = error_answer(400, "bad_target", target_error_detail(target.error), request_id_.view());
      break;
    case Early::host:
      // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; an HTTP/1.0 one at most one. Which
      // of two would the upstream believe?
      answer = error_answer(400, "bad_host",
                            h.host_count > 1 ? "more than one Host header" : "an HTTP/1.1 request needs a Host header",
                            request_id_.view());
      break;
    case Early::method:
      // CONNECT would ask for a tunnel the gateway does not make; TRACE echoes the request with its
      // credentials (cross-site tracing) unless the operator allows it.
      answer = error_answer(405, "method_not_allowed",
                            "the gateway forwards neither CONNECT nor (unless proxy.allow_trace) TRACE",
                            request_id_.view());
      answer.allow = limits_.allow_trace ? "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"
                                         : "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
      close_after = false;
      break;
    case Early::loop:
      // It went out of this gateway before (its Via says so) and came back: forwarding it again
      // would go round the loop until something else gave out. The answer goes back the way it came.
      answer = error_answer(508, "loop_detected",
                            "the request has been through this gateway already (its Via names " +
                                limits_.via_pseudonym + "): a forwarding loop",
                            request_id_.view());
      close_after = false;
      break;
    case Early::underscore:
      answer = error_answer(400, "underscore_in_header_name",
                            "header field names with '_' are refused (proxy.underscores_in_headers)", request_id_.view());
      close_after = false;
      break;
    case Early::budget: {
      Budget ignored;
      bool has = false;
      const std::optional<std::string> why = read_budget_of(h, ignored, has);
      answer = error_answer(400, "bad_deadline", why ? std::string_view(*why) : std::string_view(), request_id_.view());
      close_after = false;
      break;
    }
  }
  if (e == Early::loop) count.loop_detected();
  else count.bad_request(answer.status);
  linger_ = close_after;
  co_return co_await send_answer(*stream_, version, keep && !close_after, answer, write_timeout());
}

net::awaitable<bool> Session::answer_error(unsigned version, bool keep, int status, std::string_view code,
                                           std::string_view detail) {
  const OwnAnswer answer = error_answer(status, code, detail, request_id_.view());
  co_return co_await send_answer(*stream_, version, keep, answer, write_timeout());
}

net::awaitable<bool> Session::answer_too_late(const Plan& plan, const Budget& budget, std::string_view path,
                                              unsigned version, bool keep, LogOnExit& access) {
  const Verdict v = too_late_verdict(plan, budget);
  if (access.log) access.text->policy = v.bound;
  const OwnAnswer answer = refused_answer(plan, v, path, 429, nullptr);
  co_return co_await send_answer(*stream_, version, keep, answer, write_timeout());
}

net::awaitable<bool> Session::answer_refused(const Plan& plan, const Verdict& verdict, std::string_view path,
                                             unsigned version, bool keep, LogOnExit& access) {
  const bool reject = verdict.action == Action::reject;
  if (reject && access.log) access.text->policy = verdict.bound;
  const RateLimitFields fields{verdict.policy_header, verdict.limit_header, request_id_.view()};
  const OwnAnswer answer = refused_answer(plan, verdict, path, reject ? 429 : 503, reject ? &fields : nullptr);
  co_return co_await send_answer(*stream_, version, keep, answer, write_timeout());
}

net::awaitable<bool> Session::client_left(const Plan& plan, store::Reservation reservation, OutcomeCounter& count) {
  const store::RefundResult given = co_await px_.deps.store.refund_slots(plan.request, reservation);
  count.client_gone(given.reservations());
  co_return false;
}

net::awaitable<void> Session::ask_again(Plan& plan, const RuleViews& rules, store::StoreDecision& sd,
                                        Verdict& verdict) {
  plan.request.again = true;  // the same arrival
  const BucketMetrics::Admitted heard = rules.metrics_of(*plan.rule).take_admitted();
  plan.request.admitted = heard.total;
  plan.request.admitted_before = heard.before;
  plan.request.advert = rules.metrics_of(*plan.rule).take_advert();
  plan.request.window_pair = rules.metrics_of(*plan.rule).take_window_pair();
  sd = co_await px_.deps.store.try_acquire(plan.request);
  plan.request.again = false;
  note_adaptive(plan, rules, sd);
  verdict = verdict_for(plan, sd);
}

bool Session::voided_meanwhile(std::int64_t cut, std::int64_t known_cut, std::int64_t window_end, int round,
                               Plan& plan) {
  // Another cut than the one its slot was granted knowing of (the store's own timestamps, so
  // exact): a later one voided the slot. (An earlier or none: the store forgot the bucket, or a
  // fallback store decides meanwhile; nothing was voided.)
  if (cut <= known_cut) return false;
  const std::int64_t now = limiter::steady_now_us();
  // At most three times; the fourth asks only for a permit now.
  plan.request.timeout_us = round < 3 ? std::max<std::int64_t>(0, window_end - now) : 0;
  return true;
}

// What the supplier's fields advertised: told with the bucket's next decision, and shown.
void Session::note_supplier_fields(BucketMetrics& bm, double grant_seq, const ThrottleSignal& signal) {
  SupplierSeries& series = bm.supplier();
  if (signal.advert_read == AdvertRead::malformed || signal.advert.ignored > 0) series.ignored.Increment();
  if (signal.advert_read != AdvertRead::ok) return;
  const Advert& a = signal.advert;
  bm.note_advert(grant_seq, a.remaining, signal.read_at_us + a.reset_us, a.limit, a.window_us);
  series.remaining.Set(a.remaining);
  series.limit.Set(a.limit);
}

void Session::note_adaptive(const Plan& plan, const RuleViews& rules, const store::StoreDecision& sd) {
  if (plan.request.adaptive == limiter::Adaptive::off || !(sd.effective_rate > 0)) return;
  BucketMetrics& bm = rules.metrics_of(*plan.rule);
  bm.adaptive().effective_rate.Set(sd.effective_rate);
  bm.adopt_windows(sd.windows);  // where the fleet learned the supplier's windows start
  if (plan.request.adaptive != limiter::Adaptive::on) return;
  if (sd.paused_us > 0) bm.raise_pause(limiter::steady_now_us() + sd.paused_us);
  bm.last_cut_us.store(sd.last_cut_us, std::memory_order_relaxed);
}

net::awaitable<void> Session::report_throttle(const Plan& plan, BucketMetrics& bm, const ThrottleSignal& signal,
                                              std::int64_t sent_wall) {
  bm.upstream_throttled().Increment();
  const limiter::Adaptive mode = plan.request.adaptive;
  if (plan.step != Step::decide || mode == limiter::Adaptive::off) co_return;
  std::int64_t pause = signal.pause_us, jitter = 0;
  if (pause == 0 || pause == 1'000'000) {
    // No pause asked for, or a window's worth (Retry-After: 1, t=1): most suppliers count calls
    // per one-second window, and the window that refused ends where the next one starts: where
    // this gateway learned the supplier's windows start (BucketMetrics::until_window_us), the wall
    // clock's whole seconds until it has. That is the window the refused request was sent in: its
    // answer may come after the next window began (then there is nothing to wait for; a whole
    // second from now would skip that window). What is sent before then is refused. A token
    // bucket's allowance refills meanwhile (a second's burst), so the pause costs it nothing. (A
    // supplier that says a fraction of a second, or longer, means it.) Only a throttle that cuts
    // pauses: one caller's own 429s pause nobody.
    pause = bm.until_window_us(sent_wall, limiter::wall_now_us());
  } else if (pause > 0) {
    // A little jitter on a longer pause (up to a tenth of it, at most 0.5 s), so that a fleet told
    // the same Retry-After does not resume in step.
    thread_local std::minstd_rand rng{std::random_device{}()};
    const std::int64_t spread = std::min<std::int64_t>(pause / 10, 500'000);
    jitter = std::uniform_int_distribution<std::int64_t>(0, spread)(rng);
  }
  // The supplier's admissions this gateway heard since its last decision go with the throttle: the
  // estimate reads what the supplier admitted in the window that refused, all of it that is known.
  store::AcquireRequest req = plan.request;
  const BucketMetrics::Admitted heard = bm.take_admitted();
  req.admitted = heard.total;
  req.admitted_before = heard.before;
  // With the pair this gateway learned of where the supplier's windows start: the store keeps the
  // fleet's arc, and this gateway follows it (limiter/window_phase.hpp).
  req.window_pair = bm.take_window_pair();
  const store::AdaptOutcome o = co_await px_.deps.store.throttled(req, pause, jitter);
  if (!o.ok) {  // the store is down: it decides by its failure policy, nothing to adapt
    // Told again with the next report (at least once: a reply lost after the store counted them
    // counts them twice, as a lost decision's would).
    bm.give_back_admitted(heard);
    co_return;
  }
  bm.adopt_windows(o.windows);
  // A refusal the store believed (not one caller's own) marks a window's end.
  if (!o.result.unconfirmed) bm.note_refused_sent(sent_wall);
  AdaptiveSeries& series = bm.adaptive();
  series.effective_rate.Set(o.effective_rate);
  if (mode == limiter::Adaptive::on && o.pause_left_us > 0) bm.raise_pause(limiter::steady_now_us() + o.pause_left_us);
  if (mode == limiter::Adaptive::on) bm.last_cut_us.store(o.last_cut_us, std::memory_order_relaxed);
  if (o.result.unconfirmed) series.unconfirmed.Increment();
  if (!o.result.cut) co_return;  // the same episode as a cut a moment ago (here or elsewhere in the fleet)
  series.cuts.Increment();
  if (o.result.paused) series.pauses.Increment();
  const std::int64_t pause_ms = o.result.paused ? (o.pause_left_us + 999) / 1000 : 0;
  bm.note_event({std::string(signal.cause), o.result.from, o.result.to,
                 std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
                 pause_ms});
  char rates[96];
  std::snprintf(rates, sizeof rates, "%.3g/s -> %.3g/s", o.result.from, o.result.to);
  log_line("tollgate: adaptive", mode == limiter::Adaptive::shadow ? " (shadow)" : "", ": ", plan.rule->bucket,
           " throttled by its upstream (", signal.cause, "): rate ", rates,
           pause_ms > 0 ? ", paused " + std::to_string(pause_ms) + " ms" : std::string());
}

void Session::compact_for_hold(std::string_view& body, RequestTarget& target) {
  // Most requests fit the idle read's 1 KiB; a larger head or body grew the buffer by 16 KiB
  // reads. Less than 512 bytes to give back is not worth a copy.
  if (buffer_.capacity() - buffer_.size() < 512) return;
  const std::string_view before = view(buffer_);
  // The body is a view into the buffer (Content-Length), into body_ (chunked, decoded), or empty.
  const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(body.data()),
                       from = reinterpret_cast<std::uintptr_t>(before.data());
  const bool body_in_buffer = !body.empty() && at >= from && at < from + before.size();
  const std::size_t body_at = body_in_buffer ? at - from : 0;
  buffer_.shrink_to_fit();
  const std::string_view now = view(buffer_);
  if (now.data() == before.data()) return;  // not moved (the allocation failed)
  std::size_t scanned = 0;
  http1::parse_request_head(now, limits_.max_header_bytes, *head_, scanned);
  if (body_in_buffer) body = now.substr(body_at, body.size());
  parse_target(head_->target, target);
}

// Watches the client while its request waits for its slot: a close or reset ends the wait.
std::shared_ptr<Hold> Session::start_hold(BucketMetrics& bm, std::chrono::microseconds wait) {
  TimedSocket& stream = *stream_;
  auto h = std::make_shared<Hold>(stream.get_executor());
  h->timer.expires_after(wait);
  auto& sock = stream.socket();
  sock.async_wait(tcp::socket::wait_read, [h, fd = sock.native_handle()](beast::error_code ec) {
    if (ec) return;  // cancelled: the hold is over
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    // 0: orderly close; < 0 other than "nothing yet": reset. > 0: a pipelined request, still here.
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      h->gone = true;
      h->timer.cancel();
    }
  });
  px_.deps.metrics.held.Increment();
  bm.held.Increment();
  return h;
}

bool Session::end_hold(BucketMetrics& bm, const Hold& hold) {
  px_.deps.metrics.held.Decrement();
  bm.held.Decrement();
  beast::error_code ignored;
  stream_->socket().cancel(ignored);
  return !hold.gone;
}

}  // namespace

net::awaitable<void> run_session(ProxyContext& px, Worker& w, tcp::socket sock, net::ip::address peer, PeerSlot slot) {
  Session s(px, w, std::move(slot));
  co_await s.run(std::move(sock), peer);
}

}  // namespace tollgate::proxy

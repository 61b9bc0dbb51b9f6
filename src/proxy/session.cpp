#include "session.hpp"

#include <boost/beast/core/string.hpp>
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
  AccessLog* log;
  AccessRecord rec;
  std::string method, path, bucket, policy;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~LogOnExit() {
    if (!log) return;
    rec.method = method;
    rec.path = path;
    rec.bucket = bucket;
    rec.policy = policy;
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

class Session {
 public:
  Session(ProxyContext& px, Worker& w) : px_(px), w_(w), limits_(px.limits) {}

  net::awaitable<void> run(tcp::socket sock);

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
  net::awaitable<beast::error_code> read_more(Deadline deadline) {
    return proxy::read_more(*stream_, buffer_, deadline);
  }
  // The listener serves HTTPS: the handshake, within proxy.header_timeout_ms. False: no session.
  net::awaitable<bool> accept_tls(const TlsServerProfile& profile);
  net::awaitable<void> refuse(int status, std::string_view code, std::string_view detail);
  net::awaitable<void> refuse_body_too_large();  // 413 naming proxy.max_body_bytes
  net::awaitable<void> answer_read_error(beast::error_code ec);
  net::awaitable<bool> handle(std::string_view body);
  net::awaitable<bool> hold(BucketMetrics& bm, std::chrono::microseconds wait);
  // The upstream throttled a request `plan` governs: counted, and told to the store when
  // the rule adapts (cut, pause, logged once per episode).
  net::awaitable<void> report_throttle(const Plan& plan, BucketMetrics& bm, const ThrottleSignal& signal);
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
  std::string client_ip_;
  std::optional<TimedSocket> stream_;
  beast::flat_buffer buffer_;
  // 100 fields of views: allocated once per connection, reused by each of its requests.
  std::unique_ptr<http1::RequestHead> head_ = std::make_unique<http1::RequestHead>();
  std::string body_;  // a chunked request's body, decoded
  // The current request's X-Request-Id (proxy/request_id): chosen once its head is parsed, or
  // made when it is refused before that.
  RequestId request_id_;
  bool linger_ = false;  // refused mid-request: drain what the client still sends before closing
  std::chrono::steady_clock::time_point budget_from_{};  // when a request with a budget was read
};

net::awaitable<void> Session::run(tcp::socket sock) {
  Metrics& metrics = px_.deps.metrics;
  metrics.connections.Increment();
  {
    boost::system::error_code ec;
    auto ep = sock.remote_endpoint(ec);
    if (!ec) client_ip_ = ep.address().to_string();
  }
  stream_.emplace(std::move(sock), w_.timeouts);
  TimedSocket& stream = *stream_;
  std::shared_ptr<const TlsServerProfile> tls = px_.deps.tls ? px_.deps.tls->listener() : nullptr;
  if (tls && !co_await accept_tls(*tls)) {
    metrics.connections.Decrement();
    co_return;
  }
  for (;;) {
    if (buffer_.size() == 0) {
      if (w_.draining) break;  // shutting down: no new request on this connection
      // Keep-alive idle: wait for the first byte of the next request. 1 KiB, as nginx's
      // client_header_buffer_size: most requests fit, and an idle or held connection keeps
      // no more than that (larger requests continue in bigger reads).
      beast::error_code ec;
      stream.start(deadline_after(milliseconds(limits_.idle_timeout_ms)));
      w_.idle.insert(&stream);
      const std::size_t n = co_await read_some(stream, buffer_.prepare(1024), ec);
      w_.idle.erase(&stream);
      stream.end(ec);
      if (ec) break;
      buffer_.commit(n);
    }
    std::string_view body;
    const std::size_t used = co_await read_request(body);
    if (used == 0) break;
    const bool keep = co_await handle(body);
    buffer_.consume(used);
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
  const char* const head_at = view(buffer_).data();  // where the head's views point
  if (h.other_transfer_encoding) co_return h.head_bytes;  // answered 501 unread, then closed (handle)
  const http1::BodyFraming framing = http1::request_body(h);
  if (framing.kind == http1::BodyKind::none) co_return h.head_bytes;
  const Deadline body_deadline = deadline_after(milliseconds(limits_.body_timeout_ms));
  if (h.expect_continue && buffer_.size() == h.head_bytes) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    beast::error_code ec;
    stream_->start(deadline_after(write_timeout()));
    co_await write_both(*stream_, net::buffer(kContinue.data(), kContinue.size()), {}, ec);
    stream_->end(ec);
    if (ec) co_return 0;
  }
  std::size_t used = 0;
  if (framing.kind == http1::BodyKind::length) {
    if (framing.length > limits_.max_body_bytes) {
      co_await refuse_body_too_large();
      co_return 0;
    }
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

net::awaitable<bool> Session::handle(std::string_view body) {
  TimedSocket& stream = *stream_;
  const http1::RequestHead& h = *head_;
  const ProxyDeps& deps = px_.deps;
  const unsigned version = h.version_minor == 0 ? 10 : 11;
  const bool keep = h.keep_alive && !w_.draining;  // draining: answer, then close
  // Routes and rules see the normalised path, and the upstream gets that path: what is limited
  // is what the upstream acts on, however the client spelled it.
  RequestTarget target;
  parse_target(h.target, target);
  LogOnExit access{deps.access_log && deps.access_log->enabled() ? deps.access_log : nullptr, {}, {}, {}, {}, {}};
  if (access.log) {
    access.rec.client = client_ip_;
    access.method = std::string(h.method_text);
    access.path = std::string(target.error == TargetError::none ? target.path : path_of(h.target));
  }
  const std::string_view id = request_id_.view();
  access.rec.request_id = id;  // also where forward() finds it for a 502 or 504 of its own
  OutcomeCounter count(deps.metrics, access.rec);
  OwnAnswer refusal;  // a 4xx the gateway answers before any rule
  bool close_after = false;
  // The caller's time budget (proxy/deadline), counted from when its head was read. Each header
  // at most once, and not empty: which of two would the upstream believe?
  const std::chrono::steady_clock::time_point arrived = budget_from_;
  Budget budget;
  bool has_budget = false;
  std::optional<std::string> bad_budget;
  if (px_.settings.deadlines && (h.has(http1::Name::grpc_timeout) || h.has(http1::Name::request_timeout))) {
    int grpc = 0, timeout = 0;
    for (const http1::Field& f : h.all()) {
      grpc += f.id == http1::Name::grpc_timeout;
      timeout += f.id == http1::Name::request_timeout;
    }
    if (grpc > 1 || timeout > 1)
      bad_budget = "grpc-timeout and Request-Timeout may each be sent once";
    else if ((grpc && h.value(http1::Name::grpc_timeout).empty()) ||
             (timeout && h.value(http1::Name::request_timeout).empty()))
      bad_budget = "an empty grpc-timeout or Request-Timeout says no budget";
    else
      bad_budget = read_budget(h.value(http1::Name::grpc_timeout), h.value(http1::Name::request_timeout), budget, has_budget);
  }
  if (h.other_transfer_encoding) {
    // Only chunked framing is understood; anything else could be read differently upstream.
    count.bad_request(501);
    refusal = error_answer(501, "unsupported_transfer_encoding",
                           "only Transfer-Encoding: chunked is accepted", id);
    close_after = true;
  } else if (target.error != TargetError::none) {
    count.bad_request(400);
    refusal = error_answer(400, "bad_target", target_error_detail(target.error), id);
    close_after = true;
  } else if (const auto hosts = h.host_count; hosts > 1 || (hosts == 0 && version >= 11)) {
    // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; an HTTP/1.0 one at most one. Which
    // of two would the upstream believe?
    count.bad_request(400);
    refusal = error_answer(400, "bad_host",
                           hosts > 1 ? "more than one Host header" : "an HTTP/1.1 request needs a Host header", id);
    close_after = true;
  } else if (h.method == http1::Method::connect || (h.method == http1::Method::trace && !limits_.allow_trace)) {
    // CONNECT would ask for a tunnel the gateway does not make; TRACE echoes the request with its
    // credentials (cross-site tracing) unless the operator allows it.
    count.bad_request(405);
    refusal = error_answer(405, "method_not_allowed",
                           "the gateway forwards neither CONNECT nor (unless proxy.allow_trace) TRACE", id);
    refusal.allow = limits_.allow_trace ? "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"
                                        : "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
  } else if (bad_budget) {
    count.bad_request(400);
    refusal = error_answer(400, "bad_deadline", *bad_budget, id);
  }
  if (access.rec.status != 0) {
    linger_ = close_after;  // the rest of the request (a body of unknown framing) is not read
    co_return co_await send_answer(stream, version, keep && !close_after, refusal, write_timeout());
  }

  std::string rewritten;  // the normalised target, when the client spelled it otherwise
  if (target.rewritten) rewritten.append(target.path).append(target.query);
  const std::string_view upstream_target = target.rewritten ? std::string_view(rewritten) : h.target;
  // The route table it starts on is the one it finishes on, whatever a SIGHUP swaps meanwhile.
  const std::shared_ptr<WorkerTable> table = w_.table;
  const Route* route = table->routes->route_for(target.path);
  if (route == nullptr) {
    count.bad_request(404);
    refusal = error_answer(404, "no_route", "no route for this path", id);
    co_return co_await send_answer(stream, version, keep, refusal, write_timeout());
  }
  // Its names do not resolve yet: 503 before the limiter is asked, so no permit is taken.
  if (Upstream& up = table->routes->upstreams()[route->upstream]; !up.endpoints->resolved())
    co_return co_await answer_unresolved(px_, stream, version, keep, up, access.rec);

  const config::SwitchMode global = deps.switch_state.mode();
  const std::shared_ptr<const RuleViews> rules = global == config::SwitchMode::off ? nullptr : rule_views();
  const HeadFields headers(h);
  const RequestFacts facts{target.match, client_ip_, headers, static_cast<std::int64_t>(deps.metrics.held.Value()),
                           has_budget ? &budget : nullptr,
                           std::chrono::duration_cast<std::chrono::microseconds>(arrived.time_since_epoch()).count()};
  Plan plan;
  plan_request(facts, rules.get(), global, px_.settings, plan);
  count.use(rules.get());
  if (access.log && plan.rule && plan.step != Step::bypass) access.bucket = plan.rule->bucket;
  if (plan.step == Step::bad_key) {
    count.bad_request(400);
    refusal = error_answer(400, "missing_client_key", plan.detail, id);
    co_return co_await send_answer(stream, version, keep, refusal, write_timeout());
  }
  // The upstream request's deadline fields, and the rule's latency estimate to feed.
  const Budget* const sent_budget = has_budget ? &budget : nullptr;
  const auto deadline = arrived + std::chrono::microseconds(budget.us);
  LatencyEstimate* const latency = plan.rule ? &rules->metrics_of(*plan.rule).upstream_latency : nullptr;
  if (plan.step == Step::too_late) {
    // Its budget would run out before the upstream answered: 429 now, nothing reserved.
    count.planned(plan);
    access.rec.status = 429;
    const Verdict v = too_late_verdict(plan, budget);
    if (access.log) access.policy = v.bound;
    const OwnAnswer answer = refused_answer(plan, v, target.path, 429, nullptr);
    co_return co_await send_answer(stream, version, keep, answer, write_timeout());
  }
  ThrottleSignal signal;  // what the upstream's answer says about its own limit
  if (plan.step != Step::decide) {
    count.planned(plan);
    const UpstreamRequest out{h, upstream_target, body, {}, id, client_ip_, sent_budget, deadline, latency,
                              plan.rule ? &signal : nullptr, stream.tls() != nullptr};
    const RateLimitFields none{{}, {}, id};
    const bool open = co_await forward(px_, w_, *table, stream, out, *route, none, access.rec);
    if (signal.throttled) co_await report_throttle(plan, rules->metrics_of(*plan.rule), signal);
    co_return open;
  }
  store::StoreDecision sd = co_await deps.store.try_acquire(plan.request);
  BucketMetrics* const adaptive = plan.request.adaptive != limiter::Adaptive::off && sd.effective_rate > 0
                                      ? &rules->metrics_of(*plan.rule)
                                      : nullptr;
  auto note_adaptive = [adaptive, &plan](const store::StoreDecision& d) {
    if (adaptive == nullptr || !(d.effective_rate > 0)) return;
    adaptive->adaptive().effective_rate.Set(d.effective_rate);
    if (plan.request.adaptive == limiter::Adaptive::on && d.paused_us > 0) adaptive->raise_pause(limiter::steady_now_us() + d.paused_us);
  };
  note_adaptive(sd);
  Verdict verdict = verdict_for(plan, sd);
  count.decided(plan, sd, verdict);
  switch (verdict.action) {
    case Action::forward:
      break;
    case Action::unavailable: {
      const OwnAnswer answer = refused_answer(plan, verdict, target.path, 503, nullptr);
      co_return co_await send_answer(stream, version, keep, answer, write_timeout());
    }
    case Action::reject: {
      if (access.log) access.policy = verdict.bound;
      const RateLimitFields fields{verdict.policy_header, verdict.limit_header, id};
      const OwnAnswer answer = refused_answer(plan, verdict, target.path, 429, &fields);
      co_return co_await send_answer(stream, version, keep, answer, write_timeout());
    }
    case Action::hold: {
      BucketMetrics& bm = rules->metrics_of(*plan.rule);
      // Only an adaptive bucket's hold may need it: no clock read otherwise.
      const std::int64_t window_end = adaptive ? limiter::steady_now_us() + plan.request.timeout_us : 0;
      // The pause this slot was granted knowing of (the decision's own, not the shared marker: another
      // thread may have raised that for a pause the store began just after this grant): only a
      // later one voids it.
      std::int64_t known_pause = adaptive && sd.paused_us > 0 ? limiter::steady_now_us() + sd.paused_us : 0;
      for (int round = 0;; ++round) {
        if (!co_await hold(bm, std::chrono::microseconds(verdict.wait_us))) {
          // The client left before its slot: its slot comes back now if nobody live queued behind
          // it (with any abandoned ones it unblocks), or later with the ones after it.
          const store::RefundResult given = co_await deps.store.refund_slots(plan.request, sd.reservation);
          count.client_gone(given.reservations());
          co_return false;
        }
        // An adaptive bucket paused while it waited (the upstream said Retry-After): its slot
        // went with the pause. It asks again with what is left of its window: a slot after the
        // pause, or a 429 saying when. (A pause known when the slot was granted, give or take the
        // few milliseconds by which gateways' readings of it differ, does not count.)
        if (adaptive == nullptr || plan.request.adaptive != limiter::Adaptive::on) break;
        const std::int64_t now = limiter::steady_now_us();
        const std::int64_t pause = bm.pause_until_us.load(std::memory_order_relaxed);
        if (pause <= now || pause <= known_pause + 5'000) break;
        // At most three times; the fourth asks only for a permit now.
        plan.request.timeout_us = round < 3 ? std::max<std::int64_t>(0, window_end - now) : 0;
        sd = co_await deps.store.try_acquire(plan.request);
        note_adaptive(sd);
        known_pause = sd.paused_us > 0 ? limiter::steady_now_us() + sd.paused_us : 0;
        verdict = verdict_for(plan, sd);
        if (verdict.action == Action::hold) continue;
        if (verdict.action == Action::forward) break;
        // Counted as delayed when it was held; the pause that caught it is counted here.
        if (verdict.action == Action::reject) bm.adaptive().paused_rejections.Increment();
        if (access.log) access.policy = verdict.bound;
        access.rec.status = verdict.action == Action::reject ? 429 : 503;
        const RateLimitFields fields{verdict.policy_header, verdict.limit_header, id};
        const OwnAnswer answer = refused_answer(plan, verdict, target.path, access.rec.status,
                                                verdict.action == Action::reject ? &fields : nullptr);
        co_return co_await send_answer(stream, version, keep, answer, write_timeout());
      }
      break;
    }
  }
  // X-Tollgate-Shadow: only the gateway says that (a client's is never forwarded).
  const RateLimitFields fields{verdict.policy_header, verdict.limit_header, id};
  const UpstreamRequest out{h, upstream_target, body, verdict.shadow_header, id, client_ip_, sent_budget, deadline,
                            latency, &signal, stream.tls() != nullptr,
                            sd.decision.granted ? &plan.request : nullptr};
  const bool open = co_await forward(px_, w_, *table, stream, out, *route, fields, access.rec);
  if (signal.throttled) co_await report_throttle(plan, rules->metrics_of(*plan.rule), signal);
  co_return open;
}

net::awaitable<void> Session::report_throttle(const Plan& plan, BucketMetrics& bm, const ThrottleSignal& signal) {
  bm.upstream_throttled().Increment();
  const limiter::Adaptive mode = plan.request.adaptive;
  if (plan.step != Step::decide || mode == limiter::Adaptive::off) co_return;
  // A little jitter on a pause (up to a tenth of it, at most 0.5 s), so that a fleet told the same
  // Retry-After does not resume in step.
  thread_local std::minstd_rand rng{std::random_device{}()};
  const std::int64_t spread = std::min<std::int64_t>(signal.pause_us / 10, 500'000);
  const std::int64_t jitter =
      spread > 0 ? std::uniform_int_distribution<std::int64_t>(0, spread)(rng) : 0;
  const store::AdaptOutcome o = co_await px_.deps.store.throttled(plan.request, signal.pause_us, jitter);
  if (!o.ok) co_return;  // the store is down: it decides by its failure policy, nothing to adapt
  AdaptiveSeries& series = bm.adaptive();
  series.effective_rate.Set(o.effective_rate);
  if (mode == limiter::Adaptive::on && o.pause_left_us > 0) bm.raise_pause(limiter::steady_now_us() + o.pause_left_us);
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

// Holds a request until its slot on a timer (never a thread), watching the client meanwhile.
// Returns false if the client closed its connection before the slot.
net::awaitable<bool> Session::hold(BucketMetrics& bm, std::chrono::microseconds wait) {
  TimedSocket& stream = *stream_;
  struct Hold {
    explicit Hold(net::any_io_executor ex) : timer(std::move(ex)) {}
    net::steady_timer timer;
    bool gone = false;
  };
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
  Metrics& metrics = px_.deps.metrics;
  metrics.held.Increment();
  bm.held.Increment();
  beast::error_code ec;
  co_await h->timer.async_wait(with(ec));
  metrics.held.Decrement();
  bm.held.Decrement();
  beast::error_code ignored;
  sock.cancel(ignored);
  co_return !h->gone;
}

}  // namespace

net::awaitable<void> run_session(ProxyContext& px, Worker& w, tcp::socket sock) {
  Session s(px, w);
  co_await s.run(std::move(sock));
}

}  // namespace tollgate::proxy

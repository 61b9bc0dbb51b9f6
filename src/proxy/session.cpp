#include "session.hpp"

#include <sys/socket.h>

#include "outcomes.hpp"
#include "responses.hpp"
#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/request_target.hpp"
#include "tollgate/proxy/throttle.hpp"
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
class BeastHeaders final : public HeaderSource {
 public:
  explicit BeastHeaders(const http::request<http::string_body>& req) : req_(req) {}
  std::optional<std::string_view> find(std::string_view name) const override {
    auto it = req_.find(name);
    if (it == req_.end()) return std::nullopt;
    return std::string_view(it->value().data(), it->value().size());
  }
  std::string joined(std::string_view name) const override {
    std::string out;
    for (auto [it, end] = req_.equal_range(name); it != end; ++it) {
      if (!out.empty()) out += ',';
      out.append(it->value().data(), it->value().size());
    }
    return out;
  }

 private:
  const http::request<http::string_body>& req_;
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
  net::awaitable<void> answer_read_error(TimedSocket& stream, beast::error_code ec);
  net::awaitable<bool> handle(TimedSocket& stream, beast::flat_buffer& buffer,
                              http::request<http::string_body> req);
  net::awaitable<bool> hold(TimedSocket& stream, BucketMetrics& bm, std::chrono::microseconds wait);

  ProxyContext& px_;
  Worker& w_;
  const config::ProxyLimits& limits_;
  std::string client_ip_;
};

net::awaitable<void> Session::run(tcp::socket sock) {
  Metrics& metrics = px_.deps.metrics;
  metrics.connections.fetch_add(1, std::memory_order_relaxed);
  {
    boost::system::error_code ec;
    auto ep = sock.remote_endpoint(ec);
    if (!ec) client_ip_ = ep.address().to_string();
  }
  TimedSocket stream(std::move(sock), w_.timeouts);
  beast::flat_buffer buffer;
  for (;;) {
    beast::error_code ec;
    if (buffer.size() == 0) {
      if (w_.draining) break;  // shutting down: no new request on this connection
      // Keep-alive idle: wait for the first byte of the next request. 1 KiB, as nginx's
      // client_header_buffer_size: most requests fit, and an idle or held connection keeps
      // no more than that (larger requests continue in bigger reads).
      stream.start(deadline_after(milliseconds(limits_.idle_timeout_ms)));
      w_.idle.insert(&stream);
      const std::size_t n = co_await stream.async_read_some(buffer.prepare(1024), with(ec));
      w_.idle.erase(&stream);
      stream.end(ec);
      if (ec) break;
      buffer.commit(n);
    }
    http::request_parser<http::string_body> parser;
    parser.header_limit(limits_.max_header_bytes);
    parser.body_limit(limits_.max_body_bytes);
    ec = co_await parse_until(stream, buffer, parser, [](auto& p) { return p.is_header_done(); },
                              deadline_after(milliseconds(limits_.header_timeout_ms)));
    if (ec) {
      co_await answer_read_error(stream, ec);
      break;
    }
    if (!parser.is_done()) {
      if (parser.get()[http::field::expect] == "100-continue" && buffer.size() == 0) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        stream.start(deadline_after(write_timeout()));
        co_await net::async_write(stream, net::buffer(kContinue.data(), kContinue.size()), with(ec));
        stream.end(ec);
        if (ec) break;
      }
      const bool chunked = parser.chunked();
      std::size_t head_fields = 0;
      if (chunked) head_fields = static_cast<std::size_t>(std::distance(parser.get().begin(), parser.get().end()));
      parser.eager(true);
      ec = co_await parse_until(stream, buffer, parser, [](auto& p) { return p.is_done(); },
                                deadline_after(milliseconds(limits_.body_timeout_ms)));
      if (ec) {
        co_await answer_read_error(stream, ec);
        break;
      }
      if (chunked) drop_trailers(parser.get(), head_fields);
    }
    http::request<http::string_body> req = parser.release();
    const bool keep = co_await handle(stream, buffer, std::move(req));
    if (!keep) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  metrics.connections.fetch_sub(1, std::memory_order_relaxed);
}

net::awaitable<void> Session::answer_read_error(TimedSocket& stream, beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::error::operation_aborted)
    co_return;  // the client went away: nothing to answer
  px_.deps.metrics.bad_requests.fetch_add(1, std::memory_order_relaxed);
  if (ec == beast::error::timeout) co_return;  // cut off at the deadline: a slow client gets no answer
  OwnAnswer answer;
  if (ec == http::error::header_limit) {
    answer = error_answer(http::status::request_header_fields_too_large, "headers_too_large",
                          "request headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes");
  } else if (ec == http::error::body_limit) {
    answer = error_answer(http::status::payload_too_large, "body_too_large",
                          "request body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes");
  } else {
    answer = error_answer(http::status::bad_request, "bad_request", ec.message());
  }
  co_await send_answer(stream, 11, false, answer, write_timeout());
}

net::awaitable<bool> Session::handle(TimedSocket& stream, beast::flat_buffer& buffer,
                                     http::request<http::string_body> req) {
  const ProxyDeps& deps = px_.deps;
  const unsigned version = req.version();
  const bool keep = req.keep_alive() && !w_.draining;  // draining: answer, then close
  // Routes and rules see the normalised path, and the upstream gets that path: what is limited
  // is what the upstream acts on, however the client spelled it.
  RequestTarget target;
  parse_target(req.target(), target);
  LogOnExit access{deps.access_log && deps.access_log->enabled() ? deps.access_log : nullptr, {}, {}, {}, {}, {}};
  if (access.log) {
    access.rec.client = client_ip_;
    access.method = std::string(req.method_string());
    access.path = std::string(target.error == TargetError::none ? target.path : path_of(req.target()));
  }
  OutcomeCounter count(deps.metrics, access.rec);
  OwnAnswer refusal;  // a 4xx the gateway answers before any rule
  bool close_after = false;
  if (auto te = req[http::field::transfer_encoding]; !te.empty() && !beast::iequals(te, "chunked")) {
    // Only chunked framing is understood; anything else could be read differently upstream.
    count.bad_request(501);
    refusal = error_answer(http::status::not_implemented, "unsupported_transfer_encoding",
                           "only Transfer-Encoding: chunked is accepted");
    close_after = true;
  } else if (target.error != TargetError::none) {
    count.bad_request(400);
    refusal = error_answer(http::status::bad_request, "bad_target", target_error_detail(target.error));
    close_after = true;
  } else if (const auto hosts = req.count(http::field::host); hosts > 1 || (hosts == 0 && version >= 11)) {
    // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; an HTTP/1.0 one at most one. Which
    // of two would the upstream believe?
    count.bad_request(400);
    refusal = error_answer(http::status::bad_request, "bad_host",
                           hosts > 1 ? "more than one Host header" : "an HTTP/1.1 request needs a Host header");
    close_after = true;
  } else if (req.method() == http::verb::connect || (req.method() == http::verb::trace && !limits_.allow_trace)) {
    // CONNECT would ask for a tunnel the gateway does not make; TRACE echoes the request with its
    // credentials (cross-site tracing) unless the operator allows it.
    count.bad_request(405);
    refusal = error_answer(http::status::method_not_allowed, "method_not_allowed",
                           "the gateway forwards neither CONNECT nor (unless proxy.allow_trace) TRACE");
    refusal.allow = limits_.allow_trace ? "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"
                                        : "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
  }
  if (access.rec.status != 0) co_return co_await send_answer(stream, version, keep && !close_after, refusal, write_timeout());

  if (target.rewritten) req.target(std::string(target.path) + std::string(target.query));
  const Route* route = px_.routes.route_for(target.path);
  if (route == nullptr) {
    count.bad_request(404);
    refusal = error_answer(http::status::not_found, "no_route", "no route for this path");
    co_return co_await send_answer(stream, version, keep, refusal, write_timeout());
  }
  const std::size_t upstream = route->upstream;

  req.erase("X-Tollgate-Shadow");  // only the gateway says that
  const config::SwitchMode global = deps.switch_state.mode();
  const std::shared_ptr<const RuleViews> rules = global == config::SwitchMode::off ? nullptr : rule_views();
  const BeastHeaders headers(req);
  const RequestFacts facts{target.match, client_ip_, headers, deps.metrics.held.load(std::memory_order_relaxed)};
  Plan plan;
  plan_request(facts, rules.get(), global, px_.settings, plan);
  count.use(rules.get());
  if (access.log && plan.rule && plan.step != Step::bypass) access.bucket = plan.rule->bucket;
  if (plan.step == Step::bad_key) {
    count.bad_request(400);
    refusal = error_answer(http::status::bad_request, "missing_client_key", plan.detail);
    co_return co_await send_answer(stream, version, keep, refusal, write_timeout());
  }
  if (plan.step != Step::decide) {
    count.planned(plan);
    co_return co_await forward(px_, w_, stream, std::move(req), client_ip_, upstream, {}, access.rec);
  }
  const store::StoreDecision sd = co_await deps.store.try_acquire(plan.request);
  const Verdict verdict = verdict_for(plan, sd);
  count.decided(plan, sd, verdict);
  if (!verdict.shadow_header.empty()) req.set("X-Tollgate-Shadow", verdict.shadow_header);
  const RateLimitFields fields{verdict.policy_header, verdict.limit_header};
  switch (verdict.action) {
    case Action::forward:
      break;
    case Action::unavailable: {
      OwnAnswer answer;
      answer.status = http::status::service_unavailable;
      answer.body = verdict.body;
      answer.retry_after_s = verdict.retry_after_s;
      co_return co_await send_answer(stream, version, keep, answer, write_timeout());
    }
    case Action::reject: {
      if (access.log) access.policy = verdict.bound;
      OwnAnswer answer;
      answer.status = http::status::too_many_requests;
      answer.body = verdict.body;
      answer.retry_after_s = verdict.retry_after_s;
      answer.policy_header = fields.policy_header;
      answer.limit_header = fields.limit_header;
      co_return co_await send_answer(stream, version, keep, answer, write_timeout());
    }
    case Action::hold: {
      // A held request keeps only what it needs: its read buffer goes back to the allocator (the
      // next connection's read reuses it) and comes back on the next read.
      if (buffer.size() == 0) buffer.shrink_to_fit();
      if (!co_await hold(stream, rules->metrics_of(*plan.rule), std::chrono::microseconds(verdict.wait_us))) {
        // The client left before its slot: its slot comes back now if nobody live queued behind
        // it (with any abandoned ones it unblocks), or later with the ones after it.
        const store::RefundResult given = co_await deps.store.refund_slots(plan.request, sd.reservation);
        count.client_gone(given.reservations());
        co_return false;
      }
      break;
    }
  }
  co_return co_await forward(px_, w_, stream, std::move(req), client_ip_, upstream, fields, access.rec);
}

// Holds a request until its slot on a timer (never a thread), watching the client meanwhile.
// Returns false if the client closed its connection before the slot.
net::awaitable<bool> Session::hold(TimedSocket& stream, BucketMetrics& bm, std::chrono::microseconds wait) {
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
  metrics.held.fetch_add(1, std::memory_order_relaxed);
  bm.held.fetch_add(1, std::memory_order_relaxed);
  beast::error_code ec;
  co_await h->timer.async_wait(with(ec));
  metrics.held.fetch_sub(1, std::memory_order_relaxed);
  bm.held.fetch_sub(1, std::memory_order_relaxed);
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

#include "upstream_auth.hpp"

#include "tollgate/limiter/clock.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cctype>
#include <cstdio>
#include <random>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "proxy_context.hpp"
#include "upstream.hpp"
#include "tollgate/log_line.hpp"

namespace tollgate::proxy {

namespace {

// A token response's body is read up to this many bytes (a token response is well under 8 KiB).
constexpr std::size_t kMaxTokenBody = 64 * 1024;
// A token request waits at most this long for its answer (connect included), whatever waits on it.
constexpr std::chrono::seconds kFetchTimeout{10};
// A token with no expires_in in its answer is used for this long (RFC 6749 leaves it to "other
// means"; five minutes is short enough for any supplier's lifetime seen in practice).
constexpr std::chrono::seconds kDefaultLifetime{300};

// application/x-www-form-urlencoded (RFC 6749 appendix B): unreserved characters as they are,
// the rest %XX; a space is "+".
std::string form_encode(std::string_view v) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(ch);
    } else if (c == ' ') {
      out.push_back('+');
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string base64(std::string_view v) {
  std::string out(4 * ((v.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(v.data()), static_cast<int>(v.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// RFC 6750 b64token: what a Bearer token may hold (so it cannot break the field it goes in).
bool bearer_token(std::string_view t) {
  if (t.empty() || t.size() > 8192) return false;
  std::size_t i = 0;
  for (; i < t.size() && t[i] != '='; ++i) {
    const auto c = static_cast<unsigned char>(t[i]);
    if (!std::isalnum(c) && std::string_view("-._~+/").find(t[i]) == std::string_view::npos) return false;
  }
  for (; i < t.size(); ++i)
    if (t[i] != '=') return false;
  return true;
}

constexpr std::string_view kBearerPrefix = "Authorization: Bearer ";

// The token of a field line made by settle() or adopt().
std::string token_of(std::string_view field) {
  if (!field.starts_with(kBearerPrefix) || !field.ends_with("\r\n")) return std::string();
  return std::string(field.substr(kBearerPrefix.size(), field.size() - kBearerPrefix.size() - 2));
}

}  // namespace

TokenAnswer read_token_answer(int status, std::string_view body) {
  TokenAnswer a;
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
  if (status < 200 || status > 299) {
    a.result = TokenAnswer::rejected;
    a.why = "the token endpoint answered " + std::to_string(status);
    // RFC 6749 5.2: an error code (and description) says why; nothing else of the body is shown.
    if (doc.is_object() && doc.contains("error") && doc["error"].is_string()) {
      std::string code = doc["error"].get<std::string>().substr(0, 64);
      for (char& c : code)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
      a.why += " (" + code + ")";
    }
    return a;
  }
  a.result = TokenAnswer::invalid;
  if (!doc.is_object()) {
    a.why = "the token endpoint's answer is not a JSON object";
    return a;
  }
  const auto token = doc.find("access_token");
  if (token == doc.end() || !token->is_string()) {
    a.why = "the token endpoint's answer has no access_token";
    return a;
  }
  if (!bearer_token(token->get<std::string>())) {
    a.why = "the token endpoint's access_token is not a Bearer token (RFC 6750 b64token)";
    return a;
  }
  if (const auto type = doc.find("token_type"); type != doc.end()) {
    std::string t = type->is_string() ? type->get<std::string>() : "";
    for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (t != "bearer") {
      a.why = "the token endpoint's token_type is not Bearer";
      return a;
    }
  }
  a.lifetime = kDefaultLifetime;
  if (const auto e = doc.find("expires_in"); e != doc.end()) {
    // A number, or a number in a string (some endpoints send one).
    double s = -1;
    if (e->is_number()) s = e->get<double>();
    else if (e->is_string()) {
      const std::string v = e->get<std::string>();
      char* end = nullptr;
      s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') s = -1;
    }
    if (!(s >= 1) || s > 1e9) {
      a.why = "the token endpoint's expires_in is not a number of seconds >= 1";
      return a;
    }
    a.lifetime = std::chrono::seconds(static_cast<std::int64_t>(s));
  }
  a.token = token->get<std::string>();
  a.result = TokenAnswer::ok;
  return a;
}

struct UpstreamAuth::Waiter {
  explicit Waiter(const net::any_io_executor& ex) : timer(ex) {}
  net::steady_timer timer;
};

UpstreamAuth::UpstreamAuth(const config::UpstreamConfig& up, Metrics& metrics) : conf_(up.auth), upstream_(up.name) {
  if (conf_.type == config::AuthType::header) {
    field_name_ = conf_.name;
    static_field_ = conf_.name + ": " + conf_.value + "\r\n";
    return;
  }
  field_name_ = "Authorization";
  metrics_ = &metrics.auth(upstream_);
  std::random_device rd;
  char hex[33];
  std::snprintf(hex, sizeof hex, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  holder_ = hex;
  // The shared key names the settings the token was asked with: after a change (another token
  // URL, client, scope or supplier) a gateway never takes a token asked for under the old ones,
  // and old and new gateways of a rolling change do not overwrite each other's.
  const std::string settings = up.url + '\n' + conf_.token_url + '\n' + conf_.client_id + '\n' + conf_.client_secret +
                               '\n' + conf_.scope + '\n' + (conf_.basic ? "basic" : "body");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(settings.data(), settings.size(), digest, &n, EVP_sha256(), nullptr);
  fleet_name_ = upstream_ + ":";
  for (unsigned i = 0; i < 8 && i < n; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", digest[i]);
    fleet_name_ += hex;
  }
  form_ = "grant_type=client_credentials";
  if (!conf_.scope.empty()) form_ += "&scope=" + form_encode(conf_.scope);
  if (conf_.basic) {
    // RFC 6749 2.3.1: the id and the secret form-encoded, then joined by ':' in Basic.
    basic_field_ = "Authorization: Basic " + base64(form_encode(conf_.client_id) + ":" + form_encode(conf_.client_secret)) +
                   "\r\n";
  } else {
    form_ += "&client_id=" + form_encode(conf_.client_id) + "&client_secret=" + form_encode(conf_.client_secret);
  }
}

void UpstreamAuth::wake_all() {
  for (auto& w : waiters_) net::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
  waiters_.clear();
}

// A waiter's place in waiters_, given up however its request ends (a wake-up, its deadline, or
// its coroutine destroyed at shutdown).
struct UpstreamAuth::Parked {
  UpstreamAuth& auth;
  std::shared_ptr<Waiter> waiter;
  ~Parked() {
    std::lock_guard lock(auth.mu_);
    std::erase(auth.waiters_, waiter);
  }
};

net::awaitable<std::string> UpstreamAuth::field(ProxyContext& px, Worker& w, Deadline by, std::string_view refused) {
  for (;;) {
    std::optional<std::string> answer;
    std::shared_ptr<Waiter> waiter;
    bool start = false;
    {
      std::lock_guard lock(mu_);
      const auto now = Clock::now();
      const bool was_refused = !refused.empty() && token_field_ == refused;
      const bool valid = !token_field_.empty() && now < expires_ && !was_refused;
      if (was_refused && refused_token_.empty()) refused_token_ = token_of(refused);  // for the fleet's copy too
      if (!refreshing_ && (!valid || now >= refresh_at_)) start = refreshing_ = true;
      if (valid) {
        answer = token_field_;
      } else if (now >= by || now < failed_until_) {
        // Out of time, or the token endpoint has just failed: answered now, not held while the
        // next token request waits for its turn (token_rate).
        answer.emplace();
      } else {
        waiter = std::make_shared<Waiter>(w.ctx->get_executor());
        waiter->timer.expires_at(by);
        waiters_.push_back(waiter);
      }
    }
    // Spawned outside the lock: the refresh takes it first thing, and a newer Asio runs a
    // spawned coroutine's first step at once.
    if (start) net::co_spawn(*w.ctx, refresh(shared_from_this(), px, w), net::detached);
    if (answer) co_return std::move(*answer);
    Parked parked{*this, waiter};
    beast::error_code ec;
    co_await waiter->timer.async_wait(with(ec));  // woken (cancelled) by a refresh's end, or at `by`
  }
}

void UpstreamAuth::note_caller(std::uint64_t caller) {
  const limiter::Micros now = limiter::steady_now_us();
  std::lock_guard lock(mu_);
  asked_.note(caller, now);
}

bool UpstreamAuth::confirm_401(std::string_view field, std::uint64_t caller) {
  constexpr limiter::Micros kEvidenceUs = limiter::AdaptiveParams{}.evidence_us;
  const limiter::Micros now = limiter::steady_now_us();
  {
    std::lock_guard lock(mu_);
    if (field != token_field_) return true;  // replaced already: the next one is tried
    if (refused_for_ != field) {
      refused_401_ = {};
      refused_for_.assign(field);
    }
    refused_401_.note(caller, now);
    const bool two = now - refused_401_.second_at < kEvidenceUs;
    const bool alone = asked_.first == caller && !(now - asked_.second_at < kEvidenceUs);
    if (!two && !alone) {
      if (metrics_) metrics_->unconfirmed_401->Increment();
      return false;
    }
  }
  purge(field);
  return true;
}

void UpstreamAuth::purge(std::string_view field) {
  std::lock_guard lock(mu_);
  if (field != token_field_) return;  // replaced already
  // Replaced, not dropped: the request that was refused waits for the next one (field() with
  // `refused`), the others keep the current token until it comes, so that one caller's 401s
  // cannot hold every request of the upstream.
  refresh_at_ = Clock::time_point{};
  refused_token_ = token_of(field);
  suspect_ = true;
  log_line("tollgate: warn: upstream '", upstream_, "' answered 401 to its OAuth2 token: a new one is fetched");
}

net::awaitable<TokenAnswer> UpstreamAuth::request_token(std::shared_ptr<UpstreamAuth> self, ProxyContext& px,
                                                         Worker& w, Clock::time_point& sent) {
  // The token endpoint's own bucket: one request at most every 1/token_rate seconds.
  Clock::time_point start;
  {
    std::lock_guard lock(self->mu_);
    start = std::max(Clock::now(), self->next_request_);
    self->next_request_ = start + std::chrono::microseconds(static_cast<std::int64_t>(1e6 / self->conf_.token_rate));
  }
  if (start > Clock::now()) {
    net::steady_timer t(*w.ctx);
    t.expires_at(start);
    beast::error_code ec;
    co_await t.async_wait(with(ec));
  }
  sent = Clock::now();
  TokenAnswer a;
  std::shared_ptr<WorkerTable> table = w.table;  // kept for the request's whole life
  // The worker's running table must still hold this credential (unchanged since it was made):
  // after a reload that changed it, the old secret never goes to the new token endpoint.
  const auto& ups = table->routes->upstreams();
  std::size_t index = ups.size();
  for (std::size_t i = 0; i < ups.size(); ++i)
    if (ups[i].conf.name == self->conf_.token_upstream) index = i;
  if (index == ups.size() || !self->current_in(w)) {
    a.why = "the configuration changed (the new one fetches its own token)";
    co_return a;
  }
  const std::string line = "POST " + ups[index].conf.base_path + " HTTP/1.1\r\n";
  const std::string fields =
      "Content-Type: application/x-www-form-urlencoded\r\nAccept: application/json\r\n" + self->basic_field_;
  const Exchange x = co_await exchange(px, w, *table, index, line, fields, self->form_, sent + kFetchTimeout, kMaxTokenBody);
  if (x.complete) co_return read_token_answer(x.status, x.body);
  a.why = "token request: " + x.why;
  co_return a;
}

bool UpstreamAuth::current_in(const Worker& w) const {
  for (const Upstream& u : w.table->routes->upstreams())
    if (u.conf.name == upstream_) return u.auth.get() == this;
  return false;
}

void UpstreamAuth::settle(const TokenAnswer& a, Clock::time_point sent, bool counted,
                          std::optional<Clock::time_point> failed_until) {
  std::lock_guard lock(mu_);
  refreshing_ = false;
  if (counted) metrics_->refresh[a.result]->Increment();
  if (a.result == TokenAnswer::ok) {
    // Its life counts from when it was asked for: never later than the endpoint's own clock.
    token_field_ = std::string(kBearerPrefix) + a.token + "\r\n";
    expires_ = sent + a.lifetime;
    const auto before = std::min<Clock::duration>(std::chrono::seconds(conf_.refresh_before_s), a.lifetime / 2);
    refresh_at_ = expires_ - before;
    last_refresh_unix_ =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    metrics_->ttl_seconds->Set(std::chrono::duration<double>(expires_ - Clock::now()).count());
    failed_until_ = {};
    suspect_ = false;
  } else {
    if (counted) ++failures_;
    last_error_ = a.why;
    failed_until_ = failed_until.value_or(next_request_);
    if (suspect_) {
      // The supplier refused it and no other came: not sent again (its requests would only
      // meet the same 401, each on a permit).
      token_field_.clear();
      expires_ = {};
      suspect_ = false;
    }
    log_line("tollgate: warn: upstream '", upstream_, "': no OAuth2 token: ", a.why);
  }
  wake_all();
}

net::awaitable<void> UpstreamAuth::refresh(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w) {
  // Whatever happens, the refresh ends (refreshing_ is never left set, every waiter is woken).
  std::string failure;
  try {
    co_await refresh_steps(self, px, w);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    TokenAnswer a;
    a.why = "token refresh failed: " + failure;
    self->settle(a, Clock::now(), true);
  }
}

net::awaitable<void> UpstreamAuth::refresh_steps(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w) {
  if (!self->current_in(w)) {
    TokenAnswer a;
    a.why = "the configuration changed (the new one fetches its own token)";
    self->settle(a, Clock::now(), false);
    co_return;
  }
  if (px.deps.store.shares_tokens() && co_await from_fleet(self, px, w)) co_return;
  Clock::time_point sent;
  const TokenAnswer a = co_await request_token(self, px, w, sent);
  self->settle(a, sent, true);
}

namespace {
std::int64_t whole_ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}
}  // namespace

// This gateway holds the fleet's lease: it asks the token endpoint and puts the answer in the store
// for the others (or that it failed, so that they answer 502 until the fleet's next request may go).
net::awaitable<void> UpstreamAuth::fetch_for_fleet(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w) {
  const auto interval = std::chrono::microseconds(static_cast<std::int64_t>(1e6 / self->conf_.token_rate));
  Clock::time_point sent;
  const TokenAnswer a = co_await request_token(self, px, w, sent);
  store::SharedTokenOp done;
  done.name = self->fleet_name_;
  done.holder = self->holder_;
  done.hold_ms = whole_ms(interval) + 1;  // the fleet's next token request waits its turn
  done.kind = store::SharedTokenOp::fail;
  if (a.result == TokenAnswer::ok) {
    done.ttl_ms = whole_ms(sent + a.lifetime - Clock::now());
    if (done.ttl_ms > 0) {
      done.kind = store::SharedTokenOp::put;
      done.token = a.token;
    }
  }
  // Not stored (the lease ran out meanwhile): this gateway keeps its token, the fleet's stays as
  // another put it.
  co_await px.deps.store.shared_token(done);
  self->settle(a, sent, true);
}

net::awaitable<bool> UpstreamAuth::from_fleet(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w) {
  // One token for the fleet: taken from the store while it is not due; else one gateway (the
  // lease's holder) asks the token endpoint and puts the answer there, and the others wait for
  // it. The lease covers this gateway's wait for its token bucket and the whole request.
  store::BucketStore& store = px.deps.store;
  Clock::duration bucket_wait{};
  {
    std::lock_guard lock(self->mu_);
    bucket_wait = std::max<Clock::duration>(Clock::duration{}, self->next_request_ - Clock::now());
  }
  const auto lease = bucket_wait + kFetchTimeout + std::chrono::seconds(1);
  const auto give_up = Clock::now() + lease + std::chrono::seconds(1);
  for (;;) {
    std::string refused;
    {
      std::lock_guard lock(self->mu_);
      refused = self->refused_token_;
    }
    store::SharedTokenOp op;
    op.name = self->fleet_name_;
    op.holder = self->holder_;
    op.token = refused;
    op.lease_ms = whole_ms(lease);
    op.before_ms = static_cast<std::int64_t>(self->conf_.refresh_before_s) * 1000;
    const store::SharedTokenReply r = co_await store.shared_token(op);
    if (!r.answered) {
      // A store that is down leaves each gateway to fetch its own; one that is up but missed an
      // answer (a timeout, a failover's moment) is asked again, so that a blip does not make
      // every gateway ask the token endpoint.
      if (!store.health().up || Clock::now() >= give_up) {
        log_line("tollgate: warn: upstream '", self->upstream_,
                 "': the store did not answer for the fleet's OAuth2 token: this gateway fetches its own");
        co_return false;
      }
    } else {
      {
        std::lock_guard lock(self->mu_);
        if (!refused.empty() && self->refused_token_ == refused) self->refused_token_.clear();  // deleted there
      }
      const bool usable = !r.token.empty() && bearer_token(r.token) && r.ttl_ms > 0 && !self->refused_here(r.token);
      if (r.leased) {
        if (usable) self->offer(r.token, r.ttl_ms);
        co_await fetch_for_fleet(self, px, w);
        co_return true;
      }
      if (usable) {
        self->adopt(r.token, r.ttl_ms, r.lifetime_ms, r.due);
        co_return true;
      }
      if (r.failed_ms > 0) {
        // Another gateway's token request has just failed: its callers here get the 502 at once
        // too, until the fleet's next one may go.
        TokenAnswer a;
        a.why = "the fleet's last token request failed (another gateway's: its log says why)";
        self->settle(a, Clock::now(), false, Clock::now() + std::chrono::milliseconds(r.failed_ms));
        co_return true;
      }
      if (Clock::now() >= give_up) {
        TokenAnswer a;
        a.why = "another gateway's token request gave no token in time";
        self->settle(a, Clock::now(), false);
        co_return true;
      }
    }
    net::steady_timer t(*w.ctx);  // another gateway holds the lease: its token comes soon
    t.expires_after(std::chrono::milliseconds(100));
    beast::error_code ec;
    co_await t.async_wait(with(ec));
  }
}

void UpstreamAuth::offer(const std::string& token, std::int64_t ttl_ms) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  if (!token_field_.empty() && now < expires_) return;  // it has one
  token_field_ = std::string(kBearerPrefix) + token + "\r\n";
  expires_ = now + std::chrono::milliseconds(ttl_ms);
  wake_all();
}

bool UpstreamAuth::refused_here(const std::string& token) const {
  std::lock_guard lock(mu_);
  return token == refused_token_ || (suspect_ && token == token_of(token_field_));
}

void UpstreamAuth::adopt(const std::string& token, std::int64_t ttl_ms, std::int64_t lifetime_ms, bool due) {
  std::lock_guard lock(mu_);
  refreshing_ = false;
  if (token == refused_token_ || (suspect_ && token == token_of(token_field_))) {
    // Refused here while it was being read: not taken; the next request asks again.
    refresh_at_ = {};
    wake_all();
    return;
  }
  const auto now = Clock::now();
  std::string field = std::string(kBearerPrefix) + token + "\r\n";
  if (field != token_field_)
    last_refresh_unix_ =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  token_field_ = std::move(field);
  expires_ = now + std::chrono::milliseconds(ttl_ms);
  // Due already (another gateway is fetching the next): asked again shortly; else when the
  // fleet's token is due by the same rule as a token of its own.
  const auto before = std::min<Clock::duration>(std::chrono::seconds(conf_.refresh_before_s),
                                                std::chrono::milliseconds(lifetime_ms) / 2);
  refresh_at_ = due ? now + std::chrono::milliseconds(250) : expires_ - before;
  metrics_->ttl_seconds->Set(static_cast<double>(ttl_ms) / 1000.0);
  failed_until_ = {};
  suspect_ = false;
  wake_all();
}

AuthView UpstreamAuth::status() const {
  AuthView s;
  s.type = conf_.type == config::AuthType::header ? "header" : "oauth2_client_credentials";
  if (!oauth2()) return s;
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  if (!token_field_.empty() && now < expires_)
    s.expires_in_s = std::chrono::duration_cast<std::chrono::seconds>(expires_ - now).count();
  s.last_refresh_unix = last_refresh_unix_;
  s.failures = failures_;
  s.last_error = last_error_;
  return s;
}

void UpstreamAuth::refresh_gauge() const {
  if (!oauth2()) return;
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  const double left = !token_field_.empty() && now < expires_
                          ? std::chrono::duration<double>(expires_ - now).count()
                          : 0.0;
  metrics_->ttl_seconds->Set(left);
}

}  // namespace tollgate::proxy

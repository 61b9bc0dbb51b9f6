// Internal to the proxy: the credential the gateway sends a supplier (upstreams.<name>.auth). A
// static field (type "header"), or an OAuth2 Bearer token (client credentials, RFC 6749 4.4)
// fetched from the token URL through the upstream machinery (its internal upstream
// "<name>.token": resolver, TLS profile, pooled connections), held by all workers, refreshed
// before it expires with one request in flight at a time, never faster than token_rate.
// Callers never choose the credential: their own field of that name is dropped (upstream.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http_io.hpp"
#include "tollgate/config/gateway_config.hpp"
#include "tollgate/limiter/adaptive_rate.hpp"
#include "tollgate/proxy/metrics.hpp"
#include "tollgate/proxy/proxy_server.hpp"

namespace tollgate::proxy {

struct ProxyContext;
struct Worker;

// A token endpoint's answer read (RFC 6749 5.1 and 5.2): a Bearer token and its lifetime, or why not.
struct TokenAnswer {
  enum Result : std::size_t { ok, rejected, invalid, failed };  // as AuthMetrics::kResults
  Result result = failed;
  std::string token;
  std::chrono::seconds lifetime{0};
  std::string why;  // never holds the token or the body (only an RFC 6749 error code)
};
TokenAnswer read_token_answer(int status, std::string_view body);

class UpstreamAuth : public std::enable_shared_from_this<UpstreamAuth> {
 public:
  using Clock = std::chrono::steady_clock;
  UpstreamAuth(const config::UpstreamConfig& up, Metrics& metrics);
  UpstreamAuth(const UpstreamAuth&) = delete;
  UpstreamAuth& operator=(const UpstreamAuth&) = delete;

  bool oauth2() const { return conf_.type == config::AuthType::oauth2_client_credentials; }
  // The field it sets ("Authorization" for oauth2); a caller's field of this name is not forwarded.
  std::string_view field_name() const { return field_name_; }
  // type "header": the whole field line, "Name: value\r\n".
  const std::string& static_field() const { return static_field_; }

  // oauth2: the field line "Authorization: Bearer <token>\r\n", waiting (a timer) up to `by` for
  // a token when none is valid. A token within refresh_before_s of its expiry is still given, and
  // one refresh starts on `w`. Empty: none could be had by `by`, or the token endpoint has just
  // failed (the request is not forwarded). `refused`: a field the supplier answered 401 to, which
  // is not given again (its request waits for the next token).
  net::awaitable<std::string> field(ProxyContext& px, Worker& w, Deadline by, std::string_view refused = {});
  // The supplier answered 401 to a request sent with `field`: if it is still the current token,
  // a new one is fetched at once (the current one serves the other requests until it comes, and
  // is dropped if none does).
  void purge(std::string_view field);
  // The evidence rule of the adaptive rate (limiter/adaptive_rate.hpp's CallerPair): callers are
  // noted as they send requests with the token (`caller`: limiter::caller_id of the address
  // X-Real-IP carries), and a 401 to `field` replaces the token (purge) only when callers of two
  // addresses were refused with it within 2 s, or the refused caller is the only one asking.
  // Otherwise the 401 is that caller's own (its account, its entitlement): it goes to the caller,
  // the token stays, and it is counted. True: purged (or replaced already), send again.
  void note_caller(std::uint64_t caller);
  bool confirm_401(std::string_view field, std::uint64_t caller);

  // For the console and /admin: no secret, no token.
  AuthView status() const;
  // Sets the time-to-live gauge from the current token (for /metrics).
  void refresh_gauge() const;

 private:
  struct Waiter;
  struct Parked;
  // The one token request in flight (after the token bucket's wait), then every waiter woken.
  static net::awaitable<void> refresh(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w);
  static net::awaitable<void> refresh_steps(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w);
  // With a shared store: the fleet's token, or this gateway's turn to fetch it. False: the store
  // could not answer (the caller fetches its own).
  static net::awaitable<bool> from_fleet(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w);
  // The fleet lease's holder: asks the token endpoint and puts the answer in the store.
  static net::awaitable<void> fetch_for_fleet(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w);
  // Whether `w`'s running table still holds this credential (unchanged since it was made).
  bool current_in(const Worker& w) const;
  // One request to the token endpoint, in the token bucket's turn (`sent`: when it went).
  static net::awaitable<TokenAnswer> request_token(std::shared_ptr<UpstreamAuth> self, ProxyContext& px, Worker& w,
                                                   Clock::time_point& sent);
  // A refresh's end: the token it got, or its failure (a token request's when `counted`: in the
  // metric and `failures`), standing until `failed_until` (default: the next token request's
  // turn); every waiter woken.
  void settle(const TokenAnswer& a, Clock::time_point sent, bool counted,
              std::optional<Clock::time_point> failed_until = std::nullopt);
  // A refresh's end with the fleet's token (a shared store), `ttl_ms` of it left.
  void adopt(const std::string& token, std::int64_t ttl_ms, std::int64_t lifetime_ms, bool due);
  // The fleet's token, still valid, while this gateway fetches the next: used meanwhile if this
  // gateway has none (the refresh goes on).
  void offer(const std::string& token, std::int64_t ttl_ms);
  // Whether the supplier refused `token` here (a 401 not yet purged).
  bool refused_here(const std::string& token) const;
  void wake_all();  // under mu_

  const config::UpstreamAuthConfig conf_;
  const std::string upstream_;
  std::string field_name_;
  std::string static_field_;
  std::string form_;          // the token request's body
  std::string basic_field_;   // "Authorization: Basic ...\r\n" (auth_style basic)
  AuthMetrics* metrics_ = nullptr;
  std::string holder_;        // who this is in the fleet's lease (random)
  std::string fleet_name_;    // "<upstream>:<fingerprint of the credential's settings>": its shared key

  mutable std::mutex mu_;
  std::string token_field_;   // "" none
  Clock::time_point expires_{};
  Clock::time_point refresh_at_{};    // a request from then on starts a refresh
  Clock::time_point next_request_{};  // the token endpoint's bucket (token_rate, burst 1)
  Clock::time_point failed_until_{};
  std::string refused_token_;         // one the supplier answered 401 to, for the next refresh to purge
  limiter::CallerPair asked_;         // callers of requests sent with a token
  limiter::CallerPair refused_401_;   // callers answered 401 with refused_for_
  std::string refused_for_;           // the token field those 401s were to
  bool suspect_ = false;              // the current token was answered 401: dropped if no other comes  // after a failed token request: until the next may go
  bool refreshing_ = false;
  std::vector<std::shared_ptr<Waiter>> waiters_;
  std::int64_t last_refresh_unix_ = 0;
  std::uint64_t failures_ = 0;
  std::string last_error_;
};

}  // namespace tollgate::proxy

#include "tollgate/admin/admin_api.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <map>
#include <set>

#include "tollgate/admin/console_assets.hpp"
#include "tollgate/limiter/clock.hpp"
#include "tollgate/proxy/rate_headers.hpp"
#include "tollgate/proxy/throttle.hpp"
#include "tollgate/store/metric_series.hpp"
#include "tollgate/log_line.hpp"

namespace tollgate::admin {

using nlohmann::json;

namespace {
SimpleResponse ok_json(const json& j) { return {200, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"}; }
SimpleResponse error(int status, std::string_view code, std::string_view detail) {
  return {status, proxy::error_body(code, detail) + "\n"};
}
std::string_view query_of(std::string_view target) {
  const auto q = target.find('?');
  return q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
}
// A query parameter as a whole non-negative number: nullopt when absent, `bad` set when present
// but not a number.
std::optional<std::uint64_t> query_number(std::string_view query, std::string_view name, bool& bad) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (!part.starts_with(name) || part.size() <= name.size() || part[name.size()] != '=') continue;
    const std::string_view value = part.substr(name.size() + 1);
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size()) {
      bad = true;
      return std::nullopt;
    }
    return n;
  }
  return std::nullopt;
}
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
// Every value of a query parameter, percent-decoded ('+' as a space); `bad` set on a bad escape.
std::vector<std::string> query_values(std::string_view query, std::string_view name, bool& bad) {
  std::vector<std::string> out;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (!part.starts_with(name) || part.size() < name.size() + 1 || part[name.size()] != '=') continue;
    const std::string_view raw = part.substr(name.size() + 1);
    std::string v;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        v += ' ';
      } else if (raw[i] == '%') {
        const bool room = i + 2 < raw.size();
        const int hi = room ? hex_digit(raw[i + 1]) : -1, lo = room ? hex_digit(raw[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
          bad = true;
          return {};
        }
        v += static_cast<char>(hi * 16 + lo);
        i += 2;
      } else {
        v += raw[i];
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}
std::string lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

AdminApi::AdminApi(AdminDeps deps)
    : deps_(std::move(deps)),
      clock_(deps_.clock ? *deps_.clock : static_cast<const limiter::Clock&>(steady_)),
      auth_failures_(store::counter(deps_.metrics.registry, "tollgate_admin_auth_failures_total",
                                    "Admin requests refused for a missing or wrong token.")),
      auth_lockouts_(store::counter(deps_.metrics.registry, "tollgate_admin_auth_lockouts_total",
                                    "Peers locked out of the admin token check for spending their failure budget.")),
      auth_refused_locked_(store::counter(deps_.metrics.registry, "tollgate_admin_auth_throttled_total",
                                          "Admin requests answered 429 without checking their token, by reason.",
                                          {{"reason", "locked_out"}})),
      auth_refused_global_(store::counter(deps_.metrics.registry, "tollgate_admin_auth_throttled_total",
                                          "Admin requests answered 429 without checking their token, by reason.",
                                          {{"reason", "global_budget"}})),
      debts_(prometheus::BuildGauge()
                 .Name("tollgate_bucket_debt_seconds")
                 .Help("How far the bucket's next free slot is ahead of now.")
                 .Register(deps_.metrics.registry)) {}

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Compare over the longer length so neither content nor a prefix match shows in the timing.
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

namespace {
void refill(double& tokens, limiter::Micros& at, double per_s, double burst, limiter::Micros now) {
  if (now > at) tokens = std::min(burst, tokens + static_cast<double>(now - at) * per_s / 1e6);
  at = std::max(at, now);
}
limiter::Micros wait_for_one(double tokens, double per_s) {
  return tokens >= 1 ? 0 : static_cast<limiter::Micros>(std::ceil((1 - tokens) / per_s * 1e6));
}
}  // namespace

void AuthBudget::refill_global(limiter::Micros now) {
  if (global_at_ == 0) global_at_ = now;
  refill(global_tokens_, global_at_, limits_.global_per_s, limits_.global_burst, now);
}

AuthBudget::Peer* AuthBudget::find_or_make(const std::string& peer, limiter::Micros now) {
  if (auto it = peers_.find(peer); it != peers_.end()) return &it->second;
  if (peers_.size() >= limits_.max_peers) {
    // Forget the peers that are neither locked out, trusted, nor recently failing.
    for (auto it = peers_.begin(); it != peers_.end();) {
      const Peer& p = it->second;
      const bool stale = p.locked_until <= now && p.trusted_until <= now && now - p.last_failure > limits_.max_lockout_us;
      it = stale ? peers_.erase(it) : std::next(it);
    }
    if (peers_.size() >= limits_.max_peers) return nullptr;
  }
  Peer& p = peers_[peer];
  p.tokens = limits_.peer_burst;
  p.at = now;
  return &p;
}

AuthBudget::Admission AuthBudget::admit(const std::string& peer, limiter::Micros now) {
  std::lock_guard lock(mu_);
  const auto it = peers_.find(peer);
  const Peer* p = it == peers_.end() ? nullptr : &it->second;
  if (p && p->locked_until > now) return {Verdict::locked_out, p->locked_until - now};
  refill_global(now);
  if (global_tokens_ < 1 && !(p && p->trusted_until > now))
    return {Verdict::throttled, wait_for_one(global_tokens_, limits_.global_per_s)};
  return {};
}

limiter::Micros AuthBudget::failed(const std::string& peer, limiter::Micros now) {
  std::lock_guard lock(mu_);
  refill_global(now);
  global_tokens_ = std::max(0.0, global_tokens_ - 1);
  Peer* p = find_or_make(peer, now);
  if (!p) return 0;  // too many peers to remember: the global budget alone holds
  refill(p->tokens, p->at, limits_.peer_per_s, limits_.peer_burst, now);
  if (p->level > 0 && now - p->last_failure > limits_.max_lockout_us) p->level = 0;  // quiet long enough
  p->last_failure = now;
  p->trusted_until = 0;
  p->tokens = std::max(0.0, p->tokens - 1);
  if (p->tokens >= 1) return 0;
  // Its budget is spent: locked out, twice as long as the last time.
  const limiter::Micros lockout = std::min(limits_.max_lockout_us, limits_.lockout_us << std::min(p->level, 20));
  ++p->level;
  p->locked_until = now + lockout;
  // Nothing comes back while locked out: one try when it ends, and a wrong one doubles the next.
  p->tokens = 0;
  p->at = p->locked_until;
  return lockout;
}

void AuthBudget::succeeded(const std::string& peer, limiter::Micros now) {
  std::lock_guard lock(mu_);
  Peer* p = find_or_make(peer, now);
  if (!p) return;
  p->tokens = limits_.peer_burst;
  p->at = now;
  p->level = 0;
  p->locked_until = 0;
  p->trusted_until = now + limits_.trusted_us;
}

std::optional<SimpleResponse> AdminApi::authorize(const SimpleRequest& req) {
  if (deps_.token.empty())
    return error(403, "read_only", "no admin token is configured: the admin API is read-only");
  const std::int64_t now = clock_.now_us();
  const std::string peer = req.peer.empty() ? "?" : req.peer;
  // Over budget: answered without looking at the token, so that guessing learns nothing.
  if (const AuthBudget::Admission a = auth_budget_.admit(peer, now); a.verdict != AuthBudget::Verdict::check) {
    const bool locked = a.verdict == AuthBudget::Verdict::locked_out;
    (locked ? auth_refused_locked_ : auth_refused_global_).Increment();
    const std::int64_t retry_s = std::max<std::int64_t>(1, (a.retry_after_us + 999'999) / 1'000'000);
    SimpleResponse refused =
        error(429, locked ? "auth_locked_out" : "auth_throttled",
              locked ? "too many wrong tokens from " + peer + ": locked out for " + std::to_string(retry_s) + " s"
                     : "too many wrong admin tokens from all clients: try again in " + std::to_string(retry_s) + " s");
    refused.headers.emplace_back("Retry-After", std::to_string(retry_s));
    if (now - last_refusal_log_us_ >= kFailureLogIntervalUs || last_refusal_log_us_ == 0) {
      last_refusal_log_us_ = now;
      log_line("tollgate: warn: admin token not checked for ", peer, " (", req.method, " ", proxy::path_of(req.target),
               "): ", (locked ? "locked out" : "the global failure budget is spent"), " for ", retry_s, " s");
    }
    return refused;
  }
  constexpr std::string_view scheme = "Bearer ";
  const std::string_view auth = req.authorization;
  const bool has_bearer = auth.size() > scheme.size() && auth.substr(0, scheme.size()) == scheme;
  if (has_bearer && constant_time_equals(auth.substr(scheme.size()), deps_.token)) {
    auth_budget_.succeeded(peer, now);
    return std::nullopt;
  }
  SimpleResponse denied = error(401, "unauthorized", has_bearer ? "wrong token" : "missing 'Authorization: Bearer <token>'");
  denied.delay_ms = kFailedAuthDelayMs;
  auth_failures_.Increment();
  const limiter::Micros lockout = auth_budget_.failed(peer, now);
  if (lockout > 0) auth_lockouts_.Increment();
  const auto n = static_cast<std::uint64_t>(auth_failures_.Value());
  // Logged, but at most once per interval: a guessing run must not flood the log either.
  if (now - last_failure_log_us_ >= kFailureLogIntervalUs || last_failure_log_us_ == 0) {
    last_failure_log_us_ = now;
    log_line("tollgate: warn: admin authentication failed from ", peer, " (", req.method, " ",
             proxy::path_of(req.target), ", ", (has_bearer ? "wrong token" : "no bearer token"), "); ", n,
             " failed attempts since start",
             lockout > 0 ? "; locked out for " + std::to_string((lockout + 999'999) / 1'000'000) + " s" : std::string());
  }
  return denied;
}

bool AdminApi::runs_inline(const SimpleRequest& req) {
  const std::string_view path = proxy::path_of(req.target);
  return path == "/healthz" || path == "/readyz";
}

SimpleResponse AdminApi::handle(const SimpleRequest& req) {
  const std::string_view path = proxy::path_of(req.target);
  const bool get = req.method == "GET";
  if (path == "/healthz") return get ? ok_json({{"status", "ok"}}) : error(405, "method_not_allowed", "use GET");
  if (path == "/readyz") return get ? readyz() : error(405, "method_not_allowed", "use GET");
  if (path == "/metrics") {
    if (!get) return error(405, "method_not_allowed", "use GET");
    return {200, metrics_text(), "text/plain; version=0.0.4"};
  }
  if (path == "/admin/reload") {
    if (req.method != "POST") return error(405, "method_not_allowed", "use POST");
    if (auto denied = authorize(req)) return *denied;
    return post_reload();
  }
  if (path == "/admin/tls/reload") {
    if (req.method != "POST") return error(405, "method_not_allowed", "use POST");
    if (auto denied = authorize(req)) return *denied;
    return post_tls_reload();
  }
  if (path == "/admin/rules") return get ? get_rules() : error(405, "method_not_allowed", "use GET");
  constexpr std::string_view rules_prefix = "/admin/rules", reset_suffix = "/adaptive/reset";
  if (path.starts_with("/admin/rules/") && path.ends_with(reset_suffix)) {
    if (req.method != "POST") return error(405, "method_not_allowed", "use POST");
    if (auto denied = authorize(req)) return *denied;
    // The bucket keeps its leading '/': names are URLs.
    return post_adaptive_reset(path.substr(rules_prefix.size(), path.size() - rules_prefix.size() - reset_suffix.size()),
                               req);
  }
  if (path == "/admin/switch") {
    if (get) return get_switch();
    if (req.method == "PUT") {
      if (auto denied = authorize(req)) return *denied;
      return put_switch(req);
    }
    return error(405, "method_not_allowed", "use GET or PUT");
  }
  if (path == "/admin/overview") return get ? get_overview(query_of(req.target)) : error(405, "method_not_allowed", "use GET");
  if (path == "/admin/history") return get ? get_history(query_of(req.target)) : error(405, "method_not_allowed", "use GET");
  if (path == "/admin/refusals") return get ? get_refusals(query_of(req.target)) : error(405, "method_not_allowed", "use GET");
  if (path == "/" || path == "/ui" || path.starts_with("/ui/")) {
    if (!get) return error(405, "method_not_allowed", "use GET");
    if (auto asset = console_asset(path)) return {200, std::string(asset->body), std::string(asset->content_type)};
    return error(404, "not_found", "no such console file");
  }
  constexpr std::string_view buckets = "/admin/buckets/";
  if (path.starts_with(buckets)) {
    if (!get) return error(405, "method_not_allowed", "use GET");
    return get_bucket(path.substr(buckets.size() - 1));  // keep the leading '/': names are URLs
  }
  return error(404, "not_found", "no such admin endpoint");
}

namespace {
json status_json(const config::SourceStatus& st) {
  const std::int64_t now = config::SwitchState::now_ms();
  return {{"source", st.source},
          {"healthy", st.healthy},
          {"using_fallback", st.using_fallback},
          {"last_error", st.last_error},
          {"last_success_age_s", st.last_success_ms ? static_cast<double>(now - st.last_success_ms) / 1e3 : -1.0},
          {"loads_ok", st.loads_ok},
          {"loads_failed", st.loads_failed},
          {"rejected_rows", st.rejected_rows}};
}
// What an adaptive rule's bucket does now (docs/adaptive-and-deadlines.md), as this gateway last heard it from the store:
// the rate it decides at, the pause still to run, its episodes and the last cut.
json adaptive_state_json(proxy::BucketMetrics& bm) {
  json out = {{"effective_rate", nullptr}, {"paused_ms", 0}, {"cuts", 0}, {"pauses", 0},
              {"paused_rejections", 0}, {"unconfirmed", 0}, {"upstream_throttled", bm.upstream_throttled_total()},
              {"last_cut", nullptr}};
  if (const proxy::AdaptiveSeries* a = bm.adaptive_seen()) {
    out["effective_rate"] = a->effective_rate.Value();
    out["cuts"] = a->cuts.Value();
    out["pauses"] = a->pauses.Value();
    out["paused_rejections"] = a->paused_rejections.Value();
    out["unconfirmed"] = a->unconfirmed.Value();
  }
  const std::int64_t left = bm.pause_until_us.load(std::memory_order_relaxed) - limiter::steady_now_us();
  if (left > 0) out["paused_ms"] = (left + 999) / 1000;
  const proxy::AdaptiveEvent e = bm.last_event();
  if (!e.cause.empty())
    out["last_cut"] = {{"cause", e.cause}, {"from", e.from}, {"to", e.to}, {"at_ms", e.at_ms}, {"pause_ms", e.pause_ms}};
  // Where the supplier's one-second windows start within the wall clock's second, as this gateway
  // learned it from its refusals (null: not yet; pauses then end on whole seconds).
  const std::int64_t phase = bm.window_phase_us();
  out["window_phase_ms"] = phase < 0 ? json(nullptr) : json(static_cast<double>(phase) / 1e3);
  out["supplier"] = nullptr;  // what its rate-limit fields advertise, once an answer carried them
  if (const proxy::SupplierSeries* s = bm.supplier_seen())
    out["supplier"] = {{"remaining", s->remaining.Value()}, {"limit", s->limit.Value()}, {"ignored", s->ignored.Value()}};
  return out;
}
}  // namespace

SimpleResponse AdminApi::readyz() const {
  auto snap = deps_.snapshots.get();
  const bool draining = deps_.draining && deps_.draining->load();
  const bool ready = snap != nullptr && !draining;
  json j = {{"ready", ready}, {"draining", draining}};
  if (snap) j["config_age_s"] = static_cast<double>(limiter::steady_now_us() - snap->loaded_at_us) / 1e6;
  // Still ready when the source is down: the last good rules keep being enforced. Said here.
  if (deps_.config) j["config_source"] = status_json(deps_.config->status());
  // Still ready with an upstream unresolved: the other upstreams serve, and every instance shares
  // the same DNS, so taking this one out of a load balancer would help no request. Said here.
  json unresolved = json::array();
  if (deps_.upstreams_view)
    for (const auto& u : deps_.upstreams_view())
      if (!u.resolved) unresolved.push_back(u.name);
  j["unresolved_upstreams"] = std::move(unresolved);
  return {ready ? 200 : 503, j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

std::string AdminApi::metrics_text() {
  prometheus::Registry& registry = deps_.metrics.registry;
  if (deps_.refresh_endpoint_gauges) deps_.refresh_endpoint_gauges();
  deps_.store.publish_metrics(registry);
  publish_debts();
  store::gauge(registry, "tollgate_switch_enabled", "Global limiting switch (1 enforcing, 0 off).")
      .Set(deps_.switch_state.enabled() ? 1 : 0);
  store::gauge(registry, "tollgate_switch_state", "Global switch: 1 enforce, 0 off, 2 shadow.")
      .Set(static_cast<int>(deps_.switch_state.mode()));
  if (deps_.config) {
    const config::SourceStatus st = deps_.config->status();
    auto snap = deps_.snapshots.get();
    const char* loads_help = "Config loads from the source by result.";
    store::advance_to(store::counter(registry, "tollgate_config_loads_total", loads_help, {{"result", "ok"}}),
                      static_cast<double>(st.loads_ok));
    store::advance_to(store::counter(registry, "tollgate_config_loads_total", loads_help, {{"result", "failed"}}),
                      static_cast<double>(st.loads_failed));
    store::gauge(registry, "tollgate_config_rejected_rows", "Rule rows rejected in the active config.")
        .Set(static_cast<double>(st.rejected_rows));
    store::gauge(registry, "tollgate_config_source_up", "Whether the last read of the config source succeeded.")
        .Set(st.healthy ? 1 : 0);
    store::gauge(registry, "tollgate_config_version", "Version of the active rule snapshot.")
        .Set(static_cast<double>(snap ? snap->version : 0));
  }
  return deps_.metrics.render();
}

// How far each bucket's next free slot is ahead of now (its queue, in seconds), read from the store.
void AdminApi::publish_debts() {
  std::map<std::string, prometheus::Gauge*, std::less<>> shown;
  if (auto snap = deps_.snapshots.get()) {
    std::vector<const config::Rule*> rules;
    std::vector<store::BucketProbe> probes;
    for (const auto& r : snap->rules) {
      if (!r.enabled) continue;
      const config::Rule* channel = r.channel ? &r : snap->channel_of(r);
      rules.push_back(&r);
      probes.push_back({{r.bucket, r.params},
                        channel ? std::string_view(channel->channel_type) : std::string_view(r.bucket)});
    }
    // All of them in one read: one store round trip (or one timeout) per scrape, not one per rule.
    const auto views = deps_.store.inspect_many(probes);
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const auto& v = views[i];
      if (!v) continue;
      const double debt = static_cast<double>(std::max<limiter::Micros>(0, v->next_free - v->now)) / 1e6;
      prometheus::Gauge* g = &debts_.Add({{"bucket", rules[i]->bucket}});
      g->Set(debt);
      shown.emplace(rules[i]->bucket, g);
    }
  }
  // A bucket not read this time (its rule is gone, or the store stopped answering) is left out:
  // a stale debt would mislead.
  for (const auto& [bucket, g] : debt_series_)
    if (!shown.contains(bucket)) debts_.Remove(g);
  debt_series_ = std::move(shown);
}

SimpleResponse AdminApi::post_reload() {
  if (!deps_.config) return error(501, "not_supported", "no reloadable config source");
  const config::ReloadResult r = deps_.config->reload();
  if (!r.ok) {
    json j = {{"error", "reload_failed"}, {"detail", r.error}, {"active_version", r.version}};
    return {503, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"};
  }
  json out = json::parse(get_rules().body);
  out["reloaded"] = true;
  return ok_json(out);
}

namespace {
// A meter rule's algorithm and numbers, as its row gives them.
json meter_json(const config::Meter& m) {
  json j = {{"algorithm", m.algorithm()}, {"yellow", m.wait_green ? "wait" : "forward"}};
  if (m.two_rate) {
    j.update({{"cir", m.tr.cir}, {"cbs", m.tr.cbs}, {"pir", m.tr.pir}, {"pbs", m.tr.pbs}});
  } else {
    j.update({{"cir", m.sr.cir}, {"cbs", m.sr.cbs}, {"ebs", m.sr.ebs}});
  }
  return j;
}
}  // namespace

SimpleResponse AdminApi::get_rules() const {
  auto snap = deps_.snapshots.get();
  if (!snap) return error(503, "no_config", "no configuration has been loaded");
  json rules = json::array();
  for (const auto& r : snap->rules) {
    json j = {{"configId", r.config_id},     {"channelType", r.channel_type}, {"interfaceNo", r.interface_no},
              {"interfaceUrl", r.interface_url}, {"status", r.enabled ? 1 : 0}};
    if (r.has_bucket) {
      j["rateLimit"] = r.rate_limit;
      j["cache"] = r.cache_s;
      j["burst"] = limiter::shape_of(r.params).max_permits;
    } else if (r.meter) {
      j["rateLimit"] = nullptr;  // a meter: its rates are under "meter"
      j["cache"] = r.cache_s;    // the window a "yellow": "wait" request may be held
    } else {
      j["rateLimit"] = nullptr;  // quotas only
    }
    if (r.key_by.kind != config::KeySpec::Kind::none) j["keyBy"] = r.key_by.text();
    if (r.max_share) {
      j["maxShare"] = *r.max_share;
      j["maxWaitingPerClient"] = r.max_held_per_client;
      j["maxShareKeyBy"] = r.share_key.text();
    }
    if (!r.quotas.empty()) {
      json qs = json::array();
      for (const auto& q : r.quotas)
        qs.push_back({{"quotaId", q.quota_id}, {"policy", q.name}, {"periodSeconds", q.period_s}, {"limitCount", q.limit},
                      {"algorithm", q.algorithm == limiter::WindowAlgorithm::sliding ? "sliding" : "fixed"},
                      {"keyBy", q.key_by.text()}});
      j["quotas"] = std::move(qs);
    }
    if (const std::string policies = proxy::request_policies(r, r.enabled ? snap->channel_of(r) : nullptr); !policies.empty())
      j["policies"] = policies;
    if (r.params.warmup_us > 0) j["warmupSeconds"] = static_cast<double>(r.params.warmup_us) / 1e6;
    if (!r.channel && (r.has_bucket || r.meter)) j["cost"] = r.cost;
    if (r.meter) j["meter"] = meter_json(*r.meter);
    if (!r.channel && !r.channel_type.empty()) j["channelCost"] = r.channel_cost;
    if (r.priority) j["priority"] = json::parse(r.priority->text);
    j["scope"] = r.channel ? "channel" : "interface";
    if (!r.channel) j["matchCase"] = r.match_case == config::MatchCase::insensitive ? "insensitive" : "sensitive";
    j["bucket"] = r.bucket;
    j["adaptive"] = limiter::adaptive_name(r.adaptive);
    if (r.adaptive != limiter::Adaptive::off) j["adaptive_state"] = adaptive_state_json(deps_.metrics.bucket(r.bucket));
    rules.push_back(std::move(j));
  }
  json rejected = json::array();
  for (const auto& b : snap->rejected) {
    json j = {{"origin", b.origin}, {"field", b.field}, {"reason", b.reason}, {"message", b.message()}};
    if (b.config_id) j["configId"] = *b.config_id;
    if (b.quota_id) j["quotaId"] = *b.quota_id;
    j["kept_previous"] = b.kept_previous;
    rejected.push_back(std::move(j));
  }
  const double age_s = static_cast<double>(limiter::steady_now_us() - snap->loaded_at_us) / 1e6;
  json out = {{"version", snap->version},
              {"source", snap->source},
              {"age_s", age_s},
              {"rules", rules},
              {"rejected", rejected}};
  if (deps_.config) out["config_source"] = status_json(deps_.config->status());
  return ok_json(out);
}

SimpleResponse AdminApi::get_switch() const {
  const config::SwitchInfo s = deps_.switch_state.info();
  json j = {{"state", config::switch_mode_name(s.mode)},
            {"enabled", s.mode != config::SwitchMode::off},
            {"changed_by", s.changed_by},
            {"changed_at_ms", s.changed_at_ms},
            {"source", s.source}};
  if (s.revert_at_ms) {
    j["revert_at_ms"] = s.revert_at_ms;
    j["revert_to"] = config::switch_mode_name(s.revert_to);
  }
  return ok_json(j);
}

SimpleResponse AdminApi::put_switch(const SimpleRequest& req) {
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& e) {
    return error(400, "bad_json", std::string("body is not JSON: ") + e.what());
  }
  constexpr std::string_view usage =
      "body must be {\"state\": \"enforce\"|\"shadow\"|\"off\"} or {\"enabled\": true|false}, "
      "with an optional \"revert_after_s\" (1..86400)";
  if (!body.is_object()) return error(400, "bad_request", usage);
  std::optional<config::SwitchMode> mode;
  double revert_after_s = 0;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (k == "enabled" && it.value().is_boolean()) {
      mode = it.value().get<bool>() ? config::SwitchMode::enforce : config::SwitchMode::off;
    } else if (k == "state" && it.value().is_string() && config::parse_switch_mode(it.value().get<std::string>())) {
      mode = config::parse_switch_mode(it.value().get<std::string>());
    } else if (k == "revert_after_s" && it.value().is_number() && it.value().get<double>() >= 1 &&
               it.value().get<double>() <= 86400) {
      revert_after_s = it.value().get<double>();
    } else {
      return error(400, "bad_request", "field '" + k + "': " + std::string(usage));
    }
  }
  if (!mode) return error(400, "bad_request", usage);
  const std::string who = deps_.token_name.empty() ? "admin@" + req.peer : deps_.token_name;
  const auto revert_ms = static_cast<std::int64_t>(revert_after_s * 1000);
  config::SwitchMode old;
  if (deps_.switch_writer) {
    // Fleet-wide: the row and its audit row first; every instance (this one now) follows the row.
    try {
      const config::SwitchChange change = deps_.switch_writer->write_switch(*mode, who, revert_ms);
      old = change.previous;
      deps_.switch_state.set(*mode, change.now.changed_by, change.now.changed_at_ms, "mysql", change.now.revert_at_ms,
                             change.now.revert_to);
    } catch (const std::exception& e) {
      return error(503, "switch_store_unavailable", std::string("switch not changed: ") + e.what());
    }
  } else {
    const std::int64_t now = config::SwitchState::now_ms();
    const config::SwitchMode previous = deps_.switch_state.mode();
    old = deps_.switch_state.set(*mode, who, now, "admin", revert_ms ? now + revert_ms : 0, previous);
    if (revert_ms && deps_.schedule) {
      const std::uint64_t gen = deps_.switch_state.info().generation;
      config::SwitchState& sw = deps_.switch_state;
      deps_.schedule(revert_ms, [&sw, gen, previous] {
        if (sw.info().generation != gen) return;  // changed again since: that change stands
        sw.set(previous, "revert_after", config::SwitchState::now_ms(), "admin");
      });
    }
  }
  json out = json::parse(get_switch().body);
  out["previous"] = config::switch_mode_name(old);
  return ok_json(out);
}

SimpleResponse AdminApi::get_bucket(std::string_view name) const {
  auto snap = deps_.snapshots.get();
  const config::Rule* rule = snap ? snap->find_bucket(name) : nullptr;
  if (rule == nullptr && name.starts_with("/channel:")) rule = snap->find_bucket(name.substr(1));
  if (rule == nullptr) return error(404, "unknown_bucket", "no rule has the bucket " + std::string(name));
  // The same hash tag the proxy uses: the channel when the rule draws from one.
  const config::Rule* channel = rule->channel ? rule : snap->channel_of(*rule);
  auto view = deps_.store.inspect({rule->bucket, rule->params},
                                  channel ? std::string_view(channel->channel_type) : std::string_view(rule->bucket));
  if (!view) return error(503, "store_unavailable", "the bucket store did not answer");
  const double debt_s = static_cast<double>(std::max<limiter::Micros>(0, view->next_free - view->now)) / 1e6;
  return ok_json({{"bucket", rule->bucket},
                  {"store", deps_.store.name()},
                  {"rateLimit", rule->rate_limit},
                  {"max_permits", view->max_permits},
                  {"stored_permits", view->stored},
                  {"debt_s", debt_s},
                  {"tracked", view->tracked}});
}

// An operator's reset of what an adaptive bucket learned: the store forgets its cuts, pause and
// the supplier's advertised allowance (for the fleet, in a shared store), and this gateway what it
// had not told the store yet. Other gateways' unsent reports still arrive with their next decision.
SimpleResponse AdminApi::post_adaptive_reset(std::string_view name, const SimpleRequest& req) {
  auto snap = deps_.snapshots.get();
  const config::Rule* rule = snap ? snap->find_bucket(name) : nullptr;
  if (rule == nullptr) return error(404, "unknown_bucket", "no rule has the bucket " + std::string(name));
  if (rule->adaptive == limiter::Adaptive::off)
    return error(409, "not_adaptive", "the rule of " + rule->bucket + " is not adaptive: it has learned nothing");
  const config::Rule* channel = rule->channel ? rule : snap->channel_of(*rule);
  if (!deps_.store.reset_adaptive({rule->bucket, rule->params},
                                  channel ? std::string_view(channel->channel_type) : std::string_view(rule->bucket)))
    return error(503, "store_unavailable", "the bucket store did not answer");
  deps_.metrics.bucket(rule->bucket).forget_adaptive();
  log_line("tollgate: adaptive: ", rule->bucket, ": what it learned was reset by ",
           deps_.token_name.empty() ? req.peer : deps_.token_name);
  return ok_json({{"bucket", rule->bucket}, {"store", deps_.store.name()}, {"reset", true}});
}

namespace {
// Whole figures as whole numbers, others with three decimals (not a float's noise).
json rounded(double v) {
  const double r = std::round(v * 1000.0) / 1000.0;
  if (r == std::trunc(r) && std::abs(r) < 1e15) return static_cast<std::int64_t>(r);
  return r;
}
json opt(std::optional<double> v) { return v ? rounded(*v) : json(nullptr); }
json sample_json(const History::Sample& x) {
  auto n = [](float v) { return rounded(static_cast<double>(v)); };
  return {{"forwarded", n(x.forwarded)},
          {"delayed", n(x.delayed)},
          {"rejected", n(x.rejected)},
          {"shadow_rejected", n(x.shadow_rejected)},
          {"bypassed", n(x.bypassed)},
          {"store_error", n(x.store_error)},
          {"held", n(x.held)}};
}
SimpleResponse compact_json(const json& j) { return {200, j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"}; }
}  // namespace

AdminApi::Selection AdminApi::select(const config::Snapshot& snap, std::string_view query, std::size_t default_top) const {
  Selection out;
  out.total = snap.rules.size();
  bool bad = false;
  const std::vector<std::string> named = query_values(query, "bucket", bad);
  const std::vector<std::string> q = query_values(query, "q", bad);
  if (bad) {
    out.error = "bucket, q: a bad %-escape";
    return out;
  }
  const auto top = query_number(query, "top", bad);
  if (bad || (top && (*top < 1 || *top > kMaxTop))) {
    out.error = "top: must be a whole number from 1 to " + std::to_string(kMaxTop);
    return out;
  }
  const std::string needle = q.empty() ? std::string() : lowered(q.back());
  const std::set<std::string, std::less<>> named_set(named.begin(), named.end());
  std::vector<std::pair<double, const config::Rule*>> matched;
  const auto activity = deps_.history ? deps_.history->activity() : std::map<std::string, double, std::less<>>{};
  for (const auto& r : snap.rules) {
    if (!named.empty() && !named_set.contains(r.bucket)) continue;
    if (!needle.empty() && lowered(r.bucket).find(needle) == std::string::npos &&
        lowered(r.channel_type).find(needle) == std::string::npos)
      continue;
    const auto a = activity.find(r.bucket);
    matched.emplace_back(a == activity.end() ? 0.0 : a->second, &r);
  }
  out.matched = matched.size();
  // Named buckets: all of them unless ?top= says otherwise; otherwise the default's busiest.
  const std::size_t n = std::min<std::size_t>(matched.size(), top ? *top : named.empty() ? default_top : matched.size());
  auto busier = [](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first > y.first;
    return x.second->bucket < y.second->bucket;
  };
  std::partial_sort(matched.begin(), matched.begin() + static_cast<std::ptrdiff_t>(n), matched.end(), busier);
  out.rules.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.rules.push_back(matched[i].second);
  return out;
}

namespace {
// The store's health: which store, whether it is up, its incidents and nodes.
json store_json(const store::StoreHealth& h) {
  json nodes = json::array();
  for (const auto& [node, up] : h.nodes) nodes.push_back({{"node", node}, {"up", up}});
  return {{"name", h.name},
          {"shared", h.shared},
          {"up", h.up},
          {"incidents", h.incidents},
          {"live_instances", h.live_instances},
          {"last_error", h.last_error},
          {"failure_policy", h.failure_policy},
          {"policy_decisions", h.policy_decisions},
          {"nodes", std::move(nodes)}};
}

// A priority-classed rule's classes, highest first: their reserves and their requests by outcome.
json priority_json(const config::Priority& pr, proxy::BucketMetrics& bm) {
  json classes = json::array();
  std::map<std::string, json, std::less<>> counts;
  bm.each_class([&](const std::string& name, const proxy::ClassSeries& c) {
    json o = json::object();
    for (std::size_t i = 0; i < proxy::kOutcomes; ++i)
      if (const double n = c.total(static_cast<proxy::Outcome>(i)); n > 0)
        o[proxy::outcome_name(static_cast<proxy::Outcome>(i))] = n;
    counts[name] = std::move(o);
  });
  for (std::size_t i = 0; i < pr.classes.size(); ++i) {
    const std::string& name = pr.classes[i];
    const auto c = counts.find(name);
    classes.push_back({{"class", name},
                       {"reserve", pr.reserve[i]},
                       {"keeps", pr.keep[i]},
                       {"default", i == pr.default_class},
                       {"requests", c == counts.end() ? json::object() : c->second}});
  }
  return {{"by", pr.by == config::Priority::By::method ? "method" : "header:" + pr.header}, {"classes", std::move(classes)}};
}

// One listed bucket: its rule's numbers, its stored permits and debt (`view`, null when not read),
// its upstream's response time, its meter, classes and adaptive state, its last second and
// minute, and whether it is saturated.
json bucket_json(const AdminDeps& deps, const config::Rule& r, const std::optional<store::BucketSnapshot>* view) {
  json b = {{"bucket", r.bucket},
            {"configId", r.config_id},
            {"channelType", r.channel_type},
            {"scope", r.channel ? "channel" : "interface"},
            {"status", r.enabled ? 1 : 0},
            {"cache_s", r.cache_s}};
  if (r.has_bucket) {
    b["rateLimit"] = r.rate_limit;
    b["burst"] = limiter::shape_of(r.params).max_permits;
  } else if (r.meter) {
    b["rateLimit"] = r.rate_limit;  // its committed rate, as the console shows it
    b["burst"] = r.meter->committed_burst();
  } else {
    b["rateLimit"] = nullptr;
    b["burst"] = nullptr;
  }
  if (r.key_by.kind != config::KeySpec::Kind::none) b["keyBy"] = r.key_by.text();
  b["stored_permits"] = nullptr;
  b["debt_s"] = nullptr;
  if (view && *view) {
    const auto& v = *view;
    b["stored_permits"] = v->stored;
    b["debt_s"] = static_cast<double>(std::max<limiter::Micros>(0, v->next_free - v->now)) / 1e6;
  }
  proxy::BucketMetrics& bm = deps.metrics.bucket(r.bucket);
  // Its upstream's response time (p90, last minute): what deadline admission reckons with.
  const auto p90 = bm.upstream_latency.p90_us(limiter::steady_now_us());
  b["upstream_p90_ms"] = p90 ? json(static_cast<double>(*p90) / 1e3) : json(nullptr);
  if (r.meter) {
    json m = meter_json(*r.meter);
    m["requests"] = {{"green", bm.color_total(limiter::Color::green)},
                     {"yellow", bm.color_total(limiter::Color::yellow)},
                     {"red", bm.color_total(limiter::Color::red)}};
    b["meter"] = std::move(m);
  }
  if (r.priority) b["priority"] = priority_json(*r.priority, bm);
  b["adaptive"] = limiter::adaptive_name(r.adaptive);
  if (r.adaptive != limiter::Adaptive::off) b["adaptive_state"] = adaptive_state_json(bm);
  bool saturated = false;
  if (deps.history) {
    if (auto w = deps.history->window(r.bucket)) {
      b["held"] = w->last.held;
      b["last_second"] = sample_json(w->last);
      b["last_minute"] = sample_json(w->sum);
      b["wait_p50_ms"] = opt(w->wait_p50_ms);
      b["wait_p99_ms"] = opt(w->wait_p99_ms);
      saturated = w->rejected_10s > 0;
    }
  }
  // Saturated: it refused a request in the last ten seconds, or its queue is past half its
  // wait window (the next arrivals wait long or are refused).
  if (b["debt_s"].is_number() && b["debt_s"].get<double>() > r.cache_s / 2) saturated = true;
  b["saturated"] = saturated;
  return b;
}

// The listed buckets (the busiest first, or those asked for), their names added to `shown`.
json buckets_json(const AdminDeps& deps, const config::Snapshot& snap, const std::vector<const config::Rule*>& rules,
                  std::set<std::string_view>& shown) {
  // The stored permits and debt of every listed shared bucket, in one store read.
  std::map<const config::Rule*, std::size_t> probed;
  std::vector<store::BucketProbe> probes;
  for (const config::Rule* rp : rules) {
    const config::Rule& r = *rp;
    if (!r.enabled || !r.has_bucket || r.key_by.kind != config::KeySpec::Kind::none) continue;
    const config::Rule* channel = r.channel ? &r : snap.channel_of(r);
    probed.emplace(&r, probes.size());
    probes.push_back({{r.bucket, r.params}, channel ? std::string_view(channel->channel_type) : std::string_view(r.bucket)});
  }
  const auto views = deps.store.inspect_many(probes);
  json buckets = json::array();
  for (const config::Rule* rp : rules) {
    shown.insert(rp->bucket);
    const auto p = probed.find(rp);
    buckets.push_back(bucket_json(deps, *rp, p == probed.end() ? nullptr : &views[p->second]));
  }
  return buckets;
}

// The listed buckets' policies (quotas and the like): how often each bound, passed and failed.
json policies_json(const AdminDeps& deps, const std::set<std::string_view>& shown) {
  json policies = json::array();
  deps.metrics.each_policy([&](std::string_view rule, std::string_view policy, const proxy::PolicyMetrics& p) {
    if (!shown.contains(rule)) return;
    json j = {{"rule", rule}, {"policy", policy}, {"bound", p.bound ? p.bound->Value() : 0.0}};
    if (p.passed) j["passed"] = p.passed->Value();
    if (p.failed) j["failed"] = p.failed->Value();
    policies.push_back(std::move(j));
  });
  return policies;
}

// The entry of `upstreams` for `name`, added when there is none.
json& upstream_entry(json& upstreams, const std::string& name) {
  for (json& u : upstreams)
    if (u["upstream"] == name) return u;
  upstreams.push_back({{"upstream", name}});
  return upstreams.back();
}

// TLS: the listener's certificate (into `out`) and each upstream's (into `upstreams`), with days
// to expiry for the console's tint; insecure upstreams stand out.
void add_tls_status(proxy::TlsProfiles& tls, json& out, json& upstreams) {
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto days = [now_s](std::int64_t not_after) {
    return not_after > 0 ? json(static_cast<double>(not_after - now_s) / 86400.0) : json(nullptr);
  };
  for (const proxy::TlsProfiles::Status& t : tls.status()) {
    json j = {{"verify", t.verify}, {"insecure_skip_verify", t.insecure}, {"min_version", t.min_version}};
    if (t.upstream.empty()) {
      j["certificate_days_left"] = days(t.cert_not_after);
      out["listener_tls"] = std::move(j);
      continue;
    }
    j["server_name"] = t.server_name;
    j["client_certificate_days_left"] = days(t.cert_not_after);
    j["peer_certificate_days_left"] = days(t.peer_not_after);
    upstream_entry(upstreams, t.upstream)["tls"] = std::move(j);
  }
}

// An upstream's endpoints (in use or ejected, and the requests on each now) and its credential.
void add_endpoints(const proxy::UpstreamView& v, json& u) {
  json eps = json::array();
  for (const auto& e : v.endpoints) eps.push_back({{"endpoint", e.endpoint}, {"up", e.up}, {"outstanding", e.outstanding}});
  json auth;  // null: none
  if (v.auth) {
    auth = {{"type", v.auth->type}};
    if (v.auth->type != "header") {
      auth["expires_in_s"] = v.auth->expires_in_s >= 0 ? json(v.auth->expires_in_s) : json(nullptr);
      auth["last_refresh_unix"] = v.auth->last_refresh_unix > 0 ? json(v.auth->last_refresh_unix) : json(nullptr);
      auth["failures"] = v.auth->failures;
      auth["last_error"] = v.auth->last_error;
    }
  }
  u["resolved"] = v.resolved;
  u["endpoints"] = std::move(eps);
  u["auth"] = std::move(auth);
}

// The running route table's upstreams (one a SIGHUP removed keeps its series, not its place here):
// their last minute of answers and errors, TLS and endpoints.
json upstreams_json(const AdminDeps& deps, json& out) {
  json upstreams = json::array();
  std::vector<proxy::UpstreamView> running;
  if (deps.upstreams_view) running = deps.upstreams_view();
  auto is_running = [&](const std::string& name) {
    return !deps.upstreams_view ||
           std::any_of(running.begin(), running.end(), [&](const proxy::UpstreamView& v) { return v.name == name; });
  };
  if (deps.history) {
    for (const auto& [name, w] : deps.history->upstreams()) {
      if (!is_running(name)) continue;
      json errors = json::object(), totals = json::object();
      for (std::size_t e = 0; e < proxy::kUpstreamErrors; ++e) {
        errors[proxy::upstream_error_name(static_cast<proxy::UpstreamError>(e))] = w.errors[e];
        totals[proxy::upstream_error_name(static_cast<proxy::UpstreamError>(e))] = w.errors_total[e];
      }
      upstreams.push_back({{"upstream", name},
                           {"responses_last_minute", w.responses},
                           {"latency_p50_ms", opt(w.p50_ms)},
                           {"latency_p99_ms", opt(w.p99_ms)},
                           {"errors_last_minute", std::move(errors)},
                           {"errors_total", std::move(totals)}});
    }
  }
  if (deps.tls) add_tls_status(*deps.tls, out, upstreams);
  for (const proxy::UpstreamView& v : running) add_endpoints(v, upstream_entry(upstreams, v.name));
  return upstreams;
}
}  // namespace

SimpleResponse AdminApi::get_overview(std::string_view query) const {
  auto snap = deps_.snapshots.get();
  Selection sel;
  if (snap) {
    sel = select(*snap, query, kOverviewTop);
    if (!sel.error.empty()) return error(400, "bad_request", sel.error);
  }
  json out = {{"now_ms", config::SwitchState::now_ms()}, {"history_seq", deps_.history ? deps_.history->seq() : 0}};
  out["switch"] = json::parse(get_switch().body);
  out["store"] = store_json(deps_.store.health());
  if (deps_.config) out["config_source"] = status_json(deps_.config->status());
  out["held"] = deps_.metrics.held.Value();
  out["connections"] = deps_.metrics.connections.Value();
  out["refusals_total"] = deps_.refusals ? deps_.refusals->total() : 0;
  json buckets = json::array();
  std::set<std::string_view> shown;
  if (snap) {
    out["config"] = {{"version", snap->version}, {"source", snap->source}, {"rejected_rows", snap->rejected.size()}};
    out["buckets_total"] = sel.total;
    out["buckets_matched"] = sel.matched;
    out["buckets_omitted"] = sel.matched - sel.rules.size();
    buckets = buckets_json(deps_, *snap, sel.rules, shown);
  }
  out["buckets"] = std::move(buckets);
  out["policies"] = policies_json(deps_, shown);
  out["upstreams"] = upstreams_json(deps_, out);
  return compact_json(out);
}

// Re-reads every certificate, key and CA file. A profile whose files do not load keeps its old
// context (422 naming the file and reason); the others take their new one.
SimpleResponse AdminApi::post_tls_reload() {
  if (!deps_.tls || !deps_.tls->any()) return error(409, "no_tls", "no TLS listener or https:// upstream is configured");
  const proxy::TlsProfiles::ReloadReport r = deps_.tls->reload();
  for (const auto& e : r.errors) log_line("tollgate: TLS reload refused, keeping the old context: ", e);
  SimpleResponse res = ok_json({{"reloaded", r.reloaded}, {"errors", r.errors}});
  if (!r.errors.empty()) res.status = 422;
  return res;
}

SimpleResponse AdminApi::get_history(std::string_view query) const {
  if (!deps_.history) return error(501, "not_supported", "no history is kept");
  bool bad = false;
  const auto since = query_number(query, "since", bad);
  if (bad) return error(400, "bad_request", "since: must be a sample number (the \"seq\" of an earlier answer)");
  auto snap = deps_.snapshots.get();
  if (!snap) return compact_json(deps_.history->to_json(since));
  const Selection sel = select(*snap, query, kHistoryTop);
  if (!sel.error.empty()) return error(400, "bad_request", sel.error);
  std::vector<std::string> names;
  names.reserve(sel.rules.size());
  std::set<std::string_view> seen;
  for (const config::Rule* r : sel.rules)
    if (seen.insert(r->bucket).second) names.push_back(r->bucket);
  json out = deps_.history->to_json(since, &names);
  out["buckets_total"] = sel.total;
  out["buckets_matched"] = sel.matched;
  out["buckets_omitted"] = sel.matched - sel.rules.size();
  return compact_json(out);
}

SimpleResponse AdminApi::get_refusals(std::string_view query) const {
  if (!deps_.refusals) return error(501, "not_supported", "no refusals are kept");
  bool bad = false;
  const std::uint64_t limit = query_number(query, "limit", bad).value_or(proxy::RefusalLog::kCapacity);
  if (bad) return error(400, "bad_request", "limit: must be a whole number");
  json list = json::array();
  for (const proxy::Refusal& r : deps_.refusals->recent(limit)) {
    json j = {{"at_ms", r.at_ms}, {"status", r.status},         {"path", r.path},
              {"bucket", r.bucket}, {"policy", r.policy},       {"retry_after_s", r.retry_after_s}};
    if (!r.key_by.empty()) j["key_by"] = r.key_by;
    if (!r.key_shape.empty()) j["key_shape"] = r.key_shape;
    list.push_back(std::move(j));
  }
  return ok_json({{"total", deps_.refusals->total()},
                  {"capacity", deps_.refusals->capacity()},
                  {"refusals", std::move(list)}});
}

}  // namespace tollgate::admin

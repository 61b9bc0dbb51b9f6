// The gateway's configuration file (conf/gateway.json). Parsed once into immutable structs; every
// error names the JSON path of the field at fault ("limits.rules[0].rateLimit: must be > 0").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tollgate/config/rule.hpp"
#include "tollgate/config/switch_state.hpp"

namespace tollgate::config {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

enum class TlsVersion : std::uint8_t { tls1_2, tls1_3 };  // "1.2", "1.3"

// upstreams.<name>.tls: how an https:// upstream is verified and what the gateway presents to it.
// Files are paths; they are read when the gateway starts and again on SIGHUP or
// POST /admin/tls/reload (proxy/tls_context), never per connection.
struct UpstreamTlsConfig {
  std::string ca_file;      // PEM bundle to trust; "": the system store
  std::string server_name;  // SNI and the name checked; "": the URL's host
  std::string cert_file;    // client certificate (mTLS), with key_file; "": none
  std::string key_file;
  TlsVersion min_version = TlsVersion::tls1_2;
  bool insecure_skip_verify = false;  // true only when written so; warned at every start
  friend bool operator==(const UpstreamTlsConfig&, const UpstreamTlsConfig&) = default;
};

// The top-level "tls": the proxy listener serves HTTPS with this certificate and key.
struct ListenerTlsConfig {
  std::string cert_file;
  std::string key_file;
  bool enabled() const { return !cert_file.empty(); }
};

// One URL of an upstream ("url", or each of "urls"): a host name or an IP literal, and a port.
struct UpstreamTarget {
  std::string url;   // as written, for messages
  std::string host;  // a name (resolved off the request path) or an IP literal (an IPv6 one without brackets)
  std::uint16_t port = 80;
  bool ip_literal = false;
  std::string host_header;  // Host for requests to it: host[:port], IPv6 in brackets, the port only when not the scheme's
  friend bool operator==(const UpstreamTarget&, const UpstreamTarget&) = default;
};

// upstreams.<name>.eject: passive ejection of an endpoint that keeps failing.
struct EjectConfig {
  std::uint32_t consecutive_failures = 5;  // failures in a row that eject it
  std::uint32_t base_ms = 30'000;          // out this long the first time; k times it the k-th time in a row (at most 10x)
  std::uint32_t max_percent = 50;          // never more than this share of an upstream's endpoints out at once
  friend bool operator==(const EjectConfig&, const EjectConfig&) = default;
};

// upstreams.<name>.auth: the credential the gateway sends the supplier on every forwarded request
// (proxy/upstream_auth), in place of any the caller sent. Secrets are read from the environment
// or a file when the file is loaded (start, SIGHUP), never written anywhere.
enum class AuthType : std::uint8_t { none, header, oauth2_client_credentials };
struct UpstreamAuthConfig {
  AuthType type = AuthType::none;
  // header: the field `name` with the value from `value_env` or `value_file`.
  std::string name;
  std::string value_env, value_file;
  std::string value;  // resolved (secret)
  // oauth2_client_credentials (RFC 6749 4.4): a Bearer token from `token_url`.
  std::string token_url;
  std::string client_id_env, client_secret_env;
  std::string client_id, client_secret;  // resolved (secret)
  std::string scope;                     // "": none sent
  bool basic = true;                     // auth_style "basic" (HTTP Basic) or "body" (form fields)
  std::uint32_t refresh_before_s = 60;   // a token is refreshed this long before it expires
  double token_rate = 1.0;               // token requests a second at most (a bucket of one)
  std::string token_upstream;            // the internal upstream that reaches token_url ("<name>.token")
  friend bool operator==(const UpstreamAuthConfig&, const UpstreamAuthConfig&) = default;
};

// upstreams.<name>.rate_fields: which rate-limit fields the supplier sends and how it spells them
// (read by proxy/upstream_signal's read_advert on every answer of an adaptive rule).
struct RateFieldsConfig {
  enum class Style : std::uint8_t { automatic, ietf, legacy, x, custom, none };  // JSON: "auto","ietf","legacy","x","custom","none"
  enum class ResetUnit : std::uint8_t { automatic, seconds, unix, unix_ms, http_date };  // JSON: "auto","seconds","unix","unix_ms","http_date"
  Style style = Style::automatic;
  ResetUnit reset_unit = ResetUnit::automatic;
  std::string limit_field, remaining_field, reset_field;  // custom names (style "custom")
  std::string usage_field, usage_key;  // a count in one field: "Sforce-Limit-Info: api-usage=10018/100000" (used/limit)
  std::string policy;                  // IETF: the policy to follow by name ("": the most restrictive item)
  std::uint32_t window_s = 0;          // the window's length when the supplier does not say (0: unknown)
  friend bool operator==(const RateFieldsConfig&, const RateFieldsConfig&) = default;
};

struct UpstreamConfig {
  std::string name;
  std::string url;             // the first URL as written, for messages
  std::string host;            // the first URL's host (an IPv6 literal without its brackets)
  std::uint16_t port = 80;
  bool https = false;          // https:// (port 443 unless given): TLS, verified per `tls`
  std::string base_path;       // the URLs' path without its trailing '/' ("" or "/v2"), put before every forwarded path
  std::vector<UpstreamTarget> targets;  // "url", or every one of "urls"
  UpstreamTlsConfig tls;
  std::uint32_t connect_timeout_ms = 0;   // 0: proxy default
  std::uint32_t response_timeout_ms = 0;  // 0: proxy default
  std::uint32_t idle_timeout_ms = 0;      // 0: proxy default (upstream_idle_timeout_ms)
  std::uint32_t dns_refresh_ms = 5'000;   // names are resolved again this often (or at the record's TTL, >= 1 s)
  std::uint32_t min_idle_conns = 0;       // per worker: connections kept open (and handshaken) ahead of requests
  // Endpoints a request tries at most (each once): the first and the failovers after connect or
  // TLS handshake failures. All of them together also stay within the response timeout.
  std::uint32_t max_attempts = 3;
  EjectConfig eject;
  UpstreamAuthConfig auth;
  RateFieldsConfig rate_fields;
  // Set on the internal upstream that carries an oauth2 upstream's token requests: that
  // upstream's name. It has no route; its base_path is the token URL's path.
  std::string token_endpoint_of;
  friend bool operator==(const UpstreamConfig&, const UpstreamConfig&) = default;
};

struct RouteConfig {
  std::string prefix;    // path prefix, "/" matches everything
  std::string upstream;  // name in "upstreams"
  bool strip_prefix = false;             // forward the path without the prefix (then after the upstream's base path)
  std::uint32_t connect_timeout_ms = 0;   // 0: the upstream's
  std::uint32_t response_timeout_ms = 0;  // 0: the upstream's
  friend bool operator==(const RouteConfig&, const RouteConfig&) = default;
};

// "dns": where upstream names are resolved.
struct DnsConfig {
  std::vector<Endpoint> servers;  // empty: the system's (/etc/resolv.conf)
  friend bool operator==(const DnsConfig&, const DnsConfig&) = default;
};

// proxy.underscores_in_headers: what becomes of a request field whose name holds '_' (CGI, PHP-FPM
// and WSGI servers read "X_Api_Key" and "X-Api-Key" as one variable).
enum class UnderscoreHeaders : std::uint8_t { drop, reject, allow };  // "drop", "reject" (400), "allow"

struct ProxyLimits {
  std::uint32_t max_header_bytes = 16 * 1024;
  std::uint64_t max_body_bytes = 1024 * 1024;
  std::uint32_t header_timeout_ms = 10'000;    // from the first byte of a request to its last header byte
  std::uint32_t idle_timeout_ms = 60'000;      // keep-alive: waiting for the next request's first byte
  std::uint32_t body_timeout_ms = 30'000;      // reading a request body
  std::uint32_t connect_timeout_ms = 2'000;    // upstream connect
  std::uint32_t response_timeout_ms = 30'000;  // upstream: request sent -> response header received
  std::uint32_t max_idle_upstream_conns = 64;  // per upstream, per thread
  // A pooled upstream connection idle longer than this is closed, not reused: below the common
  // servers' keep-alive timeouts (Node.js and Apache close after 5 s), so the gateway gives up an
  // idle connection before the upstream does and never writes a request into a closing socket.
  std::uint32_t upstream_idle_timeout_ms = 4'000;
  std::uint32_t drain_timeout_ms = 30'000;     // SIGTERM: how long held and in-flight requests may finish
  std::uint32_t max_connections = 50'000;      // open client connections; past it new ones are closed at once
  // Open client connections from one address (the socket peer, IPv4-mapped IPv6 as IPv4); past it
  // new ones from that address are answered 429 at once. 0: no cap.
  std::uint32_t max_connections_per_client = 1'000;
  std::uint32_t max_held = 20'000;             // requests waiting for a permit, all buckets; past it: 429
  std::uint32_t max_held_per_bucket = 5'000;   // requests waiting on one bucket; past it: 429
  bool allow_trace = false;  // forward TRACE (405 otherwise; CONNECT is always 405)
  // Deadline-aware admission (proxy/deadline.hpp): read grpc-timeout and Request-Timeout, hold a
  // request only if its wait plus the interface's upstream latency p90 fits its budget.
  bool deadline_headers = true;
  std::uint32_t default_upstream_latency_ms = 100;  // the estimate before an interface has data
  // Peers whose X-Forwarded-For is believed (CIDRs); empty: the client is always the socket peer.
  std::vector<std::string> trusted_proxies;
  // The name this gateway gives itself in Via (RFC 9110 7.6.3): appended to every forwarded
  // request's Via, and a request whose Via already holds it came round a loop (508). The parser
  // sets the host name when the file gives none.
  std::string via_pseudonym;
  UnderscoreHeaders underscores_in_headers = UnderscoreHeaders::drop;
};

struct AdminConfig {
  Endpoint listen{"127.0.0.1", 9901};
  std::string token_env = "TOLLGATE_ADMIN_TOKEN";
  std::string token;       // resolved from token_env at load; empty: admin API is read-only
  std::string token_name;  // who the token's holder is, for the switch audit ("" = client address)
  std::uint32_t max_connections = 64;      // open admin connections at most; their descriptors are kept
  std::vector<std::string> allowed_hosts;  // Host names answered besides its own address and localhost
};

struct MysqlConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 3306;
  std::string user = "tollgate";
  std::string database = "tollgate";
  std::string password_env = "TOLLGATE_MYSQL_PASSWORD";
  std::string password;                 // resolved from password_env at load
  std::uint32_t poll_interval_ms = 1000;
  std::uint32_t connect_timeout_ms = 2000;
  std::uint32_t query_timeout_ms = 2000;
  std::string switch_name = "global";   // the row of t_ratelimite_switch this fleet follows
  MatchCase match_case = MatchCase::sensitive;  // limits.match.case (set by the parser): the rows' default
};

// The choice fields, as enums from parse time on (the JSON names are in the comments).
enum class RuleSource : std::uint8_t { file, mysql };                  // limits.source
enum class StoreKind : std::uint8_t { local, redis };                  // limits.store
enum class FailurePolicy : std::uint8_t { fail_open, fail_closed, local };  // limits.redis.failure_policy
enum class RedisMode : std::uint8_t { standalone, cluster, sentinel };        // limits.redis.mode
// limits.missing_key: a keyBy header:<Name> without the header is keyed "anonymous", or refused (400).
enum class MissingKey : std::uint8_t { anonymous, reject };

struct RedisConfig {
  RedisMode mode = RedisMode::standalone;
  std::string host = "127.0.0.1";  // standalone
  std::uint16_t port = 6379;
  std::vector<Endpoint> nodes;      // cluster: seed nodes ("host:port"), any of them will do
  std::vector<Endpoint> sentinels;  // sentinel: the sentinels to ask for the primary
  std::string master_name;               // sentinel: the name the sentinels monitor the primary under
  std::string sentinel_password_env = "TOLLGATE_REDIS_SENTINEL_PASSWORD";
  std::string sentinel_password;         // resolved from sentinel_password_env at load
  std::string password_env = "TOLLGATE_REDIS_PASSWORD";
  std::string password;                    // resolved from password_env at load
  int database = 0;
  std::string key_prefix = "tollgate:";
  std::uint32_t decision_timeout_ms = 50;  // a slower answer counts as a failure
  std::uint32_t connect_timeout_ms = 1000;
  FailurePolicy failure_policy = FailurePolicy::fail_open;
  unsigned local_divisor = 0;              // policy local: rate / N; 0 = live instances (heartbeats)
  std::uint32_t heartbeat_ms = 1000;
};

struct LimitsConfig {
  RuleSource source = RuleSource::file;
  StoreKind store = StoreKind::local;
  SwitchMode switch_mode = SwitchMode::enforce;  // "switch": true/false or "enforce"/"shadow"/"off"
  std::vector<RawRow> rows;      // source "mysql": the fallback while MySQL cannot be read at start
  MissingKey missing_key = MissingKey::anonymous;
  std::uint64_t max_client_keys = 100'000;  // in-process per-client entries before the oldest idle go
  MatchCase match_case = MatchCase::sensitive;  // limits.match.case: a rule's matchCase when it has none
  MysqlConfig mysql;
  RedisConfig redis;
};

struct GatewayConfig {
  std::string path;  // the file it came from
  std::string text;  // its text as loaded (load_gateway_config), to tell what a reload cannot apply
  Endpoint listen{"0.0.0.0", 8080};
  unsigned threads = 0;  // 0: one per core
  std::string access_log = "off";  // "off", "stdout" or a file path: one JSON line per request
  ListenerTlsConfig tls;           // "tls": the proxy listener serves HTTPS
  AdminConfig admin;
  std::vector<UpstreamConfig> upstreams;
  std::vector<RouteConfig> routes;
  DnsConfig dns;
  ProxyLimits proxy;
  LimitsConfig limits;
};

// Parses and validates text. Throws ConfigError naming the field path.
GatewayConfig parse_gateway_config(const std::string& text, const std::string& origin = "config");
GatewayConfig load_gateway_config(const std::string& path);

// Reads the rule rows of a "rules" JSON array into RawRows (type errors are recorded per row).
std::vector<RawRow> parse_rule_rows(const std::string& json_array_text, const std::string& origin_prefix);

Endpoint parse_endpoint(const std::string& text, const std::string& field);

// Every field the file accepts, by its path: "proxy.max_header_bytes", "upstreams.<name>.tls.ca_file",
// "routes[].prefix", "limits.rules[].rateLimit", "limits.rules[].quotas[].limitCount". The parser
// accepts exactly these; docs/configuration.md documents each (a unit test holds it to that).
std::vector<std::string> config_field_paths();

// The fields (JSON paths, e.g. "listen", "proxy.max_body_bytes") that differ between the running
// file and a new version of it and that a reload does not apply: all but upstreams, routes, dns
// and a file source's limits.rules and limits.switch. Empty when either text is not JSON (the reload says why).
std::vector<std::string> fields_needing_restart(const std::string& running_text, const std::string& new_text);

}  // namespace tollgate::config

#include "tollgate/config/gateway_config.hpp"

#include "tollgate/config/regular_file.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace tollgate::config {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw ConfigError(path + ": " + what); }

// Every object of the file and the fields it accepts, by its path in the file ("upstreams.<name>",
// "limits.rules[]"). The parser checks each object's keys against its list here, and
// config_field_paths() lists every field from it, so docs/configuration.md is checked against
// exactly what the parser takes.
struct ObjectFields {
  std::string_view path;
  std::vector<std::string_view> fields;
};

const std::vector<ObjectFields>& schema() {
  static const std::vector<ObjectFields> s = {
      {"", {"listen", "threads", "access_log", "tls", "admin", "upstreams", "routes", "dns", "proxy", "limits"}},
      {"dns", {"servers"}},
      {"tls", {"cert_file", "key_file"}},
      {"admin", {"listen", "token_env", "token_name", "max_connections", "allowed_hosts"}},
      {"upstreams.<name>",
       {"url", "urls", "tls", "connect_timeout_ms", "response_timeout_ms", "idle_timeout_ms", "dns_refresh_ms", "eject",
        "min_idle_conns", "auth", "max_attempts", "rate_fields"}},
      {"upstreams.<name>.rate_fields",
       {"style", "reset", "limit", "remaining", "reset_field", "usage", "policy", "window_s"}},
      {"upstreams.<name>.rate_fields.usage", {"field", "key"}},
      {"upstreams.<name>.eject", {"consecutive_failures", "base_ms", "max_percent"}},
      {"upstreams.<name>.auth",
       {"type", "name", "value_env", "value_file", "token_url", "client_id_env", "client_secret_env", "scope",
        "auth_style", "refresh_before_s", "token_rate"}},
      {"upstreams.<name>.tls", {"ca_file", "server_name", "cert_file", "key_file", "min_version", "insecure_skip_verify"}},
      {"routes[]", {"prefix", "upstream", "strip_prefix", "connect_timeout_ms", "response_timeout_ms"}},
      {"proxy",
       {"max_header_bytes", "max_body_bytes", "header_timeout_ms", "idle_timeout_ms", "body_timeout_ms",
        "connect_timeout_ms", "response_timeout_ms", "max_idle_upstream_conns", "upstream_idle_timeout_ms",
        "drain_timeout_ms", "max_connections", "max_connections_per_client", "max_held", "max_held_per_bucket",
        "trusted_proxies", "allow_trace", "deadline_headers", "default_upstream_latency_ms", "via_pseudonym",
        "underscores_in_headers"}},
      {"limits", {"source", "store", "switch", "rules", "mysql", "redis", "missing_key", "max_client_keys", "match"}},
      {"limits.match", {"case"}},
      {"limits.mysql",
       {"host", "port", "user", "database", "password_env", "poll_interval_ms", "connect_timeout_ms", "query_timeout_ms",
        "switch_name"}},
      {"limits.redis",
       {"mode", "host", "port", "nodes", "sentinels", "master_name", "sentinel_password_env", "password_env", "database",
        "key_prefix", "decision_timeout_ms", "connect_timeout_ms", "failure_policy", "local_divisor", "heartbeat_ms"}},
      {"limits.rules[]",
       {"configId", "channelType", "interfaceNo", "interfaceUrl", "rateLimit", "cache", "status", "burst",
        "warmupSeconds", "scope", "mode", "lastModifyTime", "keyBy", "maxShare", "adaptive", "matchCase", "cost", "channelCost", "priority",
        "algorithm", "cir", "cbs", "ebs", "pir", "pbs", "yellow", "quotas"}},
      {"limits.rules[].quotas[]",
       {"quotaId", "periodSeconds", "limitCount", "algorithm", "keyBy", "status", "configId", "lastModifyTime"}},
  };
  return s;
}

const std::vector<std::string_view>& fields_of(std::string_view object) {
  for (const ObjectFields& o : schema())
    if (o.path == object) return o.fields;
  throw std::logic_error("no schema for " + std::string(object));
}

bool is_field_of(std::string_view object, std::string_view key) {
  const auto& f = fields_of(object);
  return std::find(f.begin(), f.end(), key) != f.end();
}

// `obj` at `path` (as errors name it) is the schema's `object`: every key must be one of its fields.
void check_keys(const json& obj, const std::string& path, std::string_view object) {
  if (!obj.is_object()) fail(path, "must be an object");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!is_field_of(object, it.key())) fail(path.empty() ? it.key() : path + "." + it.key(), "unknown field");
}

std::string join(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }

std::string get_string(const json& obj, const std::string& path, const char* key, std::string def) {
  if (!obj.contains(key)) return def;
  const json& v = obj.at(key);
  if (!v.is_string()) fail(join(path, key), "must be a string");
  return v.get<std::string>();
}

bool get_bool(const json& obj, const std::string& path, const char* key, bool def) {
  if (!obj.contains(key)) return def;
  const json& v = obj.at(key);
  if (!v.is_boolean()) fail(join(path, key), "must be true or false");
  return v.get<bool>();
}

// A choice field as its enum: `choices` pairs each JSON name with its value.
template <class E>
E get_enum(const json& obj, const std::string& path, const char* key, E def,
           std::initializer_list<std::pair<const char*, E>> choices) {
  const char* def_name = "";
  for (const auto& [name, value] : choices)
    if (value == def) def_name = name;
  std::vector<const char*> names;
  for (const auto& c : choices) names.push_back(c.first);
  const std::string v = get_string(obj, path, key, def_name);
  for (const auto& [name, value] : choices)
    if (v == name) return value;
  std::string list;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) list += i + 1 == names.size() ? " or " : ", ";
    list.append("\"").append(names[i]).append("\"");
  }
  fail(join(path, key), "must be " + list + " (got \"" + v + "\")");
}

std::uint64_t get_uint(const json& obj, const std::string& path, const char* key, std::uint64_t def,
                       std::uint64_t min, std::uint64_t max) {
  if (!obj.contains(key)) return def;
  const json& v = obj.at(key);
  if (!v.is_number_integer() && !v.is_number_unsigned()) fail(join(path, key), "must be an integer");
  if (v.is_number_integer() && v.get<std::int64_t>() < 0) fail(join(path, key), "must be >= " + std::to_string(min));
  const std::uint64_t n = v.get<std::uint64_t>();
  if (n < min || n > max)
    fail(join(path, key), "must be within [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return n;
}

// One upstream URL: scheme://host[:port][/base/path]. The host is a name, an IPv4 literal or an
// IPv6 literal in brackets. Returns the target; `https` and `base_path` say the URL's scheme and path.
UpstreamTarget parse_upstream_url(const std::string& url, const std::string& path, bool& https, std::string& base_path) {
  UpstreamTarget t;
  t.url = url;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
    https = false;
  } else if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
    https = true;
  } else {
    fail(path, "must start with http:// or https://");
  }
  base_path.clear();
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    base_path = rest.substr(slash);
    rest.resize(slash);
    while (base_path.ends_with("/")) base_path.pop_back();
    for (const char c : base_path)
      if (c == '?' || c == '#' || c == '%' || static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        fail(path, "has a path with a query, a fragment, an escape or a character outside visible ASCII");
  }
  if (rest.find('@') != std::string::npos) fail(path, "must not carry credentials (user@host)");
  if (rest.empty()) fail(path, "has no host");
  const std::uint16_t default_port = https ? 443 : 80;
  std::string port;
  if (rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string::npos) fail(path, "has an IPv6 literal without its closing ']'");
    t.host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty() && after.front() != ':') fail(path, "has characters after the IPv6 literal");
    if (!after.empty()) port = after.substr(1);
    else port.clear();
    in6_addr a6;
    if (inet_pton(AF_INET6, t.host.c_str(), &a6) != 1) fail(path, "has an invalid IPv6 literal '" + t.host + "'");
    t.ip_literal = true;
    if (after.empty()) port = std::to_string(default_port);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos) {
      t.host = rest;
      port = std::to_string(default_port);
    } else {
      t.host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (t.host.find(':') != std::string::npos) fail(path, "has an IPv6 literal without brackets ([::1]:port)");
    }
    if (t.host.empty()) fail(path, "has no host");
    in_addr a4;
    t.ip_literal = inet_pton(AF_INET, t.host.c_str(), &a4) == 1;
  }
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 1 || p > 65535) fail(path, "has an invalid port '" + port + "'");
  t.port = static_cast<std::uint16_t>(p);
  const std::string host = t.host.find(':') != std::string::npos ? "[" + t.host + "]" : t.host;
  t.host_header = t.port == default_port ? host : host + ":" + std::to_string(t.port);
  return t;
}

// upstreams.<name>.url or .urls: the upstream's targets, one scheme and one base path for all.
void parse_upstream_urls(const json& obj, UpstreamConfig& u, const std::string& path) {
  const bool one = obj.contains("url"), many = obj.contains("urls");
  if (one == many) fail(path + ".url", one ? "and .urls are both given: use one" : "(or .urls) is required");
  std::vector<std::pair<std::string, std::string>> urls;  // text, field path
  if (one) {
    urls.emplace_back(get_string(obj, path, "url", ""), path + ".url");
  } else {
    const json& list = obj["urls"];
    if (!list.is_array() || list.empty()) fail(path + ".urls", "must be a non-empty array of URLs");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string item = path + ".urls[" + std::to_string(i) + "]";
      if (!list[i].is_string()) fail(item, "must be a string");
      urls.emplace_back(list[i].get<std::string>(), item);
    }
  }
  for (std::size_t i = 0; i < urls.size(); ++i) {
    bool https = false;
    std::string base;
    UpstreamTarget t = parse_upstream_url(urls[i].first, urls[i].second, https, base);
    if (i == 0) {
      u.https = https;
      u.base_path = base;
      u.url = t.url;
      u.host = t.host;
      u.port = t.port;
    } else {
      if (https != u.https) fail(urls[i].second, "has another scheme than " + urls[0].second + ": one scheme per upstream");
      if (base != u.base_path)
        fail(urls[i].second, "has another path than " + urls[0].second + ": one base path per upstream");
      for (const auto& other : u.targets)
        if (other.host == t.host && other.port == t.port) fail(urls[i].second, "repeats " + other.url);
    }
    u.targets.push_back(std::move(t));
  }
}

// upstreams.<name>.tls. Only with an https:// url: on a plain one it would be silently ignored.
void parse_upstream_tls(const json& obj, UpstreamConfig& u, const std::string& path) {
  if (!obj.contains("tls")) return;
  const std::string tp = path + ".tls";
  if (!u.https) fail(tp, "needs an https:// url (" + path + ".url is " + u.url + ")");
  const json& t = obj["tls"];
  check_keys(t, tp, "upstreams.<name>.tls");
  UpstreamTlsConfig& c = u.tls;
  c.ca_file = get_string(t, tp, "ca_file", "");
  c.server_name = get_string(t, tp, "server_name", "");
  c.cert_file = get_string(t, tp, "cert_file", "");
  c.key_file = get_string(t, tp, "key_file", "");
  if (c.cert_file.empty() != c.key_file.empty())
    fail(tp + (c.cert_file.empty() ? ".cert_file" : ".key_file"), "is required with " + tp +
                                                                        (c.cert_file.empty() ? ".key_file" : ".cert_file"));
  const std::string v = get_string(t, tp, "min_version", "1.2");
  if (v == "1.2") c.min_version = TlsVersion::tls1_2;
  else if (v == "1.3") c.min_version = TlsVersion::tls1_3;
  else fail(tp + ".min_version", "must be \"1.2\" or \"1.3\" (got \"" + v + "\")");
  c.insecure_skip_verify = get_bool(t, tp, "insecure_skip_verify", false);
  if (c.insecure_skip_verify && !c.ca_file.empty())
    fail(tp + ".insecure_skip_verify", "true with a ca_file: say which one you mean");
}

// A secret named by an environment variable: set and not empty, else the start is refused.
std::string secret_from_env(const json& obj, const std::string& path, const char* key) {
  const std::string var = get_string(obj, path, key, "");
  if (var.empty()) fail(join(path, key), "is required");
  const char* v = std::getenv(var.c_str());
  if (v == nullptr || *v == '\0') fail(join(path, key), "names " + var + ", which is not set (or empty)");
  return v;
}

// A secret kept in a file: readable by its owner only (mode 0600 or stricter), its one line
// without the line end.
std::string secret_from_file(const std::string& file, const std::string& field) {
  // Opened once, then checked and read through that descriptor: the file checked is the file read.
  const RegularFile f(file);
  if (!f.ok()) fail(field, f.error);
  const int fd = f.fd;
  const struct stat& st = f.st;
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    fail(field, file + " belongs to another user: a secret's file must be the gateway's user's (or root's)");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    fail(field, file + " has mode " + mode + ": a secret's file must be 0600 or stricter (chmod 600 " + file + ")");
  }
  std::string v;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(field, file + ": " + std::strerror(errno));
    if (n == 0) break;
    v.append(buf, static_cast<std::size_t>(n));
    if (v.size() > 64 * 1024) fail(field, file + " is over 64 KiB: not a key");
  }
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  if (v.empty()) fail(field, file + " is empty");
  return v;
}

// A field value the gateway sends: visible ASCII and spaces, no line break (no header injection).
void check_field_value(const std::string& v, const std::string& field) {
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      fail(field, "holds a control character (a line break would end the field): refused");
  }
}

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// The host name (gethostname), the Via pseudonym when proxy.via_pseudonym is not given; one outside
// the token characters (not a host name) gives "tollgate".
std::string default_via_pseudonym() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "tollgate";
  const std::string s(name);
  for (const char ch : s)
    if (!is_token_char(ch)) return "tollgate";
  return s;
}

bool loopback_host(const UpstreamTarget& t) {
  if (t.host == "localhost" || t.host == "::1") return true;
  in_addr a4;
  return inet_pton(AF_INET, t.host.c_str(), &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

// Refuses each of `keys` given in `a` (they belong to another credential type than `type`).
void refuse_keys(const json& a, const std::string& ap, std::initializer_list<const char*> keys, const char* type) {
  for (const char* k : keys)
    if (a.contains(k)) fail(ap + "." + k, std::string("does not apply to type \"") + type + "\"");
}

// upstreams.<name>.auth of type "header": a field and its secret value (from the environment or a file).
void parse_header_auth(const json& a, const std::string& ap, UpstreamAuthConfig& c) {
  refuse_keys(a, ap, {"token_url", "client_id_env", "client_secret_env", "scope", "auth_style", "refresh_before_s", "token_rate"},
              "header");
  c.name = get_string(a, ap, "name", "");
  if (c.name.empty()) fail(ap + ".name", "is required (the field to send, e.g. \"X-Api-Key\")");
  for (const char ch : c.name)
    if (!is_token_char(ch)) fail(ap + ".name", "is not a field name: '" + c.name + "'");
  std::string lower = c.name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* own : {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
                          "trailer", "expect", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip",
                          "forwarded", "x-request-id", "x-tollgate-shadow", "proxy-authorization"})
    if (lower == own) fail(ap + ".name", "'" + c.name + "' is a field the gateway sets or removes itself");
  const bool env = a.contains("value_env"), file = a.contains("value_file");
  if (env == file) fail(ap + ".value_env", env ? "and .value_file are both given: use one" : "(or .value_file) is required");
  if (env) {
    c.value_env = get_string(a, ap, "value_env", "");
    c.value = secret_from_env(a, ap, "value_env");
  } else {
    c.value_file = get_string(a, ap, "value_file", "");
    if (c.value_file.empty()) fail(ap + ".value_file", "must name a file");
    c.value = secret_from_file(c.value_file, ap + ".value_file");
  }
  check_field_value(c.value, ap + (env ? ".value_env" : ".value_file"));
}

// upstreams.<name>.auth of type "oauth2_client_credentials": the token endpoint, the client's
// credentials and refresh; returns the internal upstream its token requests take ("<name>.token").
UpstreamConfig parse_oauth2_auth(const json& a, const std::string& ap, const UpstreamConfig& u, UpstreamAuthConfig& c) {
  refuse_keys(a, ap, {"name", "value_env", "value_file"}, "oauth2_client_credentials");
  c.token_url = get_string(a, ap, "token_url", "");
  if (c.token_url.empty()) fail(ap + ".token_url", "is required");
  c.client_id_env = get_string(a, ap, "client_id_env", "");
  c.client_id = secret_from_env(a, ap, "client_id_env");
  c.client_secret_env = get_string(a, ap, "client_secret_env", "");
  c.client_secret = secret_from_env(a, ap, "client_secret_env");
  c.scope = get_string(a, ap, "scope", "");
  check_field_value(c.scope, ap + ".scope");
  c.basic = get_enum(a, ap, "auth_style", true, {{"basic", true}, {"body", false}});
  c.refresh_before_s = static_cast<std::uint32_t>(get_uint(a, ap, "refresh_before_s", c.refresh_before_s, 0, 86'400));
  if (a.contains("token_rate")) {
    const json& r = a["token_rate"];
    if (!r.is_number() || !(r.get<double>() >= 0.001) || r.get<double>() > 1000)
      fail(ap + ".token_rate", "must be a number within [0.001, 1000] (token requests a second)");
    c.token_rate = r.get<double>();
  }
  UpstreamConfig t;
  t.name = u.name + ".token";
  t.token_endpoint_of = u.name;
  c.token_upstream = t.name;
  UpstreamTarget target = parse_upstream_url(c.token_url, ap + ".token_url", t.https, t.base_path);
  if (t.base_path.empty()) fail(ap + ".token_url", "has no path (e.g. https://auth.example/oauth2/token)");
  if (!t.https && !loopback_host(target))
    fail(ap + ".token_url", "must be https:// (the client secret would cross the network in clear; http:// is "
                            "accepted only for a loopback address)");
  t.url = target.url;
  t.host = target.host;
  t.port = target.port;
  t.targets.push_back(std::move(target));
  if (t.https && u.https && t.host == u.host && t.port == u.port) {
    // The supplier's own host: its tls object (trust, client certificate, name, minimum version).
    // Another host (an identity provider) is verified against the system store with its own
    // name: the supplier's private CA, its client certificate and above all an
    // insecure_skip_verify are never carried over to where the client secret goes.
    t.tls = u.tls;
  }
  if (c.token_url.ends_with('/')) t.base_path += '/';  // the path as written: "/token/" is not "/token"
  t.connect_timeout_ms = u.connect_timeout_ms;
  t.response_timeout_ms = u.response_timeout_ms;
  t.dns_refresh_ms = u.dns_refresh_ms;
  return t;
}

// upstreams.<name>.auth. An oauth2 one also makes the internal upstream its token requests take
// ("<name>.token"), returned to be listed after the upstream.
std::optional<UpstreamConfig> parse_upstream_auth(const json& obj, UpstreamConfig& u, const std::string& path) {
  if (!obj.contains("auth")) return std::nullopt;
  const std::string ap = path + ".auth";
  const json& a = obj["auth"];
  check_keys(a, ap, "upstreams.<name>.auth");
  UpstreamAuthConfig& c = u.auth;
  if (!a.contains("type")) fail(ap + ".type", "is required (\"header\" or \"oauth2_client_credentials\")");
  c.type = get_enum(a, ap, "type", AuthType::header,
                    {{"header", AuthType::header}, {"oauth2_client_credentials", AuthType::oauth2_client_credentials}});
  if (c.type == AuthType::header) {
    parse_header_auth(a, ap, c);
    return std::nullopt;
  }
  return parse_oauth2_auth(a, ap, u, c);
}

// A field name the gateway reads: an HTTP token (compared in any case when read).
std::string get_field_name(const json& obj, const std::string& path, const char* key) {
  const std::string v = get_string(obj, path, key, "");
  if (obj.contains(key) && v.empty()) fail(join(path, key), "must name a field");
  for (const char ch : v)
    if (!is_token_char(ch)) fail(join(path, key), "is not a field name: '" + v + "'");
  return v;
}

// upstreams.<name>.rate_fields.usage: a count in one field of the supplier's own.
void parse_rate_usage(const json& r, RateFieldsConfig& c, const std::string& rp) {
  const std::string up = rp + ".usage";
  const json& u = r["usage"];
  check_keys(u, up, "upstreams.<name>.rate_fields.usage");
  if (!u.contains("field")) fail(up + ".field", "is required (e.g. \"Sforce-Limit-Info\")");
  c.usage_field = get_field_name(u, up, "field");
  c.usage_key = get_string(u, up, "key", "");
  for (const char ch : c.usage_key)
    if (!is_token_char(ch)) fail(up + ".key", "is not a token: '" + c.usage_key + "' (e.g. \"api-usage\")");
}

// upstreams.<name>.rate_fields. A setting the chosen style would not read is refused rather than
// silently ignored.
void parse_rate_fields(const json& obj, UpstreamConfig& u, const std::string& path) {
  if (!obj.contains("rate_fields")) return;
  using Style = RateFieldsConfig::Style;
  using Unit = RateFieldsConfig::ResetUnit;
  const std::string rp = path + ".rate_fields";
  const json& r = obj["rate_fields"];
  check_keys(r, rp, "upstreams.<name>.rate_fields");
  RateFieldsConfig& c = u.rate_fields;
  c.style = get_enum(r, rp, "style", Style::automatic,
                     {{"auto", Style::automatic}, {"ietf", Style::ietf}, {"legacy", Style::legacy}, {"x", Style::x},
                      {"custom", Style::custom}, {"none", Style::none}});
  c.reset_unit = get_enum(r, rp, "reset", Unit::automatic,
                          {{"auto", Unit::automatic}, {"seconds", Unit::seconds}, {"unix", Unit::unix},
                           {"unix_ms", Unit::unix_ms}, {"http_date", Unit::http_date}});
  c.limit_field = get_field_name(r, rp, "limit");
  c.remaining_field = get_field_name(r, rp, "remaining");
  c.reset_field = get_field_name(r, rp, "reset_field");
  if (r.contains("usage")) parse_rate_usage(r, c, rp);
  c.policy = get_string(r, rp, "policy", "");
  for (const char ch : c.policy)  // an sf-string's characters
    if (ch < 0x20 || ch > 0x7e) fail(rp + ".policy", "holds a character outside visible ASCII");
  c.window_s = static_cast<std::uint32_t>(get_uint(r, rp, "window_s", 0, 0, 86'400));

  const bool custom = c.style == Style::custom;
  if (c.style == Style::none)
    for (const char* k : {"reset", "limit", "remaining", "reset_field", "usage", "policy", "window_s"})
      if (r.contains(k)) fail(rp + "." + k, "does not apply to style \"none\" (nothing is read)");
  for (const char* k : {"limit", "remaining", "reset_field", "usage"})
    if (r.contains(k) && !custom) fail(rp + "." + k, "applies only to style \"custom\"");
  if (r.contains("policy") && c.style != Style::automatic && c.style != Style::ietf)
    fail(rp + ".policy", "applies only to style \"auto\" or \"ietf\" (the RateLimit field's policies)");
  if (r.contains("reset") && c.style == Style::ietf)
    fail(rp + ".reset", "does not apply to style \"ietf\" (its t is always seconds from now)");
  if (custom) {
    const bool remaining = r.contains("remaining"), usage = r.contains("usage");
    if (remaining == usage)
      fail(rp + ".remaining", remaining ? "and .usage are both given: use one" : "(or .usage) is required with style \"custom\"");
    if (usage && r.contains("limit")) fail(rp + ".limit", "does not apply with .usage (its field carries the limit)");
    if (r.contains("reset") && c.reset_field.empty()) fail(rp + ".reset", "needs .reset_field (the field it reads)");
  }
}

template <typename T>
std::optional<T> row_number(const json& row, const char* key, RawRow& out) {
  if (!row.contains(key) || row.at(key).is_null()) return std::nullopt;
  const json& v = row.at(key);
  if constexpr (std::is_integral_v<T>) {
    // An id past the type's range would wrap to another (negative) id: refused, not converted.
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
      out.type_errors.push_back(std::string(key) + ": " + v.dump() + " is out of range (at most " +
                                std::to_string(std::numeric_limits<T>::max()) + ")");
      return std::nullopt;
    }
    if (v.is_number_integer() || v.is_number_unsigned()) return v.get<T>();
    if (v.is_boolean() && std::string_view(key) == "status") return v.get<bool>() ? 1 : 0;
    out.type_errors.push_back(std::string(key) + ": must be an integer");
  } else {
    if (v.is_number()) return v.get<T>();
    out.type_errors.push_back(std::string(key) + ": must be a number");
  }
  return std::nullopt;
}

std::optional<std::string> row_string(const json& row, const char* key, RawRow& out) {
  if (!row.contains(key) || row.at(key).is_null()) return std::nullopt;
  const json& v = row.at(key);
  if (v.is_string()) return v.get<std::string>();
  out.type_errors.push_back(std::string(key) + ": must be a string");
  return std::nullopt;
}

RawQuota to_raw_quota(const json& q, const std::string& origin, const RawRow& rule) {
  RawQuota out;
  out.origin = origin;
  out.config_id = rule.config_id;
  if (!q.is_object()) {
    out.type_errors.push_back("quota: must be an object");
    return out;
  }
  for (auto it = q.begin(); it != q.end(); ++it)
    if (!is_field_of("limits.rules[].quotas[]", it.key())) out.type_errors.push_back(it.key() + ": unknown field");
  // Read with the row helpers; their type errors land in a scratch row and move here.
  RawRow scratch;
  out.quota_id = row_number<std::int64_t>(q, "quotaId", scratch);
  out.period_seconds = row_number<std::int64_t>(q, "periodSeconds", scratch);
  out.limit_count = row_number<std::int64_t>(q, "limitCount", scratch);
  out.algorithm = row_string(q, "algorithm", scratch);
  out.key_by = row_string(q, "keyBy", scratch);
  out.status = row_number<std::int64_t>(q, "status", scratch);
  out.type_errors.insert(out.type_errors.end(), scratch.type_errors.begin(), scratch.type_errors.end());
  return out;
}

RawRow to_raw_row(const json& row, const std::string& origin) {
  RawRow r;
  r.origin = origin;
  if (!row.is_object()) {
    r.type_errors.push_back("row: must be an object");
    return r;
  }
  for (auto it = row.begin(); it != row.end(); ++it)
    if (!is_field_of("limits.rules[]", it.key())) r.type_errors.push_back(it.key() + ": unknown field");
  r.config_id = row_number<std::int64_t>(row, "configId", r);
  r.channel_type = row_string(row, "channelType", r);
  r.interface_no = row_string(row, "interfaceNo", r);
  r.interface_url = row_string(row, "interfaceUrl", r);
  r.rate_limit = row_number<double>(row, "rateLimit", r);
  r.cache = row_number<double>(row, "cache", r);
  r.status = row_number<std::int64_t>(row, "status", r);
  r.burst = row_number<double>(row, "burst", r);
  r.warmup_seconds = row_number<double>(row, "warmupSeconds", r);
  r.scope = row_string(row, "scope", r);
  r.mode = row_string(row, "mode", r);
  r.key_by = row_string(row, "keyBy", r);
  r.max_share = row_number<double>(row, "maxShare", r);
  r.match_case = row_string(row, "matchCase", r);
  r.cost = row_number<double>(row, "cost", r);
  r.channel_cost = row_number<double>(row, "channelCost", r);
  r.algorithm = row_string(row, "algorithm", r);
  r.cir = row_number<double>(row, "cir", r);
  r.cbs = row_number<double>(row, "cbs", r);
  r.ebs = row_number<double>(row, "ebs", r);
  r.pir = row_number<double>(row, "pir", r);
  r.pbs = row_number<double>(row, "pbs", r);
  r.yellow = row_string(row, "yellow", r);
  if (row.contains("priority") && !row.at("priority").is_null()) {
    const json& v = row.at("priority");
    if (v.is_object()) r.priority = v.dump();  // validated with the MySQL column's text (config/rule)
    else r.type_errors.push_back("priority: must be an object");
  }
  if (row.contains("adaptive") && !row.at("adaptive").is_null()) {
    const json& v = row.at("adaptive");
    if (v.is_boolean()) r.adaptive = v.get<bool>() ? "on" : "off";
    else if (v.is_string()) r.adaptive = v.get<std::string>();
    else r.type_errors.push_back("adaptive: must be a string or a boolean");
  }
  if (row.contains("quotas") && !row.at("quotas").is_null()) {
    const json& qs = row.at("quotas");
    if (!qs.is_array()) {
      r.type_errors.push_back("quotas: must be an array");
    } else {
      for (std::size_t i = 0; i < qs.size(); ++i) r.quotas.push_back(to_raw_quota(qs[i], origin + ".quotas[" + std::to_string(i) + "]", r));
    }
  }
  return r;
}

std::vector<RawRow> rows_from_json(const json& arr, const std::string& path) {
  if (!arr.is_array()) fail(path, "must be an array");
  std::vector<RawRow> rows;
  for (std::size_t i = 0; i < arr.size(); ++i) rows.push_back(to_raw_row(arr[i], path + "[" + std::to_string(i) + "]"));
  return rows;
}

}  // namespace

Endpoint parse_endpoint(const std::string& text, const std::string& field) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) fail(field, "must be host:port, got '" + text + "'");
  Endpoint e;
  e.host = text.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') e.host = e.host.substr(1, e.host.size() - 2);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) fail(field, "has an invalid port '" + port + "'");
  e.port = static_cast<std::uint16_t>(p);
  return e;
}

namespace {
// The one way the file's text becomes JSON, comments (// and /* */) allowed: the loader, the rule
// rows and the reload's diff all read it so, and what the loader accepts the diff reads alike.
json parse_config_json(const std::string& text, const std::string& origin) {
  try {
    return json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for overflowing numbers
    fail(origin, std::string("invalid JSON: ") + e.what());
  }
}
}  // namespace

std::vector<RawRow> parse_rule_rows(const std::string& text, const std::string& origin_prefix) {
  return rows_from_json(parse_config_json(text, origin_prefix), origin_prefix);
}

namespace {
// tls: the certificate the listener presents to clients.
void parse_listener_tls(const json& doc, GatewayConfig& c) {
  if (!doc.contains("tls")) return;
  const json& t = doc["tls"];
  check_keys(t, "tls", "tls");
  c.tls.cert_file = get_string(t, "tls", "cert_file", "");
  c.tls.key_file = get_string(t, "tls", "key_file", "");
  if (c.tls.cert_file.empty()) fail("tls.cert_file", "is required");
  if (c.tls.key_file.empty()) fail("tls.key_file", "is required");
}

// admin: the admin listener, its token and the Host names it answers.
void parse_admin(const json& doc, GatewayConfig& c) {
  if (doc.contains("admin")) {
    const json& a = doc["admin"];
    check_keys(a, "admin", "admin");
    c.admin.token_name = get_string(a, "admin", "token_name", "");
    c.admin.listen = parse_endpoint(get_string(a, "admin", "listen", "127.0.0.1:9901"), "admin.listen");
    c.admin.token_env = get_string(a, "admin", "token_env", c.admin.token_env);
    c.admin.max_connections =
        static_cast<std::uint32_t>(get_uint(a, "admin", "max_connections", c.admin.max_connections, 1, 4096));
    if (a.contains("allowed_hosts")) {
      const json& h = a["allowed_hosts"];
      if (!h.is_array()) fail("admin.allowed_hosts", "must be an array of host names");
      for (std::size_t i = 0; i < h.size(); ++i) {
        const std::string at = "admin.allowed_hosts[" + std::to_string(i) + "]";
        if (!h[i].is_string() || h[i].get<std::string>().empty()) fail(at, "must be a non-empty string");
        const std::string name = h[i].get<std::string>();
        if (name.find_first_of(":/[] ") != std::string::npos)
          fail(at, "must be a host name or IP address without a port (\"*\" allows any Host)");
        c.admin.allowed_hosts.push_back(name);
      }
    }
  }
  if (!c.admin.token_env.empty()) {
    if (const char* t = std::getenv(c.admin.token_env.c_str())) c.admin.token = t;
  }
}

// upstreams: each supplier's URLs, TLS, pool, ejection, timeouts, rate-limit fields and credential
// (a token endpoint becoming an upstream of its own).
void parse_upstreams(const json& doc, GatewayConfig& c) {
  if (!doc.contains("upstreams")) fail("upstreams", "is required");
  const json& ups = doc["upstreams"];
  if (!ups.is_object() || ups.empty()) fail("upstreams", "must be an object with at least one upstream");
  for (auto it = ups.begin(); it != ups.end(); ++it) {
    const std::string path = "upstreams." + it.key();
    check_keys(it.value(), path, "upstreams.<name>");
    UpstreamConfig u;
    u.name = it.key();
    parse_upstream_urls(it.value(), u, path);
    parse_upstream_tls(it.value(), u, path);
    if (u.https && u.tls.server_name.empty())
      for (std::size_t i = 1; i < u.targets.size(); ++i)
        if (u.targets[i].host != u.host)
          fail(path + ".tls.server_name", "is required when the https URLs name different hosts (the certificate is checked for one name)");
    u.dns_refresh_ms = static_cast<std::uint32_t>(get_uint(it.value(), path, "dns_refresh_ms", u.dns_refresh_ms, 1000, 86'400'000));
    u.min_idle_conns = static_cast<std::uint32_t>(get_uint(it.value(), path, "min_idle_conns", 0, 0, 1000));
    u.max_attempts = static_cast<std::uint32_t>(get_uint(it.value(), path, "max_attempts", u.max_attempts, 1, 16));
    if (it.value().contains("eject")) {
      const std::string ep = path + ".eject";
      const json& e = it.value()["eject"];
      check_keys(e, ep, "upstreams.<name>.eject");
      u.eject.consecutive_failures =
          static_cast<std::uint32_t>(get_uint(e, ep, "consecutive_failures", u.eject.consecutive_failures, 0, 1'000'000));
      u.eject.base_ms = static_cast<std::uint32_t>(get_uint(e, ep, "base_ms", u.eject.base_ms, 1, 3'600'000));
      u.eject.max_percent = static_cast<std::uint32_t>(get_uint(e, ep, "max_percent", u.eject.max_percent, 0, 100));
    }
    u.connect_timeout_ms = static_cast<std::uint32_t>(get_uint(it.value(), path, "connect_timeout_ms", 0, 1, 600'000));
    u.response_timeout_ms =
        static_cast<std::uint32_t>(get_uint(it.value(), path, "response_timeout_ms", 0, 1, 3'600'000));
    u.idle_timeout_ms = static_cast<std::uint32_t>(get_uint(it.value(), path, "idle_timeout_ms", 0, 1, 3'600'000));
    parse_rate_fields(it.value(), u, path);
    std::optional<UpstreamConfig> token = parse_upstream_auth(it.value(), u, path);
    c.upstreams.push_back(std::move(u));
    if (token) c.upstreams.push_back(std::move(*token));
  }
  for (const auto& t : c.upstreams)
    if (!t.token_endpoint_of.empty() && ups.contains(t.name))
      fail("upstreams." + t.token_endpoint_of + ".auth",
           "needs the name '" + t.name + "' for its token requests, and an upstream has it: rename that one");
}

// routes: path prefixes to upstreams (after the upstreams, whose names they use).
void parse_routes(const json& doc, GatewayConfig& c) {
  if (!doc.contains("routes")) fail("routes", "is required");
  const json& routes = doc["routes"];
  if (!routes.is_array() || routes.empty()) fail("routes", "must be an array with at least one route");
  for (std::size_t i = 0; i < routes.size(); ++i) {
    const std::string path = "routes[" + std::to_string(i) + "]";
    check_keys(routes[i], path, "routes[]");
    RouteConfig r;
    r.prefix = get_string(routes[i], path, "prefix", "");
    r.upstream = get_string(routes[i], path, "upstream", "");
    r.strip_prefix = get_bool(routes[i], path, "strip_prefix", false);
    r.connect_timeout_ms = static_cast<std::uint32_t>(get_uint(routes[i], path, "connect_timeout_ms", 0, 1, 600'000));
    r.response_timeout_ms = static_cast<std::uint32_t>(get_uint(routes[i], path, "response_timeout_ms", 0, 1, 3'600'000));
    if (r.prefix.empty() || r.prefix.front() != '/') fail(path + ".prefix", "must start with '/'");
    bool known = false;
    for (const auto& u : c.upstreams) known = known || (u.name == r.upstream && u.token_endpoint_of.empty());
    if (!known) fail(path + ".upstream", "names no upstream: '" + r.upstream + "'");
    c.routes.push_back(std::move(r));
  }
}

// dns: the resolvers asked for upstream names, by address.
void parse_dns(const json& doc, GatewayConfig& c) {
  if (!doc.contains("dns")) return;
  const json& d = doc["dns"];
  check_keys(d, "dns", "dns");
  if (d.contains("servers")) {
    const json& list = d["servers"];
    if (!list.is_array()) fail("dns.servers", "must be an array of \"ip:port\" strings");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string item = "dns.servers[" + std::to_string(i) + "]";
      if (!list[i].is_string()) fail(item, "must be an \"ip:port\" string");
      Endpoint e = parse_endpoint(list[i].get<std::string>(), item);
      in_addr a4;
      in6_addr a6;
      if (inet_pton(AF_INET, e.host.c_str(), &a4) != 1 && inet_pton(AF_INET6, e.host.c_str(), &a6) != 1)
        fail(item, "must be an IP address and port (a resolver is not found by name)");
      if (e.port == 0) fail(item, "needs a port other than 0");
      c.dns.servers.push_back(std::move(e));
    }
  }
}

// proxy: the listener's limits and timeouts, the upstream pools' sizes, forwarding and trust (after
// the upstreams: a pool's warm connections are checked against its size).
void parse_proxy(const json& doc, GatewayConfig& c) {
  if (doc.contains("proxy")) {
    const json& p = doc["proxy"];
    const std::string path = "proxy";
    check_keys(p, path, "proxy");
    auto& l = c.proxy;
    l.max_header_bytes = static_cast<std::uint32_t>(get_uint(p, path, "max_header_bytes", l.max_header_bytes, 1024, 1 << 20));
    l.max_body_bytes = get_uint(p, path, "max_body_bytes", l.max_body_bytes, 0, 1ull << 32);
    l.header_timeout_ms = static_cast<std::uint32_t>(get_uint(p, path, "header_timeout_ms", l.header_timeout_ms, 1, 600'000));
    l.idle_timeout_ms = static_cast<std::uint32_t>(get_uint(p, path, "idle_timeout_ms", l.idle_timeout_ms, 1, 3'600'000));
    l.body_timeout_ms = static_cast<std::uint32_t>(get_uint(p, path, "body_timeout_ms", l.body_timeout_ms, 1, 3'600'000));
    l.connect_timeout_ms =
        static_cast<std::uint32_t>(get_uint(p, path, "connect_timeout_ms", l.connect_timeout_ms, 1, 600'000));
    l.response_timeout_ms =
        static_cast<std::uint32_t>(get_uint(p, path, "response_timeout_ms", l.response_timeout_ms, 1, 3'600'000));
    l.max_idle_upstream_conns =
        static_cast<std::uint32_t>(get_uint(p, path, "max_idle_upstream_conns", l.max_idle_upstream_conns, 0, 100'000));
    l.upstream_idle_timeout_ms = static_cast<std::uint32_t>(
        get_uint(p, path, "upstream_idle_timeout_ms", l.upstream_idle_timeout_ms, 1, 3'600'000));
    l.drain_timeout_ms = static_cast<std::uint32_t>(get_uint(p, path, "drain_timeout_ms", l.drain_timeout_ms, 0, 3'600'000));
    l.max_connections = static_cast<std::uint32_t>(get_uint(p, path, "max_connections", l.max_connections, 1, 10'000'000));
    l.max_connections_per_client = static_cast<std::uint32_t>(
        get_uint(p, path, "max_connections_per_client", l.max_connections_per_client, 0, 10'000'000));
    l.max_held = static_cast<std::uint32_t>(get_uint(p, path, "max_held", l.max_held, 0, 10'000'000));
    l.max_held_per_bucket =
        static_cast<std::uint32_t>(get_uint(p, path, "max_held_per_bucket", l.max_held_per_bucket, 0, 10'000'000));
    l.allow_trace = get_bool(p, path, "allow_trace", l.allow_trace);
    l.deadline_headers = get_bool(p, path, "deadline_headers", l.deadline_headers);
    l.default_upstream_latency_ms = static_cast<std::uint32_t>(
        get_uint(p, path, "default_upstream_latency_ms", l.default_upstream_latency_ms, 0, 600'000));
    l.underscores_in_headers = get_enum(p, path, "underscores_in_headers", l.underscores_in_headers,
                                        {{"drop", UnderscoreHeaders::drop}, {"reject", UnderscoreHeaders::reject},
                                         {"allow", UnderscoreHeaders::allow}});
    l.via_pseudonym = get_string(p, path, "via_pseudonym", "");
    if (p.contains("via_pseudonym")) {
      if (l.via_pseudonym.empty() || l.via_pseudonym.size() > 255) fail("proxy.via_pseudonym", "must be 1 to 255 characters");
      for (const char ch : l.via_pseudonym)
        if (!is_token_char(ch))
          fail("proxy.via_pseudonym", "must be a token (letters, digits and !#$%&'*+-.^_`|~): '" + l.via_pseudonym + "'");
    }
    if (p.contains("trusted_proxies")) {
      const json& t = p["trusted_proxies"];
      if (!t.is_array()) fail("proxy.trusted_proxies", "must be an array of addresses or networks (CIDR)");
      for (std::size_t i = 0; i < t.size(); ++i) {
        if (!t[i].is_string()) fail("proxy.trusted_proxies[" + std::to_string(i) + "]", "must be a string");
        l.trusted_proxies.push_back(t[i].get<std::string>());
      }
    }
  }
  if (c.proxy.via_pseudonym.empty()) c.proxy.via_pseudonym = default_via_pseudonym();
  for (const auto& u : c.upstreams)  // warm connections beyond the idle pool's size would be closed at once
    if (u.min_idle_conns > c.proxy.max_idle_upstream_conns)
      fail("upstreams." + u.name + ".min_idle_conns",
           "must not exceed proxy.max_idle_upstream_conns (" + std::to_string(c.proxy.max_idle_upstream_conns) + ")");
}

// limits.redis.<key>: a list of "host:port" addresses, required (non-empty) in its own mode and
// refused in another.
std::vector<Endpoint> redis_endpoints(const json& r, const std::string& path, RedisMode mode, const char* key,
                                      RedisMode owner, const char* owner_name) {
  std::vector<Endpoint> out;
  const std::string field = path + "." + key;
  if (!r.contains(key)) {
    if (mode == owner) fail(field, std::string("is required when mode is \"") + owner_name + "\"");
    return out;
  }
  if (mode != owner) fail(field, std::string("is only read when mode is \"") + owner_name + "\"");
  const json& list = r[key];
  if (!list.is_array() || list.empty()) fail(field, "must be a non-empty array of \"host:port\" strings");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item = field + "[" + std::to_string(i) + "]";
    if (!list[i].is_string()) fail(item, "must be a \"host:port\" string");
    Endpoint e = parse_endpoint(list[i].get<std::string>(), item);
    if (e.host.empty()) fail(item, "must name a host");
    if (e.port == 0) fail(item, "must name a port (1-65535)");
    out.push_back(std::move(e));
  }
  return out;
}

// limits.mysql: where the rules are read from when limits.source is "mysql".
void parse_mysql(const json& l, GatewayConfig& c) {
  if (!l.contains("mysql")) return;
  const json& m = l["mysql"];
  const std::string path = "limits.mysql";
  check_keys(m, path, "limits.mysql");
  auto& my = c.limits.mysql;
  my.host = get_string(m, path, "host", my.host);
  my.port = static_cast<std::uint16_t>(get_uint(m, path, "port", my.port, 1, 65535));
  my.user = get_string(m, path, "user", my.user);
  my.database = get_string(m, path, "database", my.database);
  my.password_env = get_string(m, path, "password_env", my.password_env);
  my.poll_interval_ms = static_cast<std::uint32_t>(get_uint(m, path, "poll_interval_ms", my.poll_interval_ms, 50, 600'000));
  my.connect_timeout_ms =
      static_cast<std::uint32_t>(get_uint(m, path, "connect_timeout_ms", my.connect_timeout_ms, 100, 600'000));
  my.query_timeout_ms =
      static_cast<std::uint32_t>(get_uint(m, path, "query_timeout_ms", my.query_timeout_ms, 100, 600'000));
  my.switch_name = get_string(m, path, "switch_name", my.switch_name);
  if (my.host.empty()) fail(path + ".host", "must not be empty");
  if (my.database.empty()) fail(path + ".database", "must not be empty");
  if (!my.password_env.empty())
    if (const char* pw = std::getenv(my.password_env.c_str())) my.password = pw;
}

// limits.redis: the fleet's shared store when limits.store is "redis".
void parse_redis(const json& l, GatewayConfig& c) {
  if (!l.contains("redis")) return;
  const json& r = l["redis"];
  const std::string path = "limits.redis";
  check_keys(r, path, "limits.redis");
  auto& rc = c.limits.redis;
  rc.mode = get_enum(r, path, "mode", rc.mode,
                     {{"standalone", RedisMode::standalone}, {"cluster", RedisMode::cluster},
                      {"sentinel", RedisMode::sentinel}});
  rc.nodes = redis_endpoints(r, path, rc.mode, "nodes", RedisMode::cluster, "cluster");
  rc.sentinels = redis_endpoints(r, path, rc.mode, "sentinels", RedisMode::sentinel, "sentinel");
  rc.master_name = get_string(r, path, "master_name", rc.master_name);
  if (rc.mode == RedisMode::sentinel && rc.master_name.empty())
    fail(path + ".master_name", "is required when mode is \"sentinel\"");
  if (rc.mode != RedisMode::sentinel && r.contains("master_name"))
    fail(path + ".master_name", "is only read when mode is \"sentinel\"");
  rc.sentinel_password_env = get_string(r, path, "sentinel_password_env", rc.sentinel_password_env);
  if (rc.mode != RedisMode::standalone && (r.contains("host") || r.contains("port")))
    fail(path + (r.contains("host") ? ".host" : ".port"),
         rc.mode == RedisMode::cluster ? "is not read in cluster mode: list the seed nodes in \"nodes\""
                                       : "is not read in sentinel mode: the sentinels name the primary");
  rc.host = get_string(r, path, "host", rc.host);
  rc.port = static_cast<std::uint16_t>(get_uint(r, path, "port", rc.port, 1, 65535));
  rc.password_env = get_string(r, path, "password_env", rc.password_env);
  rc.database = static_cast<int>(get_uint(r, path, "database", 0, 0, 15));
  rc.key_prefix = get_string(r, path, "key_prefix", rc.key_prefix);
  rc.decision_timeout_ms =
      static_cast<std::uint32_t>(get_uint(r, path, "decision_timeout_ms", rc.decision_timeout_ms, 1, 60'000));
  rc.connect_timeout_ms =
      static_cast<std::uint32_t>(get_uint(r, path, "connect_timeout_ms", rc.connect_timeout_ms, 10, 60'000));
  rc.failure_policy = get_enum(r, path, "failure_policy", rc.failure_policy,
                               {{"fail_open", FailurePolicy::fail_open}, {"fail_closed", FailurePolicy::fail_closed},
                                {"local", FailurePolicy::local}});
  rc.local_divisor = static_cast<unsigned>(get_uint(r, path, "local_divisor", 0, 0, 10'000));
  rc.heartbeat_ms = static_cast<std::uint32_t>(get_uint(r, path, "heartbeat_ms", rc.heartbeat_ms, 100, 60'000));
  if (rc.host.empty()) fail(path + ".host", "must not be empty");
  if (rc.key_prefix.find_first_of("{}") != std::string::npos) fail(path + ".key_prefix", "must not contain '{' or '}'");
  if (rc.mode == RedisMode::cluster && rc.database != 0)
    fail(path + ".database", "must be 0 in cluster mode (Redis Cluster has one database)");
  if (!rc.password_env.empty())
    if (const char* pw = std::getenv(rc.password_env.c_str())) rc.password = pw;
  if (!rc.sentinel_password_env.empty())
    if (const char* pw = std::getenv(rc.sentinel_password_env.c_str())) rc.sentinel_password = pw;
}

// limits: the rule source and store, the switch at start, matching, and the file's own rules.
void parse_limits(const json& doc, GatewayConfig& c) {
  if (!doc.contains("limits")) return;
  const json& l = doc["limits"];
  check_keys(l, "limits", "limits");
  c.limits.missing_key = get_enum(l, "limits", "missing_key", c.limits.missing_key,
                                  {{"anonymous", MissingKey::anonymous}, {"reject", MissingKey::reject}});
  c.limits.max_client_keys = get_uint(l, "limits", "max_client_keys", c.limits.max_client_keys, 512, 100'000'000);
  c.limits.source = get_enum(l, "limits", "source", RuleSource::file, {{"file", RuleSource::file}, {"mysql", RuleSource::mysql}});
  if (c.limits.source == RuleSource::mysql && !l.contains("mysql")) fail("limits.mysql", "is required when source is \"mysql\"");
  parse_mysql(l, c);
  c.limits.store = get_enum(l, "limits", "store", StoreKind::local, {{"local", StoreKind::local}, {"redis", StoreKind::redis}});
  if (c.limits.store == StoreKind::redis && !l.contains("redis")) fail("limits.redis", "is required when store is \"redis\"");
  parse_redis(l, c);
  if (l.contains("switch")) {
    const json& sw = l["switch"];
    if (sw.is_boolean()) {
      c.limits.switch_mode = sw.get<bool>() ? SwitchMode::enforce : SwitchMode::off;
    } else if (sw.is_string() && parse_switch_mode(sw.get<std::string>())) {
      c.limits.switch_mode = *parse_switch_mode(sw.get<std::string>());
    } else {
      fail("limits.switch", "must be true, false, \"enforce\", \"shadow\" or \"off\"");
    }
  }
  if (l.contains("match")) {
    check_keys(l["match"], "limits.match", "limits.match");
    c.limits.match_case = get_enum(l["match"], "limits.match", "case", MatchCase::sensitive,
                                   {{"sensitive", MatchCase::sensitive}, {"insensitive", MatchCase::insensitive}});
  }
  c.limits.mysql.match_case = c.limits.match_case;
  if (l.contains("rules")) c.limits.rows = rows_from_json(l["rules"], "limits.rules");
  for (RawRow& r : c.limits.rows) r.default_case = c.limits.match_case;
}
}  // namespace

GatewayConfig parse_gateway_config(const std::string& text, const std::string& origin) {
  const json doc = parse_config_json(text, origin);
  GatewayConfig c;
  c.path = origin;
  check_keys(doc, "", "");
  c.access_log = get_string(doc, "", "access_log", "off");
  c.listen = parse_endpoint(get_string(doc, "", "listen", "0.0.0.0:8080"), "listen");
  c.threads = static_cast<unsigned>(get_uint(doc, "", "threads", 0, 0, 256));
  parse_listener_tls(doc, c);
  parse_admin(doc, c);
  parse_upstreams(doc, c);
  parse_routes(doc, c);
  parse_dns(doc, c);
  parse_proxy(doc, c);
  parse_limits(doc, c);
  return c;
}

GatewayConfig load_gateway_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  GatewayConfig c = parse_gateway_config(ss.str(), path);
  c.path = path;
  c.text = ss.str();
  return c;
}

namespace {
// Appends the paths under `path` where `a` and `b` differ (a leaf, or a key only one side has).
void diff_paths(const json& a, const json& b, const std::string& path, std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      const std::string p = join(path, it.key().c_str());
      if (b.contains(it.key())) diff_paths(it.value(), b.at(it.key()), p, out);
      else out.push_back(p);
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) out.push_back(join(path, it.key().c_str()));
    return;
  }
  if (a != b) out.push_back(path.empty() ? "(whole file)" : path);
}
}  // namespace

std::vector<std::string> config_field_paths() {
  std::vector<std::string> out;
  for (const ObjectFields& o : schema()) {
    for (std::string_view f : o.fields) {
      std::string p = o.path.empty() ? std::string(f) : std::string(o.path) + "." + std::string(f);
      // A field that is an object (or a list of them) of its own is listed by its fields.
      bool container = false;
      for (const ObjectFields& inner : schema())
        container = container || inner.path == p || inner.path.starts_with(p + ".") || inner.path.starts_with(p + "[");
      if (!container) out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<std::string> fields_needing_restart(const std::string& running_text, const std::string& new_text) {
  std::vector<std::string> out;
  json a, b;
  try {
    a = parse_config_json(running_text, "running");
    b = parse_config_json(new_text, "new");
  } catch (const ConfigError&) {
    return out;  // the reload itself reports the parse error
  }
  // A reload applies the upstreams, the routes and the DNS servers, and the rules and the switch
  // of a file source; everything else is read at start.
  auto applied = [](json& doc) {
    if (!doc.is_object()) return;
    doc.erase("upstreams");
    doc.erase("routes");
    doc.erase("dns");
    if (!doc.contains("limits") || !doc["limits"].is_object()) return;
    json& l = doc["limits"];
    if (l.value("source", std::string("file")) != "file") return;
    l.erase("rules");
    l.erase("switch");
    l.erase("match");
  };
  applied(a);
  applied(b);
  diff_paths(a, b, "", out);
  return out;
}

}  // namespace tollgate::config

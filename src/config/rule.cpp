#include "tollgate/config/rule.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace tollgate::config {

namespace {

bool ascii_alnum(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool ascii_hex(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); }
// c != 0 because strchr finds the terminating NUL too.
bool one_of(unsigned char c, const char* set) { return c != 0 && std::strchr(set, c) != nullptr; }

// RFC 9110 tchar: what a header name or a token may contain.
bool tchar(unsigned char c) { return ascii_alnum(c) || one_of(c, "!#$%&'*+-.^_`|~"); }
// RFC 3986 pchar and '/', without '%' (checked with its two hex digits) and without ';' (request
// paths are matched with their ';' segment parameters cut off).
bool path_char(unsigned char c) { return ascii_alnum(c) || one_of(c, "-._~!$&'()*+,=:@/"); }

// A byte named for a message in visible ASCII, whatever it is, with its 1-based position.
std::string describe_byte(unsigned char c, std::size_t index) {
  char buf[64];
  if (c > 0x20 && c < 0x7f) std::snprintf(buf, sizeof buf, "'%c'", c);
  else if (c == ' ') std::snprintf(buf, sizeof buf, "a space");
  else if (c < 0x20 || c == 0x7f) std::snprintf(buf, sizeof buf, "control character 0x%02X", c);
  else std::snprintf(buf, sizeof buf, "non-ASCII byte 0x%02X", c);
  return std::string(buf) + " (character " + std::to_string(index + 1) + ")";
}

// Messages are written to logs line by line: a byte that is not visible ASCII (a field name from
// a JSON key can hold anything) is written as \xHH so that one message stays one line.
void append_visible(std::string& out, std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
}

}  // namespace

std::string RejectedRow::message() const {
  std::string o;
  append_visible(o, origin.empty() ? std::string_view("row") : std::string_view(origin));
  o += ".";
  append_visible(o, field);
  o += ": ";
  append_visible(o, reason);
  if (config_id && origin.find("configId") == std::string::npos) o += " (configId " + std::to_string(*config_id) + ")";
  if (kept_previous) o += "; its last valid version stays in force";
  return o;
}

std::string check_interface_url(const std::string& url) {
  if (url.empty()) return "must not be empty";
  if (url.front() != '/') return "must start with '/'";
  if (url.size() == 1) return "must name at least one path segment, e.g. /shopping/search";
  if (url.back() == '/') return "must not end with '/'";
  if (url.find("//") != std::string::npos) return "must not contain an empty segment ('//')";
  if (url.size() > kMaxUrlLength) return "must be at most 128 characters";
  // Request paths are matched in their normal form (RFC 3986 6.2.2, see proxy/request_target):
  // a URL in another spelling (an escaped letter, lower-case hex, a ';' parameter, a dot segment)
  // would never match anything, so it is refused rather than silently limiting nothing.
  for (std::size_t i = 0; i < url.size(); ++i) {
    const auto c = static_cast<unsigned char>(url[i]);
    auto at = [i] { return " (character " + std::to_string(i + 1) + ")"; };
    if (c == '%') {
      if (i + 2 >= url.size() || !ascii_hex(static_cast<unsigned char>(url[i + 1])) ||
          !ascii_hex(static_cast<unsigned char>(url[i + 2])))
        return "must write '%' only as %XX with two hex digits" + at();
      auto value = [](char h) { return h <= '9' ? h - '0' : h >= 'a' ? h - 'a' + 10 : h - 'A' + 10; };
      if ((url[i + 1] >= 'a' && url[i + 1] <= 'f') || (url[i + 2] >= 'a' && url[i + 2] <= 'f'))
        return "must write an escape with upper-case hex digits, as requests are matched" + at();
      const auto byte = static_cast<unsigned char>(value(url[i + 1]) * 16 + value(url[i + 2]));
      if (byte == '/' || byte == '\\') return "must not contain an encoded '/' or '\\' (such requests are refused)" + at();
      if (byte < 0x20 || byte == 0x7f)
        return "must not contain an encoded control character (such requests are refused)" + at();
      if (ascii_alnum(byte) || one_of(byte, "-._~"))
        return "must not escape a letter, digit or -._~ (requests are matched with it decoded)" + at();
      i += 2;
      continue;
    }
    if (!path_char(c))
      return "must be a URL path of letters, digits, '/' and -._~!$&'()*+,=:@ or %XX; found " + describe_byte(c, i);
  }
  for (std::size_t at = 1; at <= url.size();) {
    const std::size_t end = std::min(url.find('/', at), url.size());
    const std::string_view seg(url.data() + at, end - at);
    if (seg == "." || seg == "..") return "must not contain a '.' or '..' segment (requests are matched with them resolved)";
    if (seg.ends_with("."))
      return "must not end a segment with '.' (requests are matched with a segment's trailing dots cut)";
    if (seg.starts_with("%20") || seg.ends_with("%20"))
      return "must not begin or end a segment with %20 (such requests are refused)";
    at = end + 1;
  }
  return {};
}

std::string check_channel_type(const std::string& type) {
  if (type.empty()) return "must not be empty";
  if (type.size() > kMaxChannelTypeLength) return "must be at most 24 characters";
  for (std::size_t i = 0; i < type.size(); ++i) {
    const auto c = static_cast<unsigned char>(type[i]);
    if (!tchar(c)) return "must be a token of letters, digits and !#$%&'*+-.^_`|~; found " + describe_byte(c, i);
  }
  return {};
}

std::string check_interface_no(const std::string& no) {
  if (no.size() > kMaxInterfaceNoBytes) return "must be at most 96 bytes";
  for (std::size_t i = 0; i < no.size(); ++i) {
    const auto c = static_cast<unsigned char>(no[i]);
    if (c < 0x20 || c == 0x7f) return "must not contain control characters; found " + describe_byte(c, i);
  }
  return {};
}

std::string KeySpec::text() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::client_ip: return "client_ip";
    case Kind::client_ip_path: return "client_ip_path";
    case Kind::header: return "header:" + header;
  }
  return "none";
}

std::optional<KeySpec> parse_key_by(const std::string& text, std::string& why) {
  KeySpec k;
  if (text == "none") return k;
  if (text == "client_ip") {
    k.kind = KeySpec::Kind::client_ip;
    return k;
  }
  if (text == "client_ip_path") {
    k.kind = KeySpec::Kind::client_ip_path;
    return k;
  }
  if (text.rfind("header:", 0) == 0) {
    k.kind = KeySpec::Kind::header;
    k.header = text.substr(7);
    const bool token = !k.header.empty() && k.header.size() <= 64 &&
                       std::all_of(k.header.begin(), k.header.end(), [](unsigned char c) { return tchar(c); });
    if (token) return k;
    why = "header:<Name> needs a header name (letters, digits, '-', at most 64)";
    return std::nullopt;
  }
  why = "must be none, client_ip, client_ip_path or header:<Name>";
  return std::nullopt;
}

std::size_t Priority::class_of(std::string_view value) const {
  for (std::size_t i = 0; i < classes.size(); ++i)
    if (classes[i] == value) return i;
  return default_class;
}

std::optional<Priority> parse_priority(const std::string& text, std::string& field, std::string& why) {
  using nlohmann::json;
  auto fail = [&](const char* f, std::string w) {
    field = f;
    why = std::move(w);
    return std::nullopt;
  };
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail("priority", "must be a JSON object {\"by\", \"classes\", \"default\", \"reserve\"}");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "by" && it.key() != "classes" && it.key() != "default" && it.key() != "reserve") {
      std::string w = "unknown field \"";
      append_visible(w, it.key().substr(0, 64));
      return fail("priority", w + "\" (by, classes, default, reserve)");
    }
  }
  Priority p;
  const json* by = j.contains("by") ? &j.at("by") : nullptr;
  const std::string by_text = by && by->is_string() ? by->get<std::string>() : "";
  if (by_text == "method") {
    p.by = Priority::By::method;
  } else if (by_text.rfind("header:", 0) == 0 && by_text.size() > 7 && by_text.size() <= 7 + 64 &&
             std::all_of(by_text.begin() + 7, by_text.end(), [](unsigned char c) { return tchar(c); })) {
    p.by = Priority::By::header;
    p.header = by_text.substr(7);
  } else {
    return fail("priority.by", "must be \"method\" or \"header:<Name>\" (e.g. \"header:X-Tollgate-Priority\")");
  }
  const json* classes = j.contains("classes") ? &j.at("classes") : nullptr;
  auto name_ok = [](const std::string& n) {
    return !n.empty() && n.size() <= 32 && std::all_of(n.begin(), n.end(), [](unsigned char c) {
      return ascii_alnum(c) || c == '-' || c == '_' || c == '.';
    });
  };
  if (!classes || !classes->is_array() || classes->size() < 2 || classes->size() > kMaxClasses)
    return fail("priority.classes", "must list 2 to 8 classes, highest first");
  for (const json& c : *classes) {
    if (!c.is_string() || !name_ok(c.get<std::string>()))
      return fail("priority.classes", "each class is a name of letters, digits, '-', '_' or '.' (at most 32)");
    const std::string n = c.get<std::string>();
    if (std::find(p.classes.begin(), p.classes.end(), n) != p.classes.end())
      return fail("priority.classes", "names \"" + n + "\" twice");
    p.classes.push_back(n);
  }
  const json* def = j.contains("default") ? &j.at("default") : nullptr;
  if (!def || !def->is_string()) return fail("priority.default", "is required: the class of a request that names none");
  const auto d = std::find(p.classes.begin(), p.classes.end(), def->get<std::string>());
  if (d == p.classes.end()) return fail("priority.default", "must be one of the classes");
  p.default_class = static_cast<std::size_t>(d - p.classes.begin());
  p.reserve.assign(p.classes.size(), 0.0);
  if (j.contains("reserve") && !j.at("reserve").is_null()) {
    const json& r = j.at("reserve");
    if (!r.is_object()) return fail("priority.reserve", "must be an object of class: share of the burst");
    double total = 0;
    for (auto it = r.begin(); it != r.end(); ++it) {
      const auto c = std::find(p.classes.begin(), p.classes.end(), it.key());
      if (c == p.classes.end()) return fail("priority.reserve", "names a class not in classes");
      if (c + 1 == p.classes.end())
        return fail("priority.reserve", "cannot reserve for the lowest class (there is no class below it to hold back)");
      if (!it.value().is_number() || !std::isfinite(it.value().get<double>()) || it.value().get<double>() <= 0 ||
          it.value().get<double>() >= 1)
        return fail("priority.reserve", "each share must be a number within (0, 1)");
      p.reserve[static_cast<std::size_t>(c - p.classes.begin())] = it.value().get<double>();
      total += it.value().get<double>();
    }
    if (!(total < 1)) return fail("priority.reserve", "the shares must add up to less than 1");
  }
  double above = 0;
  for (std::size_t i = 0; i < p.classes.size(); ++i) {
    p.keep.push_back(above);
    above += p.reserve[i];
  }
  json canon = {{"by", by_text}, {"classes", p.classes}, {"default", p.classes[p.default_class]}};
  json res = json::object();
  for (std::size_t i = 0; i < p.classes.size(); ++i)
    if (p.reserve[i] > 0) res[p.classes[i]] = p.reserve[i];
  canon["reserve"] = res;
  p.text = canon.dump();
  return p;
}

namespace {

std::optional<RejectedRow> check_quota(const RawQuota& raw, const Rule& rule, Quota& q) {
  auto reject = [&](std::string field, std::string reason) {
    RejectedRow r{raw.config_id ? raw.config_id : std::optional<std::int64_t>(rule.config_id), raw.origin,
                  std::move(field), std::move(reason)};
    r.quota_id = raw.quota_id;
    return r;
  };
  if (!raw.type_errors.empty()) {
    const std::string& e = raw.type_errors.front();
    auto colon = e.find(':');
    return reject(e.substr(0, colon), colon == std::string::npos ? e : e.substr(colon + 2));
  }
  if (!raw.quota_id) return reject("quotaId", "is required");
  if (!raw.period_seconds) return reject("periodSeconds", "is required");
  if (*raw.period_seconds < 1 || *raw.period_seconds > kMaxQuotaPeriod)
    return reject("periodSeconds", "must be within [1, 86400]");
  if (!raw.limit_count) return reject("limitCount", "is required");
  if (*raw.limit_count < 1 || *raw.limit_count > kMaxQuotaLimit)
    return reject("limitCount", "must be within [1, 1000000000]");
  const std::string algo = raw.algorithm.value_or("fixed");
  if (algo != "fixed" && algo != "sliding") return reject("algorithm", "must be \"fixed\" or \"sliding\"");
  std::string why;
  auto key = parse_key_by(raw.key_by.value_or("none"), why);
  if (!key) return reject("keyBy", why);
  const std::int64_t status = raw.status.value_or(1);
  if (status != 0 && status != 1) return reject("status", "must be 0 or 1");
  q.quota_id = *raw.quota_id;
  q.period_s = *raw.period_seconds;
  q.limit = *raw.limit_count;
  q.algorithm = algo == "sliding" ? limiter::WindowAlgorithm::sliding : limiter::WindowAlgorithm::fixed;
  q.key_by = *key;
  name_quota(q, rule.bucket);
  return std::nullopt;
}

// The field at fault and why (a step of check, which names the row).
using Why = std::pair<std::string, std::string>;
std::optional<Why> bad_field(std::string field, std::string reason) { return Why{std::move(field), std::move(reason)}; }

// A meter row's own fields: nullopt when it is sound, else the field at fault and why.
std::optional<Why> check_meter(const RawRow& row, bool two_rate, Rule& rule) {
  const char* name = two_rate ? "trtcm" : "srtcm";
  const std::string scope = row.scope.value_or("interface");
  if (scope == "channel") return Why{"algorithm", "a meter limits an interface, not a channel"};
  // What belongs to the token bucket has no meaning for a meter: refused rather than ignored.
  for (const auto& [field, given] :
       {std::pair<const char*, bool>{"rateLimit", row.rate_limit.has_value()}, {"burst", row.burst.has_value()},
        {"warmupSeconds", row.warmup_seconds.has_value()}, {"maxShare", row.max_share.has_value()},
        {"adaptive", row.adaptive.has_value() && *row.adaptive != "off"},
        {"keyBy", row.key_by.has_value() && *row.key_by != "none"}})
    if (given) return Why{field, std::string("does not apply to a meter (algorithm ") + name + "): give its rates and sizes"};
  auto rate = [&](const char* field, const std::optional<double>& v) -> std::optional<Why> {
    if (!v) return Why{field, std::string("is required for algorithm ") + name};
    if (!std::isfinite(*v) || *v <= 0 || *v > kMaxRate) return Why{field, "must be within (0, 1000000] permits per second"};
    return std::nullopt;
  };
  auto size = [&](const char* field, const std::optional<double>& v, bool zero_ok) -> std::optional<Why> {
    if (!v) return Why{field, std::string("is required for algorithm ") + name};
    if (!std::isfinite(*v) || *v > kMaxBurst || (zero_ok ? *v < 0 : *v <= 0))
      return Why{field, zero_ok ? "must be within [0, 1000000000] permits" : "must be within (0, 1000000000] permits"};
    return std::nullopt;
  };
  Meter m;
  m.two_rate = two_rate;
  if (two_rate) {
    if (row.ebs) return Why{"ebs", "belongs to srtcm; trtcm has pir and pbs"};
    if (auto bad = rate("cir", row.cir)) return bad;
    if (auto bad = size("cbs", row.cbs, false)) return bad;
    if (auto bad = rate("pir", row.pir)) return bad;
    if (auto bad = size("pbs", row.pbs, false)) return bad;
    if (*row.pir < *row.cir) return Why{"pir", "must be >= cir (the peak rate is at least the committed one)"};
    m.tr = {*row.cir, *row.cbs, *row.pir, *row.pbs};
  } else {
    if (row.pir || row.pbs) return Why{row.pir ? "pir" : "pbs", "belongs to trtcm; srtcm has cir, cbs and ebs"};
    if (auto bad = rate("cir", row.cir)) return bad;
    if (auto bad = size("cbs", row.cbs, true)) return bad;
    if (auto bad = size("ebs", row.ebs, true)) return bad;
    if (!(*row.cbs + *row.ebs > 0)) return Why{"cbs", "cbs + ebs must be > 0"};
    m.sr = {*row.cir, *row.cbs, *row.ebs};
  }
  const std::string yellow = row.yellow.value_or("forward");
  if (yellow != "forward" && yellow != "wait") return Why{"yellow", "must be \"forward\" or \"wait\""};
  m.wait_green = yellow == "wait";
  rule.meter = m;
  return std::nullopt;
}


// What the row names and how it matches: scope, mode, adaptive, the interface or channel, matchCase.
std::optional<Why> check_names(const RawRow& row, Rule& rule) {
  const std::string scope = row.scope.value_or("interface");
  if (scope != "interface" && scope != "channel") return bad_field("scope", "must be \"interface\" or \"channel\"");
  rule.channel = scope == "channel";
  if (row.mode) {
    auto m = parse_switch_mode(*row.mode);
    if (!m) return bad_field("mode", "must be \"enforce\", \"shadow\" or \"off\"");
    rule.mode = *m;
  }
  if (row.adaptive) {
    // Exact lower-case words, like mode; NULL/absent is off (the original behaviour).
    if (*row.adaptive == "on") rule.adaptive = limiter::Adaptive::on;
    else if (*row.adaptive == "shadow") rule.adaptive = limiter::Adaptive::shadow;
    else if (*row.adaptive == "off") rule.adaptive = limiter::Adaptive::off;
    else return bad_field("adaptive", "must be \"on\", \"shadow\" or \"off\"");
  }
  if (rule.channel) {
    if (!row.channel_type || row.channel_type->empty()) return bad_field("channelType", "is required for a channel limit");
  } else {
    if (!row.interface_url) return bad_field("interfaceUrl", "is required");
    if (auto why = check_interface_url(*row.interface_url); !why.empty()) return bad_field("interfaceUrl", why);
  }
  // An interface row's channelType names the channel limit it draws from, so it is held to the
  // same rule as a channel row's (which makes the bucket "channel:<channelType>"); empty: none.
  if (row.channel_type && !row.channel_type->empty()) {
    if (auto why = check_channel_type(*row.channel_type); !why.empty()) return bad_field("channelType", why);
  }
  if (row.interface_no) {
    if (auto why = check_interface_no(*row.interface_no); !why.empty()) return bad_field("interfaceNo", why);
  }
  if (!rule.channel) rule.match_case = row.default_case;
  if (row.match_case) {
    // Exact lower-case words, like mode; NULL/absent is limits.match.case.
    if (*row.match_case == "sensitive") rule.match_case = MatchCase::sensitive;
    else if (*row.match_case == "insensitive") rule.match_case = MatchCase::insensitive;
    else return bad_field("matchCase", "must be \"sensitive\" or \"insensitive\"");
    if (rule.channel) return bad_field("matchCase", "applies to an interfaceUrl, not to a channel limit");
  }
  return std::nullopt;
}

// Its algorithm: a token bucket, or a meter (whose own fields are checked by check_meter).
std::optional<Why> check_algorithm(const RawRow& row, Rule& rule) {
  const std::string algorithm = row.algorithm.value_or("bucket");
  if (algorithm != "bucket" && algorithm != "srtcm" && algorithm != "trtcm")
    return bad_field("algorithm", "must be \"bucket\", \"srtcm\" or \"trtcm\"");
  const bool metered = algorithm != "bucket";
  if (metered) {
    if (auto bad = check_meter(row, algorithm == "trtcm", rule)) return bad_field(bad->first, bad->second);
  } else {
    for (const auto& [field, given] : {std::pair<const char*, bool>{"cir", row.cir.has_value()}, {"cbs", row.cbs.has_value()},
                                       {"ebs", row.ebs.has_value()}, {"pir", row.pir.has_value()},
                                       {"pbs", row.pbs.has_value()}, {"yellow", row.yellow.has_value()}})
      if (given) return bad_field(field, "applies to a meter: \"algorithm\": \"srtcm\" or \"trtcm\"");
  }
  return std::nullopt;
}

// The token bucket and what shares it: rateLimit (`rate`), cache (`cache`), burst, warm-up, keyBy,
// maxShare, and what adaptive needs of it.
std::optional<Why> check_bucket(const RawRow& row, Rule& rule, bool metered, double& rate, double& cache) {
  rule.has_bucket = !metered && (row.rate_limit.has_value() || row.quotas.empty());
  if (!metered && !row.rate_limit && row.quotas.empty())
    return bad_field("rateLimit", "is required (or give the rule quotas)");
  rate = row.rate_limit.value_or(1.0);
  if (!std::isfinite(rate) || rate <= 0) return bad_field("rateLimit", "must be > 0");
  if (rate > kMaxRate) return bad_field("rateLimit", "must be <= 1000000 (one permit per microsecond)");
  cache = row.cache.value_or(kDefaultCache);
  if (!std::isfinite(cache) || cache < 0 || cache > kMaxCache) return bad_field("cache", "must be within [0, 60] seconds");
  if (row.burst) {
    // Bounded so that the bucket's size stays a valid sf-integer in RateLimit-Policy (at most 15
    // digits) and its permits a whole number the request path can hold.
    if (!std::isfinite(*row.burst) || *row.burst < 1 || *row.burst > kMaxBurst)
      return bad_field("burst", "must be within [1, 1000000000]");
  }
  if (row.warmup_seconds) {
    if (!std::isfinite(*row.warmup_seconds) || *row.warmup_seconds < 0 || *row.warmup_seconds > 3600)
      return bad_field("warmupSeconds", "must be within [0, 3600]");
    if (row.burst && *row.warmup_seconds > 0)
      return bad_field("burst", "cannot be combined with warmupSeconds (warm-up sizes the bucket itself)");
  }
  if (row.key_by) {
    std::string why;
    auto k = parse_key_by(*row.key_by, why);
    if (!k) return bad_field("keyBy", why);
    if (rule.channel && k->kind != KeySpec::Kind::none) return bad_field("keyBy", "is not supported on a channel limit");
    rule.key_by = *k;
  }
  if (row.max_share) {
    if (!std::isfinite(*row.max_share) || *row.max_share <= 0 || *row.max_share > 1)
      return bad_field("maxShare", "must be within (0, 1]");
    if (rule.channel) return bad_field("maxShare", "is not supported on a channel limit");
    if (!row.rate_limit) return bad_field("maxShare", "needs a token bucket (rateLimit) whose wait window it shares");
    rule.max_share = row.max_share;
    rule.share_key = rule.key_by.kind == KeySpec::Kind::none ? KeySpec{KeySpec::Kind::client_ip, {}} : rule.key_by;
    rule.max_held_per_client =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(*row.max_share * rate * cache + 1e-9)));
  }
  if (rule.adaptive != limiter::Adaptive::off) {
    // The adaptive state is one per bucket, kept for an interface's own shared
    // SmoothBursty bucket (effective_params scales rate and burst; a warm-up bucket does not adapt).
    if (rule.channel) return bad_field("adaptive", "applies to an interface's own bucket, not a channel's");
    if (rule.key_by.kind != KeySpec::Kind::none) return bad_field("adaptive", "needs the shared bucket: not with keyBy");
    if (row.warmup_seconds && *row.warmup_seconds > 0)
      return bad_field("adaptive", "needs a SmoothBursty bucket: not with warmupSeconds");
    if (!row.rate_limit) return bad_field("adaptive", "needs a rateLimit");
  }
  if (!rule.has_bucket && rule.key_by.kind != KeySpec::Kind::none)
    return bad_field("keyBy", "keys the token bucket, and this rule has none (rateLimit is NULL)");
  return std::nullopt;
}

// What a request takes: its cost, its channel's cost, and its priority classes.
std::optional<Why> check_costs(const RawRow& row, Rule& rule) {
  // Request cost: whole permits, so that RateLimit's remaining count and the bounds stay whole.
  auto whole_cost = [](double c) { return std::isfinite(c) && c >= 1 && c <= kMaxCost && c == std::floor(c); };
  if (row.cost) {
    if (!whole_cost(*row.cost)) return bad_field("cost", "must be a whole number of permits within [1, 1000000]");
    if (rule.channel) return bad_field("cost", "is what an interface's request takes; on a channel limit use the interfaces' channelCost");
    if (!row.rate_limit && !rule.meter) return bad_field("cost", "needs a token bucket (rateLimit) or a meter to take permits from");
    rule.cost = *row.cost;
  }
  if (row.channel_cost) {
    if (!whole_cost(*row.channel_cost))
      return bad_field("channelCost", "must be a whole number of permits within [1, 1000000]");
    if (rule.channel) return bad_field("channelCost", "is set on the interface rows that draw from the channel limit");
    if (!row.channel_type || row.channel_type->empty())
      return bad_field("channelCost", "needs a channelType: the channel limit it is charged to");
  }
  rule.channel_cost = row.channel_cost.value_or(rule.cost);
  if (row.priority) {
    std::string field, why;
    auto p = parse_priority(*row.priority, field, why);
    if (!p) return bad_field(field, why);
    if (rule.meter) {
      // A meter's classes are its pre-colours (colour-aware): the highest green, the others yellow.
      if (std::any_of(p->reserve.begin(), p->reserve.end(), [](double r) { return r > 0; }))
        return bad_field("priority.reserve", "applies to a token bucket; a meter's classes are its pre-colours");
    } else if (!row.rate_limit) {
      return bad_field("priority", "needs a token bucket (rateLimit) whose burst the classes share");
    }
    if (row.warmup_seconds && *row.warmup_seconds > 0)
      return bad_field("priority", "needs a SmoothBursty bucket: not with warmupSeconds");
    rule.priority = std::move(*p);
  }
  return std::nullopt;
}

// A cost no request could ever be given (every request red, or more than the bucket gives within
// its wait window) is refused, not applied.
std::optional<Why> check_cost_fits(const RawRow& row, const Rule& rule, double rate, double cache) {
  if (rule.meter) {
    // Never anything but red: a cost above every bucket that could pass it.
    const Meter& m = *rule.meter;
    if (m.two_rate ? rule.cost > m.tr.pbs : rule.cost > std::max(m.sr.cbs, m.sr.ebs))
      return bad_field("cost", m.two_rate ? "is more than pbs: every request would be red"
                                       : "is more than both cbs and ebs: every request would be red");
    // With classes the lower ones are pre-coloured yellow: an srTCM passes them only through E.
    if (!m.two_rate && rule.priority && rule.cost > m.sr.ebs)
      return bad_field("cost", "is more than ebs: with priority classes, every request below the highest class would be red");
  }
  if ((row.cost || rule.priority) && rule.has_bucket) {
    // A cost that even a full, rested bucket could not give within the wait window (to the lowest
    // class, after the reserves above it) would refuse every request: refused, not applied. Decided
    // by the bucket arithmetic itself, so a warm-up bucket's cold permits count at their price.
    const limiter::Shape shape = limiter::shape_of(rule.params);
    limiter::BucketState full = limiter::full_state(shape, 0);
    const double keep = rule.priority ? rule.priority->keep.back() * shape.max_permits : 0.0;
    if (!limiter::try_acquire(full, shape, rule.params.mode, rule.cost, rule.timeout_us(), 0, keep).granted) {
      const std::string most = std::to_string(static_cast<long long>(std::floor(shape.max_permits + rate * cache + 1e-9)));
      if (keep > 0 && limiter::try_acquire(full, shape, rule.params.mode, rule.cost, rule.timeout_us(), 0).granted)
        return bad_field("cost", "leaves the lowest priority class nothing: cost + the reserves above it is more than the "
                              "bucket can give within its wait window (burst + rateLimit * cache = " + most + ")");
      return bad_field("cost", rule.params.warmup_us > 0
                                ? "is more than a rested warm-up bucket can give within its wait window (its cold "
                                  "permits cost up to warm-up's cold interval each)"
                                : "is more than the bucket can give within its wait window (burst + rateLimit * cache = " +
                                      most + ")");
    }
  }
  return std::nullopt;
}

std::optional<RejectedRow> check(const RawRow& row, Rule& rule) {
  auto reject = [&](std::string field, std::string reason) {
    return RejectedRow{row.config_id, row.origin, std::move(field), std::move(reason)};
  };
  if (!row.type_errors.empty()) {
    const std::string& e = row.type_errors.front();
    auto colon = e.find(':');
    return reject(e.substr(0, colon), colon == std::string::npos ? e : e.substr(colon + 2));
  }
  if (!row.config_id) return reject("configId", "is required");
  if (auto bad = check_names(row, rule)) return reject(bad->first, bad->second);
  const std::int64_t status = row.status.value_or(0);  // NOT NULL DEFAULT 0 in the table
  if (status != 0 && status != 1) return reject("status", "must be 0 or 1");
  if (auto bad = check_algorithm(row, rule)) return reject(bad->first, bad->second);
  const bool metered = row.algorithm.value_or("bucket") != "bucket";
  double rate = 0, cache = 0;
  if (auto bad = check_bucket(row, rule, metered, rate, cache)) return reject(bad->first, bad->second);
  if (auto bad = check_costs(row, rule)) return reject(bad->first, bad->second);
  rule.config_id = *row.config_id;
  rule.channel_type = row.channel_type.value_or("");
  rule.interface_no = row.interface_no.value_or("");
  rule.interface_url = rule.channel ? "" : *row.interface_url;
  rule.bucket = rule.channel ? "channel:" + rule.channel_type : rule.interface_url;
  rule.rate_limit = rule.meter ? (rule.meter->two_rate ? rule.meter->tr.cir : rule.meter->sr.cir) : rate;
  rule.cache_s = cache;
  rule.enabled = status == 1;
  rule.params.rate = rate;
  rule.params.burst = row.burst;
  rule.params.warmup_us = static_cast<limiter::Micros>(row.warmup_seconds.value_or(0) * 1e6);
  rule.params.mode = limiter::Mode::pay_now;
  if (auto bad = check_cost_fits(row, rule, rate, cache)) return reject(bad->first, bad->second);
  return std::nullopt;
}

// Validates a rule's quota rows; rejected ones are listed and skipped, the rule keeps the others.
void check_quotas(const RawRow& row, Rule& rule, std::map<std::int64_t, std::string>& quota_ids,
                  std::vector<RejectedRow>& rejected) {
  for (const RawQuota& raw : row.quotas) {
    Quota q;
    if (auto bad = check_quota(raw, rule, q)) {
      rejected.push_back(std::move(*bad));
      continue;
    }
    if (auto [it, fresh] = quota_ids.emplace(q.quota_id, raw.origin); !fresh) {
      rejected.push_back({rule.config_id, raw.origin, "quotaId", "duplicate quotaId (also " + it->second + ")", q.quota_id});
      continue;
    }
    if (raw.status.value_or(1) == 0) continue;  // disabled: valid, limits nothing
    if (rule.quotas.size() >= kMaxQuotasPerRule) {
      rejected.push_back({rule.config_id, raw.origin, "quotaId", "a rule has at most 16 enabled quotas", q.quota_id});
      continue;
    }
    rule.quotas.push_back(std::move(q));
  }
}

}  // namespace

void name_quota(Quota& q, const std::string& bucket) {
  q.name = bucket + "#q" + std::to_string(q.quota_id);
}

namespace {

std::optional<std::int64_t> id_of(const CheckedRow& c) {
  if (c.rule) return c.rule->config_id;
  return c.failure ? c.failure->config_id : std::nullopt;
}

// A placed rule whose quota row was rejected keeps that quota's last valid version.
void keep_quotas(Rule& now, const Rule& old, std::vector<RejectedRow>& failures) {
  for (RejectedRow& bad : failures) {
    if (!bad.quota_id) continue;
    const std::int64_t qid = *bad.quota_id;
    auto has = [qid](const Quota& q) { return q.quota_id == qid; };
    if (std::any_of(now.quotas.begin(), now.quotas.end(), has)) continue;
    auto oq = std::find_if(old.quotas.begin(), old.quotas.end(), has);
    if (oq == old.quotas.end()) continue;
    Quota q = *oq;
    name_quota(q, now.bucket);
    now.quotas.push_back(std::move(q));
    bad.kept_previous = true;
  }
}

}  // namespace

ValidatedRules validate_rows(const std::vector<RawRow>& rows, std::vector<RejectedRow> unattached) {
  std::vector<CheckedRow> checked;
  checked.reserve(rows.size() + unattached.size());
  std::map<std::int64_t, std::string> quota_ids;
  for (const RawRow& row : rows) {
    CheckedRow c;
    c.origin = row.origin;
    Rule rule;
    if (auto bad = check(row, rule)) {
      c.failure = std::move(*bad);
    } else {
      check_quotas(row, rule, quota_ids, c.quota_failures);
      c.rule = std::move(rule);
    }
    checked.push_back(std::move(c));
  }
  for (RejectedRow& r : unattached) {
    CheckedRow c;
    c.origin = r.origin;
    c.failure = std::move(r);
    checked.push_back(std::move(c));
  }
  return settle_rows(std::move(checked), nullptr);
}

namespace {
// Which enabled row limits each bucket, and each interfaceUrl's letters (a row matched
// case-insensitively holds every other spelling of them).
class UrlClaims {
 public:
  struct Holder {
    std::int64_t config_id;
    bool kept;  // a rejected row's last valid version
    bool folds = false;  // an interface rule matched case-insensitively
    bool by_case = false;  // (a claim's answer) the URLs differ, but only in case
  };
  // Claims a rule's URL (channel) for it; returns the earlier row that holds it instead, if any.
  std::optional<Holder> claim(const Rule& rule, bool kept) {
    if (!rule.enabled) return std::nullopt;
    const Holder me{rule.config_id, kept, !rule.channel && rule.match_case == MatchCase::insensitive};
    std::string low;
    if (!rule.channel) {
      low = rule.interface_url;
      for (char& c : low)  // ASCII letters only, as the suffix index folds them
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      auto it = folded_.find(low);
      if (it != folded_.end() && (it->second.folds || me.folds) && !holders_.count(rule.bucket)) {
        Holder h = it->second;
        h.by_case = true;
        return h;
      }
    }
    auto [it, fresh] = holders_.emplace(rule.bucket, me);
    if (!fresh) return it->second;
    if (!rule.channel) folded_.emplace(std::move(low), me);
    return std::nullopt;
  }

 private:
  std::map<std::string, Holder> holders_;  // enabled bucket -> the row that limits it
  std::map<std::string, Holder> folded_;   // enabled interfaceUrl in lower case -> its first row
};

// The rejection of a row whose URL (channel) an earlier row `h` already limits.
RejectedRow already_limited(const Rule& rule, const std::string& origin, const UrlClaims::Holder& h) {
  return RejectedRow{rule.config_id, origin, rule.channel ? "channelType" : "interfaceUrl",
                     "another enabled row (configId " + std::to_string(h.config_id) + ") already limits " +
                         (rule.channel ? "channel " + rule.channel_type : rule.interface_url) +
                         (h.by_case ? " in another case, and one of them matches case-insensitively (matchCase)" : "") +
                         (h.kept ? " (its last valid version, in force while its edit is rejected)" : "")};
}
}  // namespace

ValidatedRules settle_rows(std::vector<CheckedRow> checked, const std::vector<Rule>* in_force) {
  ValidatedRules out;
  std::map<std::int64_t, const Rule*> in_force_by_id;
  if (in_force != nullptr)
    for (const Rule& r : *in_force) in_force_by_id.emplace(r.config_id, &r);
  auto old_version = [&in_force_by_id](std::optional<std::int64_t> id) -> const Rule* {
    auto it = id ? in_force_by_id.find(*id) : in_force_by_id.end();
    return it == in_force_by_id.end() ? nullptr : it->second;
  };
  // How many rows passed their own checks with each configId: a rejected row keeps its last valid
  // version only when no other row with its configId passed.
  std::map<std::int64_t, int> passed;
  for (const CheckedRow& c : checked)
    if (c.rule) ++passed[c.rule->config_id];
  UrlClaims claims;
  std::map<std::int64_t, bool> ids;
  for (const CheckedRow& c : checked) {
    const std::optional<std::int64_t> id = id_of(c);
    const Rule* old = c.failure && c.failure->quota_id ? nullptr : old_version(id);
    std::vector<RejectedRow> quota_failures = c.quota_failures;
    std::optional<RejectedRow> failure = c.failure;
    // Whether this row may fall back to its last valid version: not when another row with its
    // configId passed (or was already given that version).
    bool may_keep = failure && id && passed.count(*id) == 0 && !ids.count(*id);
    if (c.rule) {
      Rule rule = *c.rule;
      if (!ids.emplace(rule.config_id, true).second) {
        failure = RejectedRow{rule.config_id, c.origin, "configId", "duplicate configId"};
      } else if (const std::optional<UrlClaims::Holder> h = claims.claim(rule, false)) {
        failure = already_limited(rule, c.origin, *h);
        may_keep = passed[rule.config_id] == 1;  // only this row has its configId
      } else {
        if (old) keep_quotas(rule, *old, quota_failures);
        out.rules.push_back(std::move(rule));
      }
    }
    out.rejected.insert(out.rejected.end(), quota_failures.begin(), quota_failures.end());
    if (!failure) continue;
    // Rejected: the row's last valid version stays in force in its place, if it has one and no
    // earlier row holds that version's URL.
    if (may_keep && old != nullptr && !claims.claim(*old, true)) {
      ids.emplace(old->config_id, true);
      out.rules.push_back(*old);
      failure->kept_previous = true;
    }
    out.rejected.push_back(std::move(*failure));
  }
  out.checked = std::move(checked);
  return out;
}

}  // namespace tollgate::config

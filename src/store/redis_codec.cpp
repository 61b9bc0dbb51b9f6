#include "tollgate/store/redis_codec.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "redis_scripts.hpp"
#include "tollgate/store/key_schema.hpp"

namespace tollgate::store {

const char* acquire_script() { return scripts::kAcquire.c_str(); }
const char* lean_acquire_script() { return scripts::kAcquireLean; }
const char* refund_script() { return scripts::kRefund; }
const char* restore_script() { return scripts::kRestore; }
const char* adapt_script() { return scripts::kAdapt.c_str(); }

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void shape_args(std::vector<std::string>& out, const BucketParams& p) {
  const limiter::Shape s = limiter::shape_of(p);
  out.push_back(num(s.interval_us));
  out.push_back(num(s.max_permits));
  out.push_back(num(s.cool_down_us));
  out.push_back(s.warm ? "1" : "0");
  out.push_back(num(s.threshold));
  out.push_back(num(s.cold_interval_us));
  out.push_back(num(s.slope));
}


// A whole reply item as a number: nothing before or after it.
std::optional<double> number(std::string_view s) {
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || std::isnan(v)) return std::nullopt;
  return v;
}
std::optional<double> number(const ReplyItem& item) {
  if (item.is_integer) return static_cast<double>(item.integer);
  return number(item.text);
}

// Whole microseconds; the scripts' "never" is 2^53.
std::optional<Micros> whole_micros(const ReplyItem& item) {
  constexpr long long kSat = 9007199254740992LL;
  if (item.is_integer) {
    if (item.integer >= kSat) return limiter::kInfinite;
    if (item.integer <= -kSat) return std::nullopt;
    return item.integer;
  }
  const auto v = number(item.text);
  if (!v) return std::nullopt;
  if (*v >= 9007199254740992.0) return limiter::kInfinite;
  if (*v <= -9007199254740992.0) return std::nullopt;
  return static_cast<Micros>(*v);
}

// The tag that opens each answer of a lean reply: 1 grant, 0 rejection, 2 refund (-1: none of them).
int flag(const ReplyItem& item) {
  if (item.is_integer) return item.integer >= 0 && item.integer <= 2 ? static_cast<int>(item.integer) : -1;
  return item.text == "1" ? 1 : item.text == "0" ? 0 : item.text == "2" ? 2 : -1;
}

// The lean script's shape arguments as text (%.17g, the text the scripts store and compare). Kept
// per thread for the last few shapes: formatting five doubles costs ~1k instructions a call.
struct ShapeText {
  bool filled = false;
  limiter::Shape shape;  // what the texts were made from
  std::string text[5];
  int count = 0;
};
// The fields the lean script is sent (the others follow from them).
bool same_sent_shape(const limiter::Shape& a, const limiter::Shape& b) {
  return a.interval_us == b.interval_us && a.max_permits == b.max_permits && a.warm == b.warm &&
         (!a.warm || (a.cool_down_us == b.cool_down_us && a.threshold == b.threshold && a.slope == b.slope));
}
const ShapeText& shape_text(const limiter::Shape& s) {
  static thread_local ShapeText cache[8];
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(s.interval_us) ^ std::bit_cast<std::uint64_t>(s.max_permits);
  ShapeText& e = cache[(bits ^ (bits >> 29) ^ (bits >> 47)) & 7];
  if (e.filled && same_sent_shape(e.shape, s)) return e;
  e.filled = true;
  e.shape = s;
  const double sent[5] = {s.interval_us, s.max_permits, s.cool_down_us, s.threshold, s.slope};
  e.count = s.warm ? 5 : 2;
  for (int i = 0; i < e.count; ++i) e.text[i] = num(sent[i]);
  return e;
}

// The request whose shape a batch sends: its first decision's (a batch of refunds alone sends
// the first refund's, which the script then does not use).
const AcquireRequest& shape_source(const std::vector<LeanEntry>& entries) {
  for (const LeanEntry& e : entries)
    if (!e.give_back) return *e.req;
  return *entries.front().req;
}

bool has_refunds(const std::vector<LeanEntry>& entries) {
  for (const LeanEntry& e : entries)
    if (e.give_back) return true;
  return false;
}

// Writes a lean batch's arguments (after the sha) to `arg`, one call per argument. `set_key`:
// the bucket's abandoned set, empty when the batch has no refund.
template <class Arg>
void lean_batch_args(Arg&& arg, std::string_view key, std::string_view set_key,
                     const std::vector<LeanEntry>& entries, std::string_view now_override,
                     std::size_t max_abandoned) {
  const AcquireRequest& req = shape_source(entries);
  const limiter::Shape s = limiter::shape_of(req.bucket.params);
  const bool refunds = !set_key.empty();
  arg(refunds ? "2" : "1");
  arg(key);
  if (refunds) arg(set_key);
  arg(now_override);
  const char flags = static_cast<char>('0' + (req.bucket.params.mode == limiter::Mode::pay_later ? 1 : 0) +
                                       (s.warm ? 2 : 0) + (refunds ? 4 : 0));
  arg(std::string_view(&flags, 1));
  // The shape as %.17g, the text the scripts store it as (fields m, c): the lean script knows an
  // unchanged rule by comparing that text, without converting it.
  const ShapeText& shape = shape_text(s);
  for (int i = 0; i < shape.count; ++i) arg(shape.text[i]);
  char buf[32];
  auto integer = [&](std::int64_t v) { arg(std::string_view(buf, std::to_chars(buf, buf + sizeof buf, v).ptr)); };
  if (refunds) integer(static_cast<std::int64_t>(max_abandoned));
  for (const LeanEntry& e : entries) {
    if (e.give_back) {
      // Release and cost are whole microseconds; spent as %.17g, as the refund script gets it.
      arg("r");
      integer(e.give_back->release);
      integer(e.give_back->cost);
      arg(num(e.give_back->spent));
      continue;
    }
    // The shortest text that reads back as the same double (Lua converts with strtod).
    if (e.req->permits == 1.0) arg("1");
    else arg(std::string_view(buf, std::to_chars(buf, buf + sizeof buf, e.req->permits).ptr));
    integer(e.req->timeout_us);
  }
}

std::size_t lean_batch_arg_count(const std::vector<LeanEntry>& entries, bool refunds) {
  std::size_t n = (limiter::shape_of(shape_source(entries).bucket.params).warm ? 9 : 6) + (refunds ? 2 : 0);
  for (const LeanEntry& e : entries) n += e.give_back ? 4 : 2;
  return n;
}

std::string set_key_of(const std::vector<LeanEntry>& entries, const std::string& prefix) {
  if (!has_refunds(entries)) return {};
  const AcquireRequest& req = *entries.front().req;
  return abandoned_key(prefix, req.hash_tag, req.bucket.name);
}

std::vector<LeanEntry> decisions_of(const std::vector<const AcquireRequest*>& reqs) {
  std::vector<LeanEntry> out;
  out.reserve(reqs.size());
  for (const AcquireRequest* r : reqs) out.push_back({r, nullptr});
  return out;
}

// RESP: "*<n>\r\n", then "$<length>\r\n<bytes>\r\n" per argument.
void resp_header(std::string& out, char tag, std::size_t n) {
  char digits[24];
  out.push_back(tag);
  out.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
  out.append("\r\n");
}
void resp_bulk(std::string& out, std::string_view a) {
  resp_header(out, '$', a.size());
  out.append(a);
  out.append("\r\n");
}

}  // namespace

bool lean_request(const AcquireRequest& req) {
  return req.use_bucket && !req.parent && req.quotas.empty() && !req.share && req.adaptive == limiter::Adaptive::off &&
         req.reserve_share == 0.0;
}

std::string resp_command(const std::vector<std::string>& args) {
  std::size_t size = 16;
  for (const std::string& a : args) size += a.size() + 16;
  std::string out;
  out.reserve(size);
  resp_header(out, '*', args.size());
  for (const std::string& a : args) resp_bulk(out, a);
  return out;
}

std::optional<std::string> evalsha_as_eval(std::string_view wire, std::string_view body) {
  // "*<n>\r\n" "$7\r\nEVALSHA\r\n" "$<len>\r\n<sha>\r\n" <the rest, kept as it is>
  auto line = [&wire](std::size_t from) { return wire.find("\r\n", from); };
  if (!wire.starts_with('*')) return std::nullopt;
  const std::size_t head = line(0);
  constexpr std::string_view kEvalsha = "$7\r\nEVALSHA\r\n";
  if (head == std::string_view::npos || wire.substr(head + 2, kEvalsha.size()) != kEvalsha) return std::nullopt;
  const std::size_t sha_at = head + 2 + kEvalsha.size();
  const std::size_t sha_len_end = line(sha_at);
  if (sha_len_end == std::string_view::npos || wire[sha_at] != '$') return std::nullopt;
  std::size_t sha_len = 0;
  const auto r = std::from_chars(wire.data() + sha_at + 1, wire.data() + sha_len_end, sha_len);
  if (r.ec != std::errc() || r.ptr != wire.data() + sha_len_end) return std::nullopt;
  const std::size_t rest = sha_len_end + 2 + sha_len + 2;
  if (rest > wire.size()) return std::nullopt;
  std::string out;
  out.reserve(wire.size() + body.size() + 16);
  out.append(wire.substr(0, head + 2));
  resp_bulk(out, "EVAL");
  resp_bulk(out, body);
  out.append(wire.substr(rest));
  return out;
}

bool batchable(const AcquireRequest& a, const AcquireRequest& b) {
  return a.bucket.name == b.bucket.name && a.hash_tag == b.hash_tag && a.bucket.params == b.bucket.params;
}

std::vector<std::string> lean_batch_call(const std::vector<LeanEntry>& entries, const std::string& prefix,
                                         std::string_view now_override, std::size_t max_abandoned) {
  const AcquireRequest& req = *entries.front().req;
  const std::string key = redis_key(prefix, req.hash_tag.empty() ? req.bucket.name : req.hash_tag, req.bucket.name);
  const std::string set_key = set_key_of(entries, prefix);
  std::vector<std::string> out;
  out.reserve(lean_batch_arg_count(entries, !set_key.empty()));
  lean_batch_args([&out](std::string_view a) { out.emplace_back(a); }, key, set_key, entries, now_override,
                  max_abandoned);
  return out;
}

std::vector<std::string> lean_batch_call(const std::vector<const AcquireRequest*>& reqs, const std::string& prefix,
                                         std::string_view now_override) {
  return lean_batch_call(decisions_of(reqs), prefix, now_override);
}

void lean_batch_command(std::string& out, std::string_view sha, std::string_view key, const std::string& prefix,
                        const std::vector<LeanEntry>& entries) {
  const std::string set_key = set_key_of(entries, prefix);
  // Written through a pointer into room made once. An argument takes at most 25 bytes besides its
  // own ("$", 20 digits, two CRLF); there are at most 13 + 4 per entry: EVALSHA, the sha, the key
  // count, two keys, "", the flags, five shape numbers, the bound, and up to four per entry (each
  // number <= 32 bytes).
  const std::size_t start = out.size();
  const std::size_t args = 13 + 4 * entries.size();
  const std::size_t bound = 24 + 25 * args + 7 + sha.size() + 1 + key.size() + set_key.size() + 1 +
                            32 * (6 + 4 * entries.size());
  out.resize(start + bound);
  char* p = out.data() + start;
  auto line = [&p](char tag, std::size_t n) {
    *p++ = tag;
    p = std::to_chars(p, p + 20, n).ptr;
    *p++ = '\r';
    *p++ = '\n';
  };
  auto bulk = [&p, &line](std::string_view a) {
    line('$', a.size());
    std::memcpy(p, a.data(), a.size());
    p += a.size();
    *p++ = '\r';
    *p++ = '\n';
  };
  line('*', 2 + lean_batch_arg_count(entries, !set_key.empty()));
  bulk("EVALSHA");
  bulk(sha);
  lean_batch_args(bulk, key, set_key, entries, "", limiter::kMaxAbandoned);
  out.resize(static_cast<std::size_t>(p - out.data()));
}

std::vector<std::string> lean_acquire_call(const AcquireRequest& req, const std::string& prefix,
                                           std::string_view now_override) {
  return lean_batch_call({&req}, prefix, now_override);
}

std::optional<std::vector<LeanAnswer>> parse_lean_batch_reply(const std::vector<LeanEntry>& entries,
                                                              const ReplyItem* items, std::size_t count) {
  std::vector<LeanAnswer> out(entries.size());
  std::size_t i = 0;
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const int tag = i < count ? flag(items[i]) : -1;
    if (entries[e].give_back) {
      // {2, reservations given back, 1 if remembered}
      if (tag != 2 || i + 3 > count || !items[i + 1].is_integer || !items[i + 2].is_integer ||
          items[i + 1].integer < 0 || items[i + 1].integer > 0xffffffffLL || items[i + 2].integer < 0 ||
          items[i + 2].integer > 1)
        return std::nullopt;
      out[e].refund.bucket = static_cast<std::uint32_t>(items[i + 1].integer);
      out[e].refund.remembered = items[i + 2].integer == 1;
      i += 3;
      continue;
    }
    StoreDecision& sd = out[e].decision;
    auto& d = sd.decision;
    sd.bound = Bound::bucket;
    sd.max_permits = limiter::shape_of(entries[e].req->bucket.params).max_permits;
    if (tag == 1 && i + 6 <= count) {
      const auto wait = whole_micros(items[i + 1]), release = whole_micros(items[i + 2]),
                 cost = whole_micros(items[i + 3]);
      const auto remaining = number(items[i + 4]), spent = number(items[i + 5]);
      if (!wait || !release || !cost || !remaining || !spent) return std::nullopt;
      d.granted = true;
      d.wait_us = *wait;
      d.remaining = *remaining;
      d.next_free = *release;
      d.cost_us = *cost;
      d.spent = *spent;
      sd.reservation = {*release, *cost, *spent, 0, 0, 0};
      i += 6;
    } else if (tag == 0 && i + 3 <= count) {
      const auto retry = whole_micros(items[i + 1]);
      const auto remaining = number(items[i + 2]);
      if (!retry || !remaining) return std::nullopt;
      d.granted = false;
      d.retry_after_us = *retry;
      d.remaining = *remaining;
      i += 3;
    } else {
      return std::nullopt;
    }
  }
  if (i != count) return std::nullopt;  // answers for entries that were not sent
  return out;
}

std::optional<std::vector<StoreDecision>> parse_lean_batch_reply(const std::vector<const AcquireRequest*>& reqs,
                                                                 const std::vector<std::string>& items) {
  std::vector<ReplyItem> views(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    // As hiredis hands them over: a whole number as an integer, anything else as text.
    views[i].text = items[i];
    long long v = 0;
    const auto r = std::from_chars(items[i].data(), items[i].data() + items[i].size(), v);
    if (r.ec == std::errc() && r.ptr == items[i].data() + items[i].size()) views[i] = {true, v, {}};
  }
  auto answers = parse_lean_batch_reply(decisions_of(reqs), views.data(), views.size());
  if (!answers) return std::nullopt;
  std::vector<StoreDecision> out;
  out.reserve(answers->size());
  for (LeanAnswer& a : *answers) out.push_back(std::move(a.decision));
  return out;
}

std::optional<StoreDecision> parse_lean_acquire_reply(const AcquireRequest& req,
                                                      const std::vector<std::string>& items) {
  auto out = parse_lean_batch_reply({&req}, items);
  if (!out) return std::nullopt;
  return std::move(out->front());
}

std::vector<std::string> acquire_call(const AcquireRequest& req, const std::string& prefix,
                                      std::string_view now_override) {
  const std::string_view tag = req.hash_tag.empty() ? req.bucket.name : req.hash_tag;
  const bool has_a = req.use_bucket;
  const bool has_b = req.parent.has_value();
  const bool adaptive = has_a && req.adaptive != limiter::Adaptive::off;
  std::vector<std::string> out;
  out.reserve(4 + 9 + 16 + 4 * req.quotas.size());
  out.push_back(std::to_string((has_a ? 1 : 0) + (adaptive ? 1 : 0) + (has_b ? 1 : 0) + req.quotas.size() +
                               (req.share ? 1 : 0) + (req.meter ? 1 : 0)));
  if (has_a) out.push_back(redis_key(prefix, tag, req.bucket.name));
  if (adaptive) out.push_back(adaptive_key(prefix, tag, req.bucket.name));
  if (has_b) out.push_back(redis_key(prefix, tag, req.parent->name));
  for (const QuotaRef& q : req.quotas) out.push_back(redis_key(prefix, tag, q.key));
  if (req.share) out.push_back(redis_key(prefix, tag, req.share->key));
  if (req.meter) out.push_back(redis_key(prefix, tag, meter_name(req.meter->name)));
  out.push_back(num(req.permits));
  out.push_back(std::to_string(req.timeout_us));
  out.push_back(req.bucket.params.mode == limiter::Mode::pay_later ? "1" : "0");
  out.emplace_back(now_override);
  out.push_back(has_a ? "1" : "0");
  out.push_back(has_b ? "1" : "0");
  out.push_back(std::to_string(req.quotas.size()));
  out.push_back(req.share ? std::to_string(std::max<std::int64_t>(1, req.share->max_held)) : "0");
  out.push_back(!adaptive ? "0" : req.adaptive == limiter::Adaptive::on ? "1" : "2");
  out.push_back(num(req.parent_permits));
  out.push_back(num(req.reserve_share));
  out.push_back(num(req.parent_reserve_share));
  out.push_back(!req.meter ? "0" : req.meter->two_rate ? "2" : "1");
  if (has_a) shape_args(out, req.bucket.params);
  if (adaptive) {
    out.push_back(num(req.bucket.params.rate));
    out.push_back(req.bucket.params.burst ? num(*req.bucket.params.burst) : std::string());
    out.push_back(std::to_string(req.caller));
    out.push_back(num(req.admitted));
    out.push_back(req.again ? "1" : "0");
    out.push_back(num(req.admitted_before));
    if (const auto& adv = req.advert) {
      out.push_back(num(adv->seq));
      out.push_back(num(adv->left));
      out.push_back(std::to_string(adv->reset_in));
      out.push_back(num(adv->limit));
      out.push_back(std::to_string(adv->window));
    } else {
      out.insert(out.end(), 5, std::string());
    }
    out.push_back(std::to_string(req.window_pair.start));
    out.push_back(std::to_string(req.window_pair.width));
  }
  if (has_b) shape_args(out, req.parent->params);
  for (const QuotaRef& q : req.quotas) {
    out.push_back(std::to_string(q.params.period_us));
    out.push_back(std::to_string(q.params.limit));
    out.push_back(q.params.algorithm == limiter::WindowAlgorithm::sliding ? "1" : "0");
  }
  if (req.meter) {
    const MeterRef& m = *req.meter;
    out.push_back(num(m.two_rate ? m.tr.cir : m.sr.cir));
    out.push_back(num(m.two_rate ? m.tr.cbs : m.sr.cbs));
    out.push_back(num(m.two_rate ? m.tr.pir : m.sr.ebs));
    out.push_back(m.two_rate ? num(m.tr.pbs) : std::string("0"));
    out.push_back(std::to_string(static_cast<int>(m.pre)));
    out.push_back(m.wait_green ? "1" : "0");
  }
  return out;
}

std::vector<std::string> adapt_call(const AcquireRequest& req, const std::string& prefix, Micros pause_us,
                                    Micros jitter_us, std::string_view now_override) {
  const std::string_view tag = req.hash_tag.empty() ? req.bucket.name : req.hash_tag;
  return {"2",
          redis_key(prefix, tag, req.bucket.name),
          adaptive_key(prefix, tag, req.bucket.name),
          std::string(now_override),
          req.adaptive == limiter::Adaptive::on ? "1" : "2",
          num(req.bucket.params.rate),
          req.bucket.params.burst ? num(*req.bucket.params.burst) : std::string(),
          std::to_string(pause_us),
          std::to_string(jitter_us),
          std::to_string(req.caller),
          num(req.admitted),
          num(req.admitted_before),
          std::to_string(req.window_pair.start),
          std::to_string(req.window_pair.width)};
}

std::optional<AdaptOutcome> parse_adapt_reply(const std::vector<std::string>& items, Micros now) {
  if (items.size() != 11) return std::nullopt;
  try {
    AdaptOutcome out;
    out.ok = true;
    out.result.cut = items[0] == "1";
    out.result.from = std::stod(items[1]);
    out.result.to = std::stod(items[2]);
    out.result.paused = items[3] == "1";
    out.pause_left_us = static_cast<Micros>(std::stod(items[5]));
    // The store's pause_until is on Redis's clock: told on the caller's, from what is left of it.
    out.result.pause_until = now + out.pause_left_us;
    out.effective_rate = std::stod(items[6]);
    out.result.unconfirmed = items[7] == "1";
    out.last_cut_us = static_cast<Micros>(std::stod(items[8]));
    out.windows = {static_cast<Micros>(std::stoll(items[9])), static_cast<Micros>(std::stoll(items[10]))};
    return out;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::string> refund_call(const AcquireRequest& req, const std::string& prefix, const Reservation& res,
                                     std::string_view now_override, std::size_t max_abandoned) {
  const std::string_view tag = req.hash_tag.empty() ? req.bucket.name : req.hash_tag;
  const int buckets = (req.use_bucket ? 1 : 0) + (req.parent ? 1 : 0);
  const bool share = req.share && res.share_release != 0;
  std::vector<std::string> out{std::to_string(2 * buckets + (share ? 1 : 0))};
  if (req.use_bucket) out.push_back(redis_key(prefix, tag, req.bucket.name));
  if (req.parent) out.push_back(redis_key(prefix, tag, req.parent->name));
  if (req.use_bucket) out.push_back(abandoned_key(prefix, tag, req.bucket.name));
  if (req.parent) out.push_back(abandoned_key(prefix, tag, req.parent->name));
  if (share) out.push_back(redis_key(prefix, tag, req.share->key));
  out.push_back(std::to_string(buckets));
  out.emplace_back(now_override);
  out.push_back(std::to_string(max_abandoned));
  auto add = [&out](Micros release, Micros cost, double spent) {
    out.push_back(num(static_cast<double>(release)));
    out.push_back(num(static_cast<double>(cost)));
    out.push_back(num(spent));
  };
  if (req.use_bucket) add(res.release, res.cost, res.spent);
  if (req.parent) add(res.parent_release, res.parent_cost, res.parent_spent);
  if (share) out.push_back(num(static_cast<double>(res.share_release)));
  return out;
}

std::vector<std::string> restore_call(const AcquireRequest& req, const std::string& prefix, std::string_view now_override) {
  const std::string_view tag = req.hash_tag.empty() ? req.bucket.name : req.hash_tag;
  const int buckets = (req.use_bucket ? 1 : 0) + (req.parent ? 1 : 0);
  std::vector<std::string> out{std::to_string(buckets)};
  if (req.use_bucket) out.push_back(redis_key(prefix, tag, req.bucket.name));
  if (req.parent) out.push_back(redis_key(prefix, tag, req.parent->name));
  out.emplace_back(now_override);
  if (req.use_bucket) out.push_back(num(req.permits));
  if (req.parent) out.push_back(num(req.parent_permits));
  return out;
}

std::optional<RefundResult> parse_restore_reply(const AcquireRequest& req, const std::vector<std::string>& items) {
  const std::size_t buckets = (req.use_bucket ? 1 : 0) + (req.parent ? 1 : 0);
  if (items.size() != buckets) return std::nullopt;
  RefundResult out;
  std::size_t i = 0;
  if (req.use_bucket) out.bucket = items[i++] == "1" ? 1 : 0;
  if (req.parent) out.parent = items[i++] == "1" ? 1 : 0;
  return out;
}

std::optional<RefundResult> parse_refund_reply(const AcquireRequest& req, const std::vector<std::string>& items) {
  const std::size_t buckets = (req.use_bucket ? 1 : 0) + (req.parent ? 1 : 0);
  if (items.size() != 2 * buckets) return std::nullopt;
  RefundResult out;
  try {
    std::size_t i = 0;
    auto bucket = [&](std::uint32_t& returned) {
      returned = static_cast<std::uint32_t>(std::stoul(items[i]));
      out.remembered = out.remembered || items[i + 1] == "1";
      i += 2;
    };
    if (req.use_bucket) bucket(out.bucket);
    if (req.parent) bucket(out.parent);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return out;
}

std::optional<StoreDecision> parse_acquire_reply(const std::vector<std::string>& items, std::size_t quotas,
                                                bool adaptive, bool metered) {
  if (items.size() != 13 + 5 * quotas + (adaptive ? 6 : 0) + (metered ? 3 : 0)) return std::nullopt;
  auto micros = [](const std::string& s) {
    const double v = std::stod(s);  // the script's "never" is 2^53
    return v >= 9007199254740992.0 ? limiter::kInfinite : static_cast<Micros>(v);
  };
  try {
    StoreDecision out;
    auto& d = out.decision;
    d.granted = items[0] == "1";
    d.wait_us = micros(items[1]);
    d.retry_after_us = micros(items[2]);
    d.remaining = std::stod(items[3]);
    out.max_permits = std::stod(items[4]);
    const int bound = std::stoi(items[5]);
    if (bound < 0 || bound > 3) return std::nullopt;
    out.bound = static_cast<Bound>(bound);
    out.parent_bound = out.bound == Bound::parent;
    out.reservation = {micros(items[7]), micros(items[8]), std::stod(items[9]),
                       micros(items[10]), micros(items[11]), std::stod(items[12])};
    if (d.granted) out.reservation.share_release = micros(items[6]);
    else out.bound_quota = std::stoul(items[6]);
    d.next_free = out.reservation.release;
    d.cost_us = out.reservation.cost;
    d.spent = out.reservation.spent;
    out.quotas.reserve(quotas);
    for (std::size_t i = 0; i < quotas; ++i) {
      const std::size_t b = 13 + 5 * i;
      limiter::WindowDecision q;
      q.admitted = items[b] == "1";
      q.used = std::stod(items[b + 1]);
      q.remaining = std::stod(items[b + 2]);
      q.retry_after_us = micros(items[b + 3]);
      q.reset_us = micros(items[b + 4]);
      out.quotas.push_back(q);
    }
    if (adaptive) {
      out.effective_rate = std::stod(items[13 + 5 * quotas]);
      out.paused_us = micros(items[14 + 5 * quotas]);
      out.last_cut_us = micros(items[15 + 5 * quotas]);
      out.grant_seq = std::stod(items[16 + 5 * quotas]);
      out.windows = {std::stoll(items[17 + 5 * quotas]), std::stoll(items[18 + 5 * quotas])};
    }
    if (metered) {
      const std::size_t m = 13 + 5 * quotas + (adaptive ? 6 : 0);
      const int color = std::stoi(items[m]);
      if (color < 0 || color > 2) return std::nullopt;
      out.color = static_cast<limiter::Color>(color);
      out.meter_committed = std::stod(items[m + 1]);
      out.meter_excess = std::stod(items[m + 2]);
    }
    return out;
  } catch (const std::exception&) {  // stod/stoll on something that is not a number
    return std::nullopt;
  }
}

}  // namespace tollgate::store

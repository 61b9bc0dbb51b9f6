#include "tollgate/app/simulator.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace tollgate::app {

using nlohmann::json;

namespace {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void only_keys(const json& j, std::initializer_list<const char*> keys) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : keys) ok = ok || it.key() == k;
    if (!ok) throw InputError("unknown field '" + it.key() + "'");
  }
}

limiter::Micros micros_field(const json& j, const char* key, bool required, limiter::Micros def = 0) {
  if (!j.contains(key)) {
    if (required) throw InputError(std::string("'") + key + "' is required");
    return def;
  }
  const json& v = j[key];
  if (!v.is_number_integer()) throw InputError(std::string("'") + key + "' must be an integer (microseconds)");
  return v.get<limiter::Micros>();
}

double number_field(const json& j, const char* key, double def) {
  if (!j.contains(key)) return def;
  const json& v = j[key];
  if (!v.is_number()) throw InputError(std::string("'") + key + "' must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw InputError(std::string("'") + key + "' must be finite");
  return d;
}

std::string string_field(const json& j, const char* key, const char* def) {
  if (!j.contains(key)) return def;
  if (!j[key].is_string()) throw InputError(std::string("'") + key + "' must be a string");
  return j[key].get<std::string>();
}

json decision_json(const limiter::Decision& d) {
  if (d.granted) return {{"granted", true}, {"wait_us", d.wait_us}};
  return {{"granted", false}, {"retry_after_us", d.retry_after_us}};
}

}  // namespace

std::string Simulator::handle_line(const std::string& line) {
  try {
    json in;
    try {
      in = json::parse(line);
    } catch (const json::parse_error&) {
      throw InputError("not a JSON object");
    }
    if (!in.is_object()) throw InputError("not a JSON object");
    const std::string op = string_field(in, "op", "");
    if (op.empty()) throw InputError("'op' is required");

    if (op == "config") {
      only_keys(in, {"op", "t_us", "rate", "burst", "mode", "initial", "warmup_us", "cold_factor"});
      const limiter::Micros t = micros_field(in, "t_us", false, 0);
      limiter::BucketParams p;
      p.rate = number_field(in, "rate", 0);
      if (!(p.rate > 0)) throw InputError("'rate' must be > 0");
      if (in.contains("burst")) p.burst = number_field(in, "burst", 0);
      p.warmup_us = micros_field(in, "warmup_us", false, 0);
      p.cold_factor = number_field(in, "cold_factor", 3.0);
      const std::string mode = string_field(in, "mode", "pay_now");
      if (mode == "pay_now") p.mode = limiter::Mode::pay_now;
      else if (mode == "pay_later") p.mode = limiter::Mode::pay_later;
      else throw InputError("'mode' must be \"pay_now\" or \"pay_later\"");
      const std::string initial = string_field(in, "initial", "full");
      limiter::TokenBucket::Initial init;
      if (initial == "full") init = limiter::TokenBucket::Initial::full;
      else if (initial == "empty") init = limiter::TokenBucket::Initial::empty;
      else throw InputError("'initial' must be \"full\" or \"empty\"");
      try {
        bucket_ = std::make_unique<limiter::TokenBucket>(p, t, init);
      } catch (const std::invalid_argument& e) {
        throw InputError(e.what());
      }
      return json{{"ok", true}}.dump();
    }

    if (!bucket_) throw InputError("no bucket yet: send {\"op\":\"config\",...} first");
    if (op == "try_acquire" || op == "acquire") {
      if (op == "try_acquire") only_keys(in, {"op", "t_us", "permits", "timeout_us"});
      else only_keys(in, {"op", "t_us", "permits"});
      const limiter::Micros t = micros_field(in, "t_us", true);
      const double permits = number_field(in, "permits", 1.0);
      if (!(permits > 0)) throw InputError("'permits' must be > 0");
      const limiter::Micros timeout = op == "acquire" ? limiter::kInfinite : micros_field(in, "timeout_us", false, 0);
      if (timeout < 0) throw InputError("'timeout_us' must be >= 0");
      return decision_json(bucket_->try_acquire(permits, timeout, t)).dump();
    }
    if (op == "set_rate") {
      only_keys(in, {"op", "t_us", "rate"});
      const limiter::Micros t = micros_field(in, "t_us", true);
      const double rate = number_field(in, "rate", 0);
      if (!(rate > 0)) throw InputError("'rate' must be > 0");
      // An explicit burst stays as configured; the default (one second of permits) follows the rate.
      bucket_->set_rate(rate, t);
      return json{{"ok", true}}.dump();
    }
    throw InputError("unknown op '" + op + "'");
  } catch (const std::exception& e) {
    return json{{"error", e.what()}}.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace tollgate::app

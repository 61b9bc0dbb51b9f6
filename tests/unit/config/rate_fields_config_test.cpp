// upstreams.<name>.rate_fields: which rate-limit fields a supplier sends and how it spells them.
// The defaults, every key read, and each refusal naming its field.
#include <gtest/gtest.h>

#include "support/config_text.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

using testing::error_of;
using Style = RateFieldsConfig::Style;
using Unit = RateFieldsConfig::ResetUnit;

std::string with_fields(const std::string& rate_fields) {
  return R"({"upstreams":{"supplier":{"url":"http://127.0.0.1:9000","rate_fields":)" + rate_fields +
         R"(}},"routes":[{"prefix":"/","upstream":"supplier"}]})";
}

RateFieldsConfig parsed(const std::string& rate_fields) {
  return parse_gateway_config(with_fields(rate_fields)).upstreams.at(0).rate_fields;
}

TEST(RateFieldsConfig, DefaultRecognisesTheCommonForms) {
  const GatewayConfig c = parse_gateway_config(
      R"({"upstreams":{"s":{"url":"http://127.0.0.1:9000"}},"routes":[{"prefix":"/","upstream":"s"}]})");
  const RateFieldsConfig& f = c.upstreams.at(0).rate_fields;
  EXPECT_EQ(f.style, Style::automatic);
  EXPECT_EQ(f.reset_unit, Unit::automatic);
  EXPECT_EQ(f.window_s, 0u);
  EXPECT_EQ(f, RateFieldsConfig{});
  EXPECT_EQ(parsed("{}"), RateFieldsConfig{});
}

TEST(RateFieldsConfig, EveryStyleAndUnitByItsName) {
  const std::pair<const char*, Style> styles[] = {{"auto", Style::automatic}, {"ietf", Style::ietf},
                                                  {"legacy", Style::legacy},  {"x", Style::x},
                                                  {"none", Style::none}};
  for (const auto& [name, style] : styles)
    EXPECT_EQ(parsed(std::string(R"({"style":")") + name + "\"}").style, style) << name;
  const std::pair<const char*, Unit> units[] = {{"auto", Unit::automatic},   {"seconds", Unit::seconds},
                                                {"unix", Unit::unix},        {"unix_ms", Unit::unix_ms},
                                                {"http_date", Unit::http_date}};
  for (const auto& [name, unit] : units)
    EXPECT_EQ(parsed(std::string(R"({"style":"x","reset":")") + name + "\"}").reset_unit, unit) << name;
}

TEST(RateFieldsConfig, CustomNamesPolicyAndWindow) {
  const RateFieldsConfig f = parsed(
      R"({"style":"custom","limit":"X-Quota-Limit","remaining":"X-Quota-Left","reset_field":"X-Quota-Reset",
          "reset":"unix_ms","window_s":3600})");
  EXPECT_EQ(f.style, Style::custom);
  EXPECT_EQ(f.limit_field, "X-Quota-Limit");
  EXPECT_EQ(f.remaining_field, "X-Quota-Left");
  EXPECT_EQ(f.reset_field, "X-Quota-Reset");
  EXPECT_EQ(f.reset_unit, Unit::unix_ms);
  EXPECT_EQ(f.window_s, 3600u);

  const RateFieldsConfig u =
      parsed(R"({"style":"custom","usage":{"field":"Sforce-Limit-Info","key":"api-usage"},"window_s":86400})");
  EXPECT_EQ(u.usage_field, "Sforce-Limit-Info");
  EXPECT_EQ(u.usage_key, "api-usage");
  EXPECT_EQ(u.window_s, 86400u);
  EXPECT_EQ(parsed(R"({"style":"custom","usage":{"field":"X-Usage"}})").usage_key, "");

  EXPECT_EQ(parsed(R"({"policy":"hourly"})").policy, "hourly");
  EXPECT_EQ(parsed(R"({"style":"ietf","policy":"per minute"})").policy, "per minute");
}

TEST(RateFieldsConfig, BadValuesAreRefusedNamingTheField) {
  EXPECT_EQ(error_of(with_fields(R"({"reset":"minutes"})")),
            "upstreams.supplier.rate_fields.reset: must be \"auto\", \"seconds\", \"unix\", \"unix_ms\" or "
            "\"http_date\" (got \"minutes\")");
  EXPECT_EQ(error_of(with_fields(R"({"style":"github"})")),
            "upstreams.supplier.rate_fields.style: must be \"auto\", \"ietf\", \"legacy\", \"x\", \"custom\" or "
            "\"none\" (got \"github\")");
  EXPECT_EQ(error_of(with_fields(R"({"style":1})")), "upstreams.supplier.rate_fields.style: must be a string");
  EXPECT_EQ(error_of(with_fields(R"("x")")), "upstreams.supplier.rate_fields: must be an object");
  EXPECT_EQ(error_of(with_fields(R"({"remainder":"X-Left"})")), "upstreams.supplier.rate_fields.remainder: unknown field");
  EXPECT_EQ(error_of(with_fields(R"({"window_s":86401})")),
            "upstreams.supplier.rate_fields.window_s: must be within [0, 86400]");
  EXPECT_EQ(error_of(with_fields(R"({"window_s":-1})")), "upstreams.supplier.rate_fields.window_s: must be >= 0");
  EXPECT_EQ(error_of(with_fields(R"({"window_s":1.5})")), "upstreams.supplier.rate_fields.window_s: must be an integer");
  EXPECT_EQ(error_of(with_fields("{\"policy\":\"a\\nb\"}")),
            "upstreams.supplier.rate_fields.policy: holds a character outside visible ASCII");
}

TEST(RateFieldsConfig, CustomNamesMustBeFieldNames) {
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","remaining":"X Left"})")),
            "upstreams.supplier.rate_fields.remaining: is not a field name: 'X Left'");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","remaining":"X-Left","limit":"X:Limit"})")),
            "upstreams.supplier.rate_fields.limit: is not a field name: 'X:Limit'");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","remaining":"X-Left","reset_field":""})")),
            "upstreams.supplier.rate_fields.reset_field: must name a field");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","usage":{"field":"Sforce Limit"}})")),
            "upstreams.supplier.rate_fields.usage.field: is not a field name: 'Sforce Limit'");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","usage":{"key":"api-usage"}})")),
            "upstreams.supplier.rate_fields.usage.field: is required (e.g. \"Sforce-Limit-Info\")");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","usage":{"field":"U","key":"a=b"}})")),
            "upstreams.supplier.rate_fields.usage.key: is not a token: 'a=b' (e.g. \"api-usage\")");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","usage":{"field":"U","limit":"L"}})")),
            "upstreams.supplier.rate_fields.usage.limit: unknown field");
}

TEST(RateFieldsConfig, SettingsTheStyleWouldNotReadAreRefused) {
  EXPECT_EQ(error_of(with_fields(R"({"remaining":"X-Left"})")),
            "upstreams.supplier.rate_fields.remaining: applies only to style \"custom\"");
  EXPECT_EQ(error_of(with_fields(R"({"style":"x","usage":{"field":"U"}})")),
            "upstreams.supplier.rate_fields.usage: applies only to style \"custom\"");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom"})")),
            "upstreams.supplier.rate_fields.remaining: (or .usage) is required with style \"custom\"");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","remaining":"L","usage":{"field":"U"}})")),
            "upstreams.supplier.rate_fields.remaining: and .usage are both given: use one");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","limit":"L","usage":{"field":"U"}})")),
            "upstreams.supplier.rate_fields.limit: does not apply with .usage (its field carries the limit)");
  EXPECT_EQ(error_of(with_fields(R"({"style":"custom","remaining":"L","reset":"unix"})")),
            "upstreams.supplier.rate_fields.reset: needs .reset_field (the field it reads)");
  EXPECT_EQ(error_of(with_fields(R"({"style":"legacy","policy":"p"})")),
            "upstreams.supplier.rate_fields.policy: applies only to style \"auto\" or \"ietf\" (the RateLimit "
            "field's policies)");
  EXPECT_EQ(error_of(with_fields(R"({"style":"ietf","reset":"unix"})")),
            "upstreams.supplier.rate_fields.reset: does not apply to style \"ietf\" (its t is always seconds from now)");
  EXPECT_EQ(error_of(with_fields(R"({"style":"none","window_s":60})")),
            "upstreams.supplier.rate_fields.window_s: does not apply to style \"none\" (nothing is read)");
}

}  // namespace
}  // namespace tollgate::config

// docs/configuration.md cannot drift from the parser: every field the parser accepts has its row
// there (first cell: the field's path in backticks), and every path documented there is one the
// parser accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The backticked first cells of the table rows: "| `proxy.max_body_bytes` | ...".
std::set<std::string> documented_paths(const std::string& text) {
  std::set<std::string> out;
  static const std::regex row(R"(^\|\s*`([^`]+)`\s*\|)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) out.insert(m[1]);
  }
  return out;
}

TEST(ConfigReference, EveryFieldTheParserAcceptsIsDocumented) {
  const std::string doc = read(TOLLGATE_SOURCE_DIR "/docs/configuration.md");
  ASSERT_FALSE(doc.empty()) << "docs/configuration.md is missing";
  const std::set<std::string> documented = documented_paths(doc);
  for (const std::string& p : config_field_paths())
    EXPECT_TRUE(documented.count(p)) << "docs/configuration.md has no row for `" << p << "`";
}

TEST(ConfigReference, EveryDocumentedFieldIsOneTheParserAccepts) {
  const std::vector<std::string> fields = config_field_paths();
  const std::set<std::string> accepted(fields.begin(), fields.end());
  for (const std::string& p : documented_paths(read(TOLLGATE_SOURCE_DIR "/docs/configuration.md")))
    EXPECT_TRUE(accepted.count(p)) << "docs/configuration.md documents `" << p << "`, which the parser does not accept";
}

TEST(ConfigReference, ThePathsAreTheParsers) {
  // Spot checks that the list is the parser's own: a field it accepts is listed, an unknown one
  // is refused by the parser and absent from the list.
  const std::vector<std::string> fields = config_field_paths();
  auto has = [&](const std::string& p) { return std::find(fields.begin(), fields.end(), p) != fields.end(); };
  EXPECT_TRUE(has("proxy.max_body_bytes"));
  EXPECT_TRUE(has("upstreams.<name>.tls.insecure_skip_verify"));
  EXPECT_TRUE(has("limits.rules[].quotas[].limitCount"));
  EXPECT_FALSE(has("proxy"));  // objects are listed by their fields
  EXPECT_FALSE(has("proxy.max_bodybytes"));
  EXPECT_THROW(parse_gateway_config(R"({"upstreams":{"a":{"url":"http://x"}},"routes":[{"prefix":"/","upstream":"a"}],
                                        "proxy":{"max_bodybytes":1}})"),
               ConfigError);
}

}  // namespace
}  // namespace tollgate::config

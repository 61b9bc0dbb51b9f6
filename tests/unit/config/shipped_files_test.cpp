// The files shipped for operators: every conf/ variant parses, and docker-compose.yml names the
// services it should and mounts paths that exist (tests/compose/run.sh runs the fleet itself).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tollgate/config/gateway_config.hpp"

namespace tollgate::config {
namespace {

const std::string kRoot = TOLLGATE_SOURCE_DIR;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ShippedFiles, EveryConfVariantParses) {
  for (const char* f : {"conf/gateway.json", "conf/gateway-mysql.json", "conf/gateway-redis.json",
                        "conf/gateway-redis-cluster.json", "conf/gateway-redis-sentinel.json",
                        "conf/compose/gateway.json"}) {
    SCOPED_TRACE(f);
    EXPECT_NO_THROW(load_gateway_config(kRoot + "/" + f));
  }
  EXPECT_EQ(load_gateway_config(kRoot + "/conf/compose/gateway.json").limits.source, RuleSource::mysql);
}

TEST(ShippedFiles, ComposeServicesAndMounts) {
  const std::string text = read(kRoot + "/docker-compose.yml");
  ASSERT_FALSE(text.empty());
  std::set<std::string> services;
  const std::regex service(R"(^  ([a-z][a-z0-9-]*):\s*$)");
  const std::regex mount(R"(^\s*- \./([^:]+):)");
  std::istringstream lines(text);
  std::string line;
  bool in_services = false;
  int mounts = 0;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] != ' ' && line[0] != '#') in_services = line.rfind("services:", 0) == 0;
    std::smatch m;
    if (in_services && std::regex_match(line, m, service)) services.insert(m[1]);
    if (std::regex_search(line, m, mount)) {
      ++mounts;
      EXPECT_TRUE(std::filesystem::exists(kRoot + "/" + m[1].str())) << "mounted but missing: " << m[1];
    }
  }
  EXPECT_EQ(services, (std::set<std::string>{"mysql", "redis", "upstream", "gateway-a", "gateway-b"}));
  EXPECT_GE(mounts, 3);
  EXPECT_TRUE(std::filesystem::exists(kRoot + "/Dockerfile"));
}

// What tests/compose/run.sh proves on a machine with a Docker engine, checked on the text where there
// is none: one image built once, the admin token required, the image not running as root.
TEST(ShippedFiles, ComposeBuildsOneImageAndRequiresTheToken) {
  const std::string compose = read(kRoot + "/docker-compose.yml");
  const std::regex build(R"(^\s+build:)");
  int builds = 0;
  std::istringstream lines(compose);
  for (std::string line; std::getline(lines, line);) builds += std::regex_search(line, build);
  EXPECT_EQ(builds, 1);
  EXPECT_NE(compose.find("${TOLLGATE_ADMIN_TOKEN:?"), std::string::npos);
  EXPECT_EQ(compose.find("TOLLGATE_ADMIN_TOKEN:-"), std::string::npos);
  const std::string docker = read(kRoot + "/Dockerfile");
  const auto user = docker.rfind("\nUSER ");
  ASSERT_NE(user, std::string::npos);
  const std::string who = docker.substr(user + 6, docker.find_first_of(":\n", user + 6) - user - 6);
  EXPECT_NE(who, "root");
  EXPECT_NE(who, "0");
  for (const char* k : {"\nHEALTHCHECK ", "\nCMD ", "\nEXPOSE ", "\nSTOPSIGNAL SIGTERM"}) {
    EXPECT_NE(docker.find(k), std::string::npos) << k;
  }
}

// The image says the version the binary says: the Dockerfile's default TOLLGATE_VERSION (its OCI
// version label) is CMakeLists.txt's project version.
TEST(ShippedFiles, ImageLabelsCarryTheProjectVersion) {
  std::smatch m;
  const std::string cmake = read(kRoot + "/CMakeLists.txt");
  ASSERT_TRUE(std::regex_search(cmake, m, std::regex(R"(project\(tollgate VERSION ([0-9.]+))")));
  const std::string version = m[1];
  const std::string docker = read(kRoot + "/Dockerfile");
  EXPECT_NE(docker.find("\nARG TOLLGATE_VERSION=" + version + "\n"), std::string::npos) << "Dockerfile: ARG TOLLGATE_VERSION=" << version;
  EXPECT_NE(docker.find("org.opencontainers.image.version=\"${TOLLGATE_VERSION}\""), std::string::npos);
  EXPECT_NE(docker.find("org.opencontainers.image.revision=\"${TOLLGATE_COMMIT}\""), std::string::npos);
}

TEST(ShippedFiles, SqlScriptsAreIdempotentByConstruction) {
  const std::string schema = read(kRoot + "/sql/schema.sql");
  const std::regex create(R"(CREATE TABLE (?!IF NOT EXISTS))");
  EXPECT_FALSE(std::regex_search(schema, create)) << "every CREATE TABLE needs IF NOT EXISTS";
  const std::string seed = read(kRoot + "/sql/seed.sql");
  EXPECT_NE(seed.find("ON DUPLICATE KEY UPDATE"), std::string::npos);
}

}  // namespace
}  // namespace tollgate::config

// A real MariaDB for integration tests. scripts/test.sh starts one and exports
// TOLLGATE_TEST_MYSQL_DIR and TOLLGATE_TEST_MYSQL_PORT; without them the tests start their own
// (scripts/mysql-server.sh) if mariadbd is installed, and skip with a message if it is not.
#pragma once

#include <string>

namespace tollgate::testing {

class MariaDb {
 public:
  static MariaDb& shared();
  bool available() const { return available_; }
  const std::string& why_not() const { return why_not_; }
  int port() const { return port_; }

  // A new database loaded with sql/schema.sql (and sql/seed.sql when seed is true).
  std::string create_database(bool seed);
  // Runs SQL as root; returns the client's output (tab-separated, no headers). Throws on failure.
  std::string sql(const std::string& database, const std::string& statements);
  void stop();
  void start();

 private:
  MariaDb();
  ~MariaDb();
  bool available_ = false;
  bool owned_ = false;
  std::string why_not_;
  std::string dir_;
  int port_ = -1;
  int next_db_ = 0;
};

}  // namespace tollgate::testing

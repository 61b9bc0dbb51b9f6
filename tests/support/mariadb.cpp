#include "support/mariadb.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "support/process.hpp"

namespace tollgate::testing {

namespace {
const std::string kScript = std::string(TOLLGATE_SOURCE_DIR) + "/scripts/mysql-server.sh";

std::string run(const std::string& shell, int* code = nullptr) {
  Process p({"/bin/sh", "-c", shell});
  const auto rc = p.wait_exit(std::chrono::seconds(120));
  if (code) *code = rc.value_or(-1);
  else if (rc != 0) throw std::runtime_error("command failed (" + shell + "): " + p.output());
  return p.output();
}

bool on_path(const char* program) {
  int code = 0;
  run(std::string("command -v ") + program + " >/dev/null 2>&1", &code);
  return code == 0;
}
}  // namespace

MariaDb& MariaDb::shared() {
  static MariaDb instance;
  return instance;
}

MariaDb::MariaDb() {
  const char* dir = std::getenv("TOLLGATE_TEST_MYSQL_DIR");
  const char* port = std::getenv("TOLLGATE_TEST_MYSQL_PORT");
  if (dir && port) {
    dir_ = dir;
    port_ = std::atoi(port);
    available_ = true;
    return;
  }
  if (!on_path("mariadbd") || !on_path("mariadb-install-db")) {
    why_not_ = "mariadbd is not installed (scripts/test.sh installs mariadb-server)";
    return;
  }
  dir_ = temp_dir();
  port_ = unused_port();
  owned_ = true;
  int code = 0;
  const std::string out = run(kScript + " start " + dir_ + " " + std::to_string(port_) + " 2>&1", &code);
  if (code != 0) throw std::runtime_error("could not start MariaDB: " + out);
  available_ = true;
}

MariaDb::~MariaDb() {
  if (owned_) {
    int code = 0;
    run(kScript + " stop " + dir_, &code);
  }
}

std::string MariaDb::sql(const std::string& database, const std::string& statements) {
  const std::string file = dir_ + "/stmt-" + std::to_string(getpid()) + ".sql";
  write_file(file, statements);
  return run("mariadb -N -B -S " + dir_ + "/sock -uroot " + database + " < " + file + " 2>&1");
}

std::string MariaDb::create_database(bool seed) {
  const std::string db = "tg_" + std::to_string(getpid()) + "_" + std::to_string(next_db_++);
  run("echo 'DROP DATABASE IF EXISTS " + db + "; CREATE DATABASE " + db + "' | mariadb -S " + dir_ + "/sock -uroot");
  run("mariadb -S " + dir_ + "/sock -uroot " + db + " < " + TOLLGATE_SOURCE_DIR + "/sql/schema.sql");
  if (seed) run("mariadb -S " + dir_ + "/sock -uroot " + db + " < " + TOLLGATE_SOURCE_DIR + "/sql/seed.sql");
  return db;
}

void MariaDb::stop() { run(kScript + " stop " + dir_); }
void MariaDb::start() { run(kScript + " start " + dir_ + " " + std::to_string(port_)); }

}  // namespace tollgate::testing

// Rules and the fleet switch from MySQL (t_ratelimite_conf, t_ratelimite_switch), through MySQL
// Connector/C++ 1.1. Blocking calls: used from the config thread and the admin thread only, never
// from request threads. One connection, reopened after any error.
#pragma once

#include <memory>
#include <mutex>
#include <map>
#include <string>

#include "tollgate/config/config_source.hpp"
#include "tollgate/config/gateway_config.hpp"

namespace sql {
class Connection;
}

namespace tollgate::config {

// The MySQL Connector/C++ library in use ("1.1.12"), for tollgate --version.
std::string connector_version();

class MysqlSource final : public ConfigSource, public SwitchWriter {
 public:
  explicit MysqlSource(MysqlConfig config);
  ~MysqlSource() override;

  LoadResult load() override;
  std::string describe() const override;
  // COUNT(*), MAX(lastModifyTime), a checksum of every row, and the switch row: one round trip.
  std::optional<std::string> fingerprint() override;
  bool polled() const override { return true; }

  SwitchChange write_switch(SwitchMode mode, const std::string& who, std::int64_t revert_after_ms) override;
  void tick() override;

 private:
  sql::Connection& connection();  // opens (or reopens) the connection; throws on failure
  void drop_connection();
  template <class F>
  auto with_connection(F&& f);

  MysqlConfig config_;
  std::mutex mu_;
  std::unique_ptr<sql::Connection> conn_;
  std::map<std::string, std::string> columns_;  // of t_ratelimite_conf: name -> data type, read per connection and load
  void read_columns(sql::Connection& c);
  void read_switch(sql::Connection& c, LoadResult& out);  // the fleet's switch row, into out
  bool quota_table_ = false;       // t_ratelimite_quota exists (checked per connection, and per poll until it does)
  void check_quota_table(sql::Connection& c);
};

}  // namespace tollgate::config

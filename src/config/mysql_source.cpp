#include "tollgate/config/mysql_source.hpp"

#include <cppconn/driver.h>
#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <mysql_driver.h>

#include <map>
#include <sstream>

namespace tollgate::config {

std::string connector_version() {
  sql::Driver* d = sql::mysql::get_mysql_driver_instance();
  return std::to_string(d->getMajorVersion()) + "." + std::to_string(d->getMinorVersion()) + "." +
         std::to_string(d->getPatchVersion());
}


namespace {

// Tollgate's own, nullable columns: read only where the table has them, so the original table
// (without them) keeps working.
const char* const kExtensionColumns[] = {"burst", "warmupSeconds", "scope", "mode", "keyBy", "maxShare", "adaptive",
                                         "matchCase", "cost", "channelCost", "priority", "algorithm", "cir",
                                         "cbs", "ebs", "pir", "pbs", "yellow"};

// Quota rows (window quotas of a rule), fingerprinted like the rules: any edit changes the CRC sum.
// The switch row's states: what state, and revertTo when a revert is pending, may hold.
constexpr const char* kStates = " is not 0 (off), 1 (enforce) or 2 (shadow)";
std::optional<SwitchMode> switch_mode_of_state(int v) {
  if (v == 0) return SwitchMode::off;
  if (v == 1) return SwitchMode::enforce;
  if (v == 2) return SwitchMode::shadow;
  return std::nullopt;
}

const char* const kQuotaFingerprint =
    "(SELECT CONCAT(COUNT(*), '/', IFNULL(MAX(lastModifyTime), ''), '/', IFNULL(SUM(CRC32(CONCAT_WS('|', quotaId, "
    "IFNULL(configId,''), IFNULL(periodSeconds,''), IFNULL(limitCount,''), IFNULL(algorithm,''), IFNULL(keyBy,''), "
    "IFNULL(status,'')))), 0)) FROM t_ratelimite_quota)";

std::string describe_error(const sql::SQLException& e) {
  std::ostringstream o;
  o << "mysql: " << e.what() << " (error " << e.getErrorCode() << ", state " << e.getSQLState() << ")";
  return o.str();
}

}  // namespace

MysqlSource::MysqlSource(MysqlConfig config) : config_(std::move(config)) {}
MysqlSource::~MysqlSource() = default;

std::string MysqlSource::describe() const {
  return "mysql:" + config_.user + "@" + config_.host + ":" + std::to_string(config_.port) + "/" + config_.database;
}

void MysqlSource::drop_connection() {
  conn_.reset();
  columns_.clear();
}

sql::Connection& MysqlSource::connection() {
  if (conn_ && !conn_->isClosed()) return *conn_;
  drop_connection();
  sql::mysql::MySQL_Driver* driver = sql::mysql::get_mysql_driver_instance();
  sql::ConnectOptionsMap opts;
  opts["hostName"] = sql::SQLString("tcp://" + config_.host + ":" + std::to_string(config_.port));
  opts["userName"] = sql::SQLString(config_.user);
  opts["password"] = sql::SQLString(config_.password);
  opts["schema"] = sql::SQLString(config_.database);
  // Connector/C++ takes these in whole seconds; at least 1.
  opts["OPT_CONNECT_TIMEOUT"] = std::max(1, static_cast<int>((config_.connect_timeout_ms + 999) / 1000));
  opts["OPT_READ_TIMEOUT"] = std::max(1, static_cast<int>((config_.query_timeout_ms + 999) / 1000));
  opts["OPT_WRITE_TIMEOUT"] = std::max(1, static_cast<int>((config_.query_timeout_ms + 999) / 1000));
  opts["OPT_RECONNECT"] = false;
  conn_.reset(driver->connect(opts));
  read_columns(*conn_);
  if (columns_.empty()) {
    drop_connection();
    throw std::runtime_error("mysql: table t_ratelimite_conf does not exist in " + config_.database +
                             " (load sql/schema.sql)");
  }
  check_quota_table(*conn_);
  return *conn_;
}

void MysqlSource::read_columns(sql::Connection& c) {
  std::unique_ptr<sql::Statement> st(c.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery(
      "SELECT COLUMN_NAME, LOWER(DATA_TYPE) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
      "AND TABLE_NAME = 't_ratelimite_conf'"));
  columns_.clear();
  while (rs->next()) columns_[rs->getString(1)] = rs->getString(2);
}

void MysqlSource::check_quota_table(sql::Connection& c) {
  std::unique_ptr<sql::Statement> st(c.createStatement());
  std::unique_ptr<sql::ResultSet> rs(st->executeQuery(
      "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
      "AND TABLE_NAME = 't_ratelimite_quota'"));
  quota_table_ = rs->next() && rs->getInt(1) > 0;
}

template <class F>
auto MysqlSource::with_connection(F&& f) {
  std::lock_guard lock(mu_);
  try {
    return f(connection());
  } catch (const sql::SQLException& e) {
    drop_connection();  // the next call reconnects
    throw std::runtime_error(describe_error(e));
  }
}

std::optional<std::string> MysqlSource::fingerprint() {
  return with_connection([this](sql::Connection& c) {
    if (!quota_table_) check_quota_table(c);  // created while we run: noticed on the next poll
    std::string row_expr =
        "CONCAT_WS('|', configId, IFNULL(channelType,''), IFNULL(interfaceNo,''), IFNULL(interfaceUrl,''), "
        "IFNULL(rateLimit,''), IFNULL(cache,''), status";
    for (const char* col : kExtensionColumns)
      if (columns_.count(col)) row_expr += std::string(", IFNULL(") + col + ",'')";
    row_expr += ")";
    std::unique_ptr<sql::PreparedStatement> ps(c.prepareStatement(
        "SELECT (SELECT CONCAT(COUNT(*), '/', IFNULL(MAX(lastModifyTime), ''), '/', IFNULL(SUM(CRC32(" + row_expr +
        ")), 0)) FROM t_ratelimite_conf), "
        "(SELECT CONCAT(state, '/', changedBy, '/', changedAt, '/', IFNULL(revertAt, '')) FROM t_ratelimite_switch "
        "WHERE name = ?), " + std::string(quota_table_ ? kQuotaFingerprint : "'-'")));
    ps->setString(1, config_.switch_name);
    std::unique_ptr<sql::ResultSet> rs(ps->executeQuery());
    rs->next();
    std::string fp = rs->getString(1);
    fp += "#";
    fp += rs->isNull(2) ? std::string("-") : std::string(rs->getString(2));
    fp += "#";
    fp += rs->getString(3);
    return std::optional<std::string>(fp);
  });
}

void MysqlSource::read_switch(sql::Connection& c, LoadResult& out) {
  std::unique_ptr<sql::PreparedStatement> ps(c.prepareStatement(
      "SELECT state, changedBy, CAST(UNIX_TIMESTAMP(changedAt) * 1000 AS SIGNED), "
      "IFNULL(CAST(UNIX_TIMESTAMP(revertAt) * 1000 AS SIGNED), 0), IFNULL(revertTo, -1) "
      "FROM t_ratelimite_switch WHERE name = ?"));
  ps->setString(1, config_.switch_name);
  std::unique_ptr<sql::ResultSet> sw(ps->executeQuery());
  if (sw->next()) {
    // A state the gateway does not know is explained, never guessed at: the switch stays as it
    // is. A pending revert to an unknown state is not done (tick() skips it) and not shown.
    const std::string row = "t_ratelimite_switch[name=" + config_.switch_name + "]";
    const int state = sw->getInt(1), revert_to = sw->getInt(5);
    const std::int64_t revert_at = sw->getInt64(4);
    const std::optional<SwitchMode> mode = switch_mode_of_state(state);
    const std::optional<SwitchMode> then = switch_mode_of_state(revert_to);
    if (!mode) {
      out.switch_error = row + ".state: " + std::to_string(state) + kStates + "; the switch stays as it was";
    } else {
      if (revert_at != 0 && !then)
        out.switch_error = row + ".revertTo: " + (revert_to == -1 ? std::string("NULL") : std::to_string(revert_to)) +
                           kStates + "; the revert is not done";
      out.fleet_switch = SwitchRecord{*mode, sw->getString(2), sw->getInt64(3), then ? revert_at : 0, then.value_or(*mode)};
    }
  }
}

LoadResult MysqlSource::load() {
  return with_connection([this](sql::Connection& c) {
    LoadResult out;
    read_columns(c);  // a table upgraded (sql/upgrade.sql) while we run is read as it now is
    // A FLOAT(3,2) cache (the table before sql/upgrade.sql) holds 0.2 as 0.200000003: read as the
    // two decimals it was written with. The upgraded DOUBLE column holds the value itself.
    const bool float_cache = columns_.count("cache") && columns_.at("cache") == "float";
    std::string query = std::string("SELECT configId, channelType, interfaceNo, interfaceUrl, rateLimit, ") +
                        (float_cache ? "CAST(cache AS DECIMAL(6,2))" : "cache") + " AS cache, status";
    for (const char* col : kExtensionColumns)
      if (columns_.count(col)) query += std::string(", ") + col;
    query += " FROM t_ratelimite_conf ORDER BY configId";
    std::unique_ptr<sql::Statement> st(c.createStatement());
    std::unique_ptr<sql::ResultSet> rs(st->executeQuery(query));
    std::vector<RawRow> rows;
    while (rs->next()) {
      RawRow r;
      r.config_id = rs->getInt64("configId");
      r.origin = "t_ratelimite_conf[configId=" + std::to_string(*r.config_id) + "]";
      if (!rs->isNull("channelType")) r.channel_type = rs->getString("channelType");
      if (!rs->isNull("interfaceNo")) r.interface_no = rs->getString("interfaceNo");
      if (!rs->isNull("interfaceUrl")) r.interface_url = rs->getString("interfaceUrl");
      // As the server writes them (INT or DOUBLE, FLOAT as its decimals): the text is the value.
      if (!rs->isNull("rateLimit")) r.rate_limit = std::stod(std::string(rs->getString("rateLimit")));
      if (!rs->isNull("cache")) r.cache = std::stod(std::string(rs->getString("cache")));
      r.status = rs->getInt("status");
      if (columns_.count("burst") && !rs->isNull("burst")) r.burst = rs->getDouble("burst");
      if (columns_.count("warmupSeconds") && !rs->isNull("warmupSeconds")) r.warmup_seconds = rs->getDouble("warmupSeconds");
      if (columns_.count("scope") && !rs->isNull("scope")) r.scope = std::string(rs->getString("scope"));
      if (columns_.count("mode") && !rs->isNull("mode")) r.mode = std::string(rs->getString("mode"));
      if (columns_.count("keyBy") && !rs->isNull("keyBy")) r.key_by = std::string(rs->getString("keyBy"));
      if (columns_.count("maxShare") && !rs->isNull("maxShare")) r.max_share = rs->getDouble("maxShare");
      if (columns_.count("adaptive") && !rs->isNull("adaptive")) r.adaptive = std::string(rs->getString("adaptive"));
      if (columns_.count("matchCase") && !rs->isNull("matchCase")) r.match_case = std::string(rs->getString("matchCase"));
      if (columns_.count("cost") && !rs->isNull("cost")) r.cost = rs->getDouble("cost");
      if (columns_.count("channelCost") && !rs->isNull("channelCost")) r.channel_cost = rs->getDouble("channelCost");
      if (columns_.count("priority") && !rs->isNull("priority")) r.priority = std::string(rs->getString("priority"));
      if (columns_.count("algorithm") && !rs->isNull("algorithm")) r.algorithm = std::string(rs->getString("algorithm"));
      for (auto [col, field] : {std::pair<const char*, std::optional<double>*>{"cir", &r.cir}, {"cbs", &r.cbs},
                                {"ebs", &r.ebs}, {"pir", &r.pir}, {"pbs", &r.pbs}})
        if (columns_.count(col) && !rs->isNull(col)) *field = rs->getDouble(col);
      if (columns_.count("yellow") && !rs->isNull("yellow")) r.yellow = std::string(rs->getString("yellow"));
      r.default_case = config_.match_case;
      rows.push_back(std::move(r));
    }
    std::vector<RejectedRow> orphans;
    if (quota_table_) {
      std::map<std::int64_t, std::size_t> by_id;
      for (std::size_t i = 0; i < rows.size(); ++i) by_id[*rows[i].config_id] = i;
      std::unique_ptr<sql::ResultSet> qs(st->executeQuery(
          "SELECT quotaId, configId, periodSeconds, limitCount, algorithm, keyBy, status FROM t_ratelimite_quota "
          "ORDER BY quotaId"));
      while (qs->next()) {
        RawQuota q;
        q.quota_id = qs->getInt64("quotaId");
        q.origin = "t_ratelimite_quota[quotaId=" + std::to_string(*q.quota_id) + "]";
        if (!qs->isNull("configId")) q.config_id = qs->getInt64("configId");
        if (!qs->isNull("periodSeconds")) q.period_seconds = qs->getInt64("periodSeconds");
        if (!qs->isNull("limitCount")) q.limit_count = qs->getInt64("limitCount");
        if (!qs->isNull("algorithm")) q.algorithm = std::string(qs->getString("algorithm"));
        if (!qs->isNull("keyBy")) q.key_by = std::string(qs->getString("keyBy"));
        if (!qs->isNull("status")) q.status = qs->getInt64("status");
        auto it = q.config_id ? by_id.find(*q.config_id) : by_id.end();
        if (it == by_id.end()) {
          orphans.push_back({q.config_id, q.origin, "configId", "names no row of t_ratelimite_conf", q.quota_id});
          continue;
        }
        rows[it->second].quotas.push_back(std::move(q));
      }
    }
    out.rules = validate_rows(rows, std::move(orphans));

    read_switch(c, out);
    return out;
  });
}

namespace {
// Runs `body` in a transaction; rolls back and rethrows on failure.
template <class F>
void transaction(sql::Connection& c, F body) {
  c.setAutoCommit(false);
  try {
    body();
    c.commit();
    c.setAutoCommit(true);
  } catch (...) {
    try {
      c.rollback();
      c.setAutoCommit(true);
    } catch (...) {
    }
    throw;
  }
}

void audit(sql::Connection& c, const std::string& name, int old_state, int new_state, const std::string& who) {
  std::unique_ptr<sql::PreparedStatement> a(c.prepareStatement(
      "INSERT INTO t_ratelimite_switch_audit (name, oldState, newState, changedBy) VALUES (?, ?, ?, ?)"));
  a->setString(1, name);
  a->setInt(2, old_state);
  a->setInt(3, new_state);
  a->setString(4, who);
  a->execute();
}
}  // namespace

SwitchChange MysqlSource::write_switch(SwitchMode mode, const std::string& who, std::int64_t revert_after_ms) {
  return with_connection([&](sql::Connection& c) {
    SwitchChange out;
    transaction(c, [&] {
      // Lock the row (creating it if missing) so concurrent writers audit a true old -> new.
      std::unique_ptr<sql::PreparedStatement> ins(
          c.prepareStatement("INSERT IGNORE INTO t_ratelimite_switch (name, state, changedBy) VALUES (?, 1, 'tollgate')"));
      ins->setString(1, config_.switch_name);
      ins->execute();
      std::unique_ptr<sql::PreparedStatement> sel(
          c.prepareStatement("SELECT state FROM t_ratelimite_switch WHERE name = ? FOR UPDATE"));
      sel->setString(1, config_.switch_name);
      std::unique_ptr<sql::ResultSet> rs(sel->executeQuery());
      rs->next();
      const int old_state = rs->getInt(1);
      out.previous = switch_mode_of_state(old_state).value_or(SwitchMode::enforce);  // the audit keeps the true value
      std::unique_ptr<sql::PreparedStatement> upd(c.prepareStatement(
          "UPDATE t_ratelimite_switch SET state = ?, changedBy = ?, changedAt = CURRENT_TIMESTAMP(3), "
          "revertAt = IF(? > 0, CURRENT_TIMESTAMP(3) + INTERVAL ? MICROSECOND, NULL), revertTo = IF(? > 0, ?, NULL) "
          "WHERE name = ?"));
      upd->setInt(1, static_cast<int>(mode));
      upd->setString(2, who);
      upd->setInt64(3, revert_after_ms);
      upd->setInt64(4, revert_after_ms * 1000);
      upd->setInt64(5, revert_after_ms);
      upd->setInt(6, old_state);
      upd->setString(7, config_.switch_name);
      upd->execute();
      audit(c, config_.switch_name, old_state, static_cast<int>(mode), who);
      std::unique_ptr<sql::PreparedStatement> now(c.prepareStatement(
          "SELECT CAST(UNIX_TIMESTAMP(changedAt) * 1000 AS SIGNED), "
          "IFNULL(CAST(UNIX_TIMESTAMP(revertAt) * 1000 AS SIGNED), 0) FROM t_ratelimite_switch WHERE name = ?"));
      now->setString(1, config_.switch_name);
      std::unique_ptr<sql::ResultSet> t(now->executeQuery());
      t->next();
      out.now = SwitchRecord{mode, who, t->getInt64(1), t->getInt64(2), out.previous};
    });
    return out;
  });
}

void MysqlSource::tick() {
  // A due revert_after: whichever instance gets here first does it (the row lock and the condition
  // make it happen once), with its audit row; every instance then sees the new row.
  with_connection([&](sql::Connection& c) {
    transaction(c, [&] {
      std::unique_ptr<sql::PreparedStatement> sel(c.prepareStatement(
          "SELECT state, revertTo FROM t_ratelimite_switch WHERE name = ? AND revertAt IS NOT NULL "
          "AND revertAt <= CURRENT_TIMESTAMP(3) AND revertTo IN (0, 1, 2) FOR UPDATE"));
      sel->setString(1, config_.switch_name);
      std::unique_ptr<sql::ResultSet> rs(sel->executeQuery());
      if (!rs->next()) return;
      const int old_state = rs->getInt(1), new_state = rs->getInt(2);
      std::unique_ptr<sql::PreparedStatement> upd(c.prepareStatement(
          "UPDATE t_ratelimite_switch SET state = revertTo, changedBy = 'revert_after', "
          "changedAt = CURRENT_TIMESTAMP(3), revertAt = NULL, revertTo = NULL WHERE name = ?"));
      upd->setString(1, config_.switch_name);
      upd->execute();
      audit(c, config_.switch_name, old_state, new_state, "revert_after");
    });
    return 0;
  });
}

}  // namespace tollgate::config

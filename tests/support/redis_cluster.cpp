#include "support/redis_cluster.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/process.hpp"

namespace tollgate::testing {

namespace {
const std::string kClusterScript = std::string(TOLLGATE_SOURCE_DIR) + "/scripts/redis-cluster.sh";
const std::string kSentinelScript = std::string(TOLLGATE_SOURCE_DIR) + "/scripts/redis-sentinel.sh";

std::string run(const std::string& shell, int* code = nullptr) {
  Process p({"/bin/sh", "-c", shell});
  const auto rc = p.wait_exit(std::chrono::seconds(60));
  if (code) *code = rc.value_or(-1);
  else if (rc != 0) throw std::runtime_error("command failed (" + shell + "): " + p.output());
  return p.output();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// One argument for /bin/sh, single-quoted.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string redis_cli(int port, const std::string& args, int* code = nullptr) {
  return trim(run("redis-cli -h 127.0.0.1 -p " + std::to_string(port) + " " + args, code));
}

bool redis_installed() {
  int code = 0;
  run("command -v redis-server >/dev/null && command -v redis-cli >/dev/null", &code);
  return code == 0;
}

bool answers_ping(int port) {
  int code = 0;
  const std::string out = redis_cli(port, "ping", &code);
  return code == 0 && out == "PONG";
}

// Whether nobody listens on 127.0.0.1:PORT (bind, then close).
bool port_free(int port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

// N distinct free ports; with_bus: each port + 10000 free too (and below 65536), and no port
// equal to another one's bus port.
std::vector<int> pick_ports(std::size_t n, bool with_bus) {
  std::set<int> taken;
  std::vector<int> out;
  for (int tries = 0; out.size() < n; ++tries) {
    if (tries > 1000) throw std::runtime_error("cannot find free loopback ports");
    const int p = unused_port();
    if (p <= 0 || taken.count(p)) continue;
    if (with_bus && (p >= 55535 || taken.count(p + 10000) || !port_free(p + 10000))) continue;
    out.push_back(p);
    taken.insert(p);
    if (with_bus) taken.insert(p + 10000);
  }
  return out;
}

std::string join(const std::vector<int>& ports) {
  std::string out;
  for (int p : ports) out.append(" ").append(std::to_string(p));
  return out;
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream in(flags);
  std::string f;
  while (std::getline(in, f, ','))
    if (f == flag) return true;
  return false;
}

// One line of CLUSTER NODES: <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
struct Node {
  std::string id;
  int port = -1;
  std::string flags;
  std::string master;                        // "-" for a primary
  std::vector<std::pair<int, int>> ranges;   // slots served (not the [..] migration marks)
  std::string line;                          // address, role, master, slots: what nodes must agree on
  bool is_primary() const { return has_flag(flags, "master"); }
  bool failed() const { return has_flag(flags, "fail") || has_flag(flags, "noaddr"); }
};

std::vector<Node> parse_nodes(const std::string& text) {
  std::vector<Node> out;
  for (const auto& l : lines(text)) {
    std::istringstream in(l);
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    if (f.size() < 8) continue;
    Node n;
    n.id = f[0];
    const auto colon = f[1].rfind(':');
    const auto at = f[1].find('@');
    if (colon == std::string::npos) continue;
    n.port = std::stoi(f[1].substr(colon + 1, at == std::string::npos ? std::string::npos : at - colon - 1));
    n.flags = f[2];
    n.master = f[3];
    n.line = f[1] + (n.is_primary() ? " master " : " replica ") + f[3];
    for (std::size_t i = 8; i < f.size(); ++i) {
      n.line += " " + f[i];
      if (f[i].empty() || f[i][0] == '[') continue;
      const auto dash = f[i].find('-');
      if (dash == std::string::npos) {
        const int s = std::stoi(f[i]);
        n.ranges.emplace_back(s, s);
      } else {
        n.ranges.emplace_back(std::stoi(f[i].substr(0, dash)), std::stoi(f[i].substr(dash + 1)));
      }
    }
    out.push_back(std::move(n));
  }
  return out;
}

// Everything the nodes must agree on, in one string (sorted lines).
std::string layout(const std::vector<Node>& nodes) {
  std::vector<std::string> v;
  for (const auto& n : nodes) v.push_back(n.line);
  std::sort(v.begin(), v.end());
  std::string out;
  for (const auto& l : v) out += l + "\n";
  return out;
}

const Node* owner(const std::vector<Node>& nodes, int slot) {
  for (const auto& n : nodes) {
    if (!n.is_primary() || n.failed()) continue;
    for (const auto& [a, b] : n.ranges)
      if (slot >= a && slot <= b) return &n;
  }
  return nullptr;
}

void expect_ok(const std::string& reply, const std::string& what) {
  if (reply != "OK") throw std::runtime_error(what + ": " + reply);
}
}  // namespace

// ---- RedisClusterServers ----

RedisClusterServers::RedisClusterServers() {
  if (!redis_installed()) {
    why_not_ = "redis-server or redis-cli is not installed (scripts/test.sh installs redis-server and redis-tools)";
    return;
  }
  // A port picked here may be taken by someone else before the node binds it: then try again.
  std::string failure;
  for (int attempt = 0; attempt < 3; ++attempt) {
    dir_ = temp_dir();
    ports_ = pick_ports(6, true);
    int code = 0;
    const std::string out = run(kClusterScript + " start " + dir_ + join(ports_), &code);
    if (code == 0) {
      available_ = true;
      return;
    }
    failure = out;
    run(kClusterScript + " stop " + dir_, &code);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  throw std::runtime_error("redis cluster did not start: " + failure);
}

RedisClusterServers::~RedisClusterServers() {
  if (!available_) return;
  int code = 0;
  run(kClusterScript + " stop " + dir_, &code);
  if (code == 0) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string RedisClusterServers::cli(int port, const std::string& args) { return redis_cli(port, args); }

int RedisClusterServers::live_node() {
  for (int p : ports_)
    if (!killed_.count(p) && answers_ping(p)) return p;
  throw std::runtime_error("no cluster node answers");
}

std::vector<int> RedisClusterServers::primaries() {
  std::vector<int> out;
  for (const auto& n : parse_nodes(cli(live_node(), "cluster nodes")))
    if (n.is_primary() && !n.failed()) out.push_back(n.port);
  std::sort(out.begin(), out.end());
  return out;
}

int RedisClusterServers::slot_of_key(const std::string& key) {
  const std::string out = cli(live_node(), "cluster keyslot " + quote(key));
  try {
    return std::stoi(out);
  } catch (const std::exception&) {
    throw std::runtime_error("CLUSTER KEYSLOT " + key + ": " + out);
  }
}

int RedisClusterServers::owner_of_slot(int slot) {
  const auto nodes = parse_nodes(cli(live_node(), "cluster nodes"));
  const Node* n = owner(nodes, slot);
  return n ? n->port : -1;
}

int RedisClusterServers::owner_of_key(const std::string& key) { return owner_of_slot(slot_of_key(key)); }

void RedisClusterServers::move_slot(int slot, int to_port) {
  const std::string s = std::to_string(slot);
  const auto nodes = parse_nodes(cli(live_node(), "cluster nodes"));
  const Node* src = owner(nodes, slot);
  if (src == nullptr) throw std::runtime_error("move_slot: nobody serves slot " + s);
  const auto dst = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.port == to_port; });
  if (dst == nodes.end() || !dst->is_primary() || dst->failed())
    throw std::runtime_error("move_slot: " + std::to_string(to_port) + " is not a live primary");
  if (src->port == to_port) return;
  const int from = src->port;

  expect_ok(cli(to_port, "cluster setslot " + s + " importing " + src->id), "SETSLOT IMPORTING");
  expect_ok(cli(from, "cluster setslot " + s + " migrating " + dst->id), "SETSLOT MIGRATING");
  // Moves the keys still in the slot on the source, 100 at a time. While the slot is migrating,
  // the source answers for the keys it still has and sends clients to the target (ASK) for the
  // others, so it cannot gain new ones.
  const auto migrate_keys = [&] {
    for (;;) {
      const auto keys = lines(cli(from, "cluster getkeysinslot " + s + " 100"));
      if (keys.empty()) return;
      std::string args = "migrate 127.0.0.1 " + std::to_string(to_port) + " '' 0 10000 keys";
      for (const auto& k : keys) args.append(" ").append(quote(k));
      const std::string reply = cli(from, args);
      if (reply != "OK" && reply != "NOKEY") throw std::runtime_error("MIGRATE: " + reply);
    }
  };
  migrate_keys();
  // The target first (it takes the slot with a new config epoch), then the source, then the other
  // primaries; replicas learn it from their primaries.
  expect_ok(cli(to_port, "cluster setslot " + s + " node " + dst->id), "SETSLOT NODE on the target");
  for (int attempt = 0;; ++attempt) {
    const std::string reply = cli(from, "cluster setslot " + s + " node " + dst->id);
    if (reply == "OK") break;
    if (attempt >= 3) throw std::runtime_error("SETSLOT NODE on the source: " + reply);
    migrate_keys();  // "still hold keys for this hash slot"
  }
  for (const auto& n : nodes) {
    if (!n.is_primary() || n.failed() || n.port == from || n.port == to_port || killed_.count(n.port)) continue;
    expect_ok(cli(n.port, "cluster setslot " + s + " node " + dst->id), "SETSLOT NODE on " + std::to_string(n.port));
  }
  // Wait until every live node sees the new owner.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (int p : ports_) {
      if (killed_.count(p)) continue;
      int code = 0;
      const std::string out = redis_cli(p, "cluster nodes", &code);
      if (code != 0) continue;
      const auto seen = parse_nodes(out);  // named: owner() points into it
      const Node* o = owner(seen, slot);
      if (o == nullptr || o->port != to_port) {
        all = false;
        break;
      }
    }
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void RedisClusterServers::kill(int port) {
  run(kClusterScript + " kill " + dir_ + " " + std::to_string(port));
  killed_.insert(port);
}

bool RedisClusterServers::wait_until_ok(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool ok = true;
    std::string first;
    int live = 0;
    for (int p : ports_) {
      if (killed_.count(p)) continue;
      int code = 0;
      const std::string info = redis_cli(p, "cluster info", &code);
      if (code != 0) continue;  // down (killed some other way)
      ++live;
      if (info.find("cluster_state:ok") == std::string::npos) {
        ok = false;
        break;
      }
      const std::string text = redis_cli(p, "cluster nodes", &code);
      if (code != 0) continue;
      const auto nodes = parse_nodes(text);
      const std::string view = layout(nodes);
      if (first.empty()) first = view;
      else if (view != first) {
        ok = false;
        break;
      }
      const auto self = std::find_if(nodes.begin(), nodes.end(),
                                     [](const Node& n) { return has_flag(n.flags, "myself"); });
      if (self != nodes.end() && !self->is_primary() &&
          redis_cli(p, "info replication", &code).find("master_link_status:up") == std::string::npos) {
        ok = false;
        break;
      }
    }
    if (ok && live > 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// ---- RedisSentinelServers ----

RedisSentinelServers::RedisSentinelServers() {
  if (!redis_installed()) {
    why_not_ = "redis-server or redis-cli is not installed (scripts/test.sh installs redis-server and redis-tools)";
    return;
  }
  std::string failure;
  for (int attempt = 0; attempt < 3; ++attempt) {
    dir_ = temp_dir();
    const auto ports = pick_ports(5, false);
    primary_ = ports[0];
    replica_ = ports[1];
    sentinels_ = {ports[2], ports[3], ports[4]};
    int code = 0;
    const std::string out = run(kSentinelScript + " start " + dir_ + " " + kMasterName + join(ports), &code);
    if (code == 0) {
      available_ = true;
      return;
    }
    failure = out;
    run(kSentinelScript + " stop " + dir_, &code);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  throw std::runtime_error("redis sentinel set-up did not start: " + failure);
}

RedisSentinelServers::~RedisSentinelServers() {
  if (!available_) return;
  int code = 0;
  run(kSentinelScript + " stop " + dir_, &code);
  if (code == 0) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string RedisSentinelServers::cli(int port, const std::string& args) { return redis_cli(port, args); }

int RedisSentinelServers::current_primary() {
  for (int p : sentinels_) {
    if (killed_.count(p)) continue;
    int code = 0;
    const auto out = lines(redis_cli(p, std::string("sentinel get-master-addr-by-name ") + kMasterName, &code));
    if (code != 0 || out.size() != 2) continue;
    try {
      return std::stoi(out[1]);
    } catch (const std::exception&) {
    }
  }
  return -1;
}

void RedisSentinelServers::kill(int port) {
  run(kSentinelScript + " kill " + dir_ + " " + std::to_string(port));
  killed_.insert(port);
}

// N free loopback ports a cluster-enabled server can use: each below 55536, its bus port free too.
std::vector<int> cluster_node_ports(std::size_t n) { return pick_ports(n, true); }

}  // namespace tollgate::testing

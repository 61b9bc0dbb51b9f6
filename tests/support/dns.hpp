// A real DNS server for end-to-end tests: dnsmasq (Debian's dnsmasq-base) on 127.0.0.1 and a port
// of its own (UDP and TCP), answering only from a hosts file the test rewrites. Names not in the
// file get NXDOMAIN; nothing is forwarded, nothing cached beyond the file; every answer carries a
// TTL of 1 s, so that a resolver honouring TTLs sees a change within a second.
//
// dns_query() and dns_query_tcp() are a minimal DNS client (one question, A or AAAA), enough for
// the tests to check what the server answers without going through the system resolver.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/process.hpp"

namespace tollgate::testing {

struct DnsAnswer {
  int rcode = -1;                      // 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED
  std::vector<std::string> addresses;  // the A (or AAAA) records of the answer, in its order
  std::uint32_t min_ttl = 0;           // the smallest TTL among them (0 without records)
  bool truncated = false;              // TC bit
};

inline constexpr std::uint16_t kDnsTypeA = 1;
inline constexpr std::uint16_t kDnsTypeAAAA = 28;

// Asks 127.0.0.1:port about `name` (type A or AAAA) over UDP; nullopt when no matching answer
// arrived in `timeout` (no server, or it stayed silent).
std::optional<DnsAnswer> dns_query(int port, const std::string& name, std::uint16_t type = kDnsTypeA,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(1));
// The same over TCP (the message after its two-byte length), as resolvers do for long answers.
std::optional<DnsAnswer> dns_query_tcp(int port, const std::string& name, std::uint16_t type = kDnsTypeA,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(1));

class Dnsmasq {
 public:
  static constexpr const char* kBinary = "/usr/sbin/dnsmasq";
  static bool available();  // the binary is installed (scripts/deps.sh test installs dnsmasq-base)

  // Starts it knowing no name, or `name` at `addresses`, and returns once it answers. Throws
  // std::runtime_error with its output when it cannot start.
  Dnsmasq();
  Dnsmasq(const std::string& name, std::vector<std::string> addresses);
  ~Dnsmasq();
  Dnsmasq(const Dnsmasq&) = delete;
  Dnsmasq& operator=(const Dnsmasq&) = delete;

  // Maps `name` to `addresses` (IPv4 or IPv6; empty: the name is removed and gets NXDOMAIN):
  // rewrites the hosts file, sends SIGHUP and returns once the server answers with the new set.
  // Throws when it does not within 10 s.
  void set(const std::string& name, std::vector<std::string> addresses);
  // Stops the server (SIGTERM): from then on queries to its port go unanswered.
  void stop();
  bool running() const { return proc_ != nullptr; }

  int port() const { return port_; }
  std::string server() const { return "127.0.0.1:" + std::to_string(port_); }  // for dns.servers
  const std::string& dir() const { return dir_; }
  std::string output() const;  // its log so far (stderr)

 private:
  void start();
  void write_hosts() const;
  bool answers_as_configured(const std::string& name) const;
  std::string dir_;
  int port_ = -1;
  std::map<std::string, std::vector<std::string>> names_;
  std::unique_ptr<Process> proc_;
  std::string last_output_;  // what it logged before stop()
};

}  // namespace tollgate::testing

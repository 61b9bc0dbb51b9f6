// TLS profiles: one OpenSSL context per use (the listener, each https:// upstream), built off the
// request path from the configured files and swapped whole on reload. A connection takes the
// profile current when it opens and keeps it (an SSL_CTX is reference-counted), so a reload
// never disturbs live connections. Verification is on unless an upstream's file says
// "insecure_skip_verify": true, which is logged at every start and shown by the admin API.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/config/gateway_config.hpp"

struct ssl_ctx_st;
struct ssl_st;
struct ssl_session_st;
struct x509_st;
namespace prometheus {
class Counter;
class Gauge;
}

namespace tollgate::proxy {

class Metrics;

// Why a TLS connection failed: `reason` is the metric label (expired, hostname_mismatch,
// unknown_ca, not_yet_valid, verify_failed, protocol_version, client_certificate, handshake),
// `words` what the 502 answer and the log say ("certificate has expired").
struct TlsFailure {
  std::string reason;
  std::string words;
};

// A certificate verification error (X509_V_ERR_*) and the names of the certificate it was
// found on, as words. Pure: unit-tested without a handshake.
TlsFailure describe_verify_error(long verify_error, const std::vector<std::string>& cert_names);
// A failed handshake or read: the verification error recorded on `ssl` if there is one, else the
// OpenSSL error `err` (ERR_get_error) of the failure, else a closed connection.
TlsFailure describe_tls_failure(ssl_st* ssl, unsigned long err);

// The certificate's DNS and IP subjectAltNames, each as escape_cert_text writes it; with none, its
// CN, said to be no name (host names are checked against subjectAltNames only, as browsers and Go
// do): "CN=host (no subjectAltName: not accepted)".
std::vector<std::string> certificate_names(x509_st* cert);
// Text from a certificate made safe to print and log: a byte outside printable ASCII (a NUL, an
// escape sequence, a line break, anything over 0x7E) and a backslash written as \xHH, so that a
// name with a NUL in it reads as such, not as the text before the NUL.
std::string escape_cert_text(std::string_view text);
// notAfter as Unix seconds (0 if unreadable).
std::int64_t certificate_not_after(x509_st* cert);

// The sessions one endpoint issued to one worker (used by that thread only: no locks), newest
// last. A TLS 1.3 ticket is offered once while others remain (RFC 8446 advises against reuse: it
// links connections, and servers that keep sessions refuse a second use); the last one is offered
// again rather than none, so that a burst of new connections larger than the tickets in hand
// still resumes where the server allows it. A TLS 1.2 session stays while the server resumes it.
// Sessions of another profile generation are dropped.
class TlsSessionCache {
 public:
  TlsSessionCache() = default;
  TlsSessionCache(const TlsSessionCache&) = delete;
  TlsSessionCache& operator=(const TlsSessionCache&) = delete;
  ~TlsSessionCache();
  static constexpr std::size_t kMax = 32;
  // A session to offer on a new connection made under profile `generation`, as a reference the
  // caller frees (SSL_SESSION_free) once it has handed it to new_connection; null: none.
  ssl_session_st* take(std::uint64_t generation);
  // A new session from the server (the cache keeps this reference).
  void add(ssl_session_st* session);
  std::size_t size() const { return sessions_.size(); }

 private:
  std::vector<ssl_session_st*> sessions_;
  std::uint64_t generation_ = 0;
};

// Thrown when a profile's file cannot be used: names the file and the reason.
struct TlsLoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One https:// upstream's profile: its context (trust store, client certificate, minimum
// version, verification) and the name it sends (SNI) and checks.
class TlsClientProfile {
 public:
  // Reads the upstream's files; throws TlsLoadError naming the file.
  static std::shared_ptr<const TlsClientProfile> load(const config::UpstreamConfig& u);
  ~TlsClientProfile();
  TlsClientProfile(const TlsClientProfile&) = delete;
  TlsClientProfile& operator=(const TlsClientProfile&) = delete;

  ssl_ctx_st* ctx() const { return ctx_; }
  const std::string& server_name() const { return server_name_; }
  bool name_is_ip() const { return name_is_ip_; }
  bool insecure() const { return insecure_; }
  bool has_client_cert() const { return client_not_after_ != 0; }
  std::int64_t client_cert_not_after() const { return client_not_after_; }
  std::uint64_t generation() const { return generation_; }  // unique per load

  // A new client connection's SSL on `fd` (non-blocking): SNI, the name to verify, a session to
  // resume (may be null; the caller keeps its reference) and where the sessions the server issues
  // go (may be null). The caller owns the result (SSL_free).
  ssl_st* new_connection(int fd, ssl_session_st* resume, TlsSessionCache* sessions) const;

 private:
  TlsClientProfile() = default;
  ssl_ctx_st* ctx_ = nullptr;
  std::string server_name_;
  bool name_is_ip_ = false;
  bool insecure_ = false;
  std::int64_t client_not_after_ = 0;
  std::uint64_t generation_ = 0;
};

// The proxy listener's profile: its certificate and key, HTTP/1.1 by ALPN.
class TlsServerProfile {
 public:
  static std::shared_ptr<const TlsServerProfile> load(const config::ListenerTlsConfig& c);
  ~TlsServerProfile();
  TlsServerProfile(const TlsServerProfile&) = delete;
  TlsServerProfile& operator=(const TlsServerProfile&) = delete;

  ssl_ctx_st* ctx() const { return ctx_; }
  std::int64_t not_after() const { return not_after_; }
  ssl_st* new_connection(int fd) const;

 private:
  TlsServerProfile() = default;
  ssl_ctx_st* ctx_ = nullptr;
  std::int64_t not_after_ = 0;
};

// One https:// upstream's TLS: its profile (swapped whole when its files are re-read), the
// counters of its handshakes and failures, and the expiry of the certificate it presented last.
// Shared by every route table that has the upstream unchanged (a SIGHUP keeps it).
class UpstreamTls {
 public:
  UpstreamTls(const config::UpstreamConfig& conf, std::shared_ptr<const TlsClientProfile> profile, Metrics& metrics);
  UpstreamTls(const UpstreamTls&) = delete;
  UpstreamTls& operator=(const UpstreamTls&) = delete;
  std::shared_ptr<const TlsClientProfile> profile() const { return profile_.load(); }
  // Bumped by every swap: a worker re-reads profile() only when it changed (one relaxed load per
  // request instead of a shared_ptr's atomic load).
  std::uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  const config::UpstreamConfig& conf() const { return conf_; }
  // After a full handshake: the certificate's expiry, for the metric and the admin API.
  void saw_peer_certificate(std::int64_t not_after);
  std::int64_t peer_not_after() const { return peer_not_after_.load(std::memory_order_relaxed); }
  void count_handshake(bool resumed);
  void count_failure(const std::string& reason);

 private:
  friend class TlsProfiles;
  void swap(std::shared_ptr<const TlsClientProfile> p);
  const config::UpstreamConfig conf_;
  Metrics& metrics_;
  std::atomic<std::shared_ptr<const TlsClientProfile>> profile_;
  std::atomic<std::uint64_t> epoch_{1};
  std::atomic<std::int64_t> peer_not_after_{0};
  prometheus::Counter* handshakes_[2] = {nullptr, nullptr};  // resumed false, true
  prometheus::Gauge* peer_expiry_ = nullptr;                 // made on the first handshake
  std::once_flag peer_once_;
};

// Every TLS profile of the gateway: the listener's and one UpstreamTls per https:// upstream of
// the running route table. Requests reach an upstream's through the route table (no lookup);
// reload() re-reads every file and swaps what loads, keeping the rest.
class TlsProfiles {
 public:
  // Loads every profile; throws TlsLoadError at the first that fails (the start is refused).
  // Warns on stderr for every upstream with insecure_skip_verify.
  TlsProfiles(const config::GatewayConfig& cfg, Metrics& metrics);
  ~TlsProfiles();

  // The running upstream's TLS by name (null: none, or not https).
  std::shared_ptr<UpstreamTls> upstream(std::string_view name) const;
  // For a new list of upstreams (a SIGHUP): an upstream whose configuration is unchanged keeps
  // its UpstreamTls; a new or changed https one gets its files loaded now. Throws TlsLoadError
  // naming the file, and then nothing changed. In the order of `upstreams` (null: plain http).
  std::vector<std::shared_ptr<UpstreamTls>> prepare(const std::vector<config::UpstreamConfig>& upstreams) const;
  // Makes a prepared list the running one (what reload() and status() cover).
  void adopt(std::vector<std::shared_ptr<UpstreamTls>> upstreams);
  std::shared_ptr<const TlsServerProfile> listener() const { return listener_.load(); }
  bool any() const;

  struct ReloadReport {
    std::vector<std::string> reloaded;  // "listener", "upstream ibe"
    std::vector<std::string> errors;    // "upstream ibe: /etc/x.pem: no such file" (the old one stays)
  };
  ReloadReport reload();

  // The listener's handshakes by result: "full", "resumed", "failed", "timeout" (stalled past
  // proxy.header_timeout_ms) or "plain_http" (an HTTP request sent to the HTTPS port).
  void count_listener(std::string_view result);

  struct Status {
    std::string upstream;  // "" for the listener
    bool verify = true;
    bool insecure = false;
    std::string server_name;
    std::string min_version;
    std::int64_t cert_not_after = 0;    // listener: its own; upstream: its client certificate (0 none)
    std::int64_t peer_not_after = 0;    // upstream: the last certificate it presented (0: none seen yet)
  };
  std::vector<Status> status() const;

 private:
  std::shared_ptr<UpstreamTls> load_upstream(const config::UpstreamConfig& u) const;
  void publish_expiry(const std::string& use, const std::string& name, std::int64_t not_after) const;
  const config::ListenerTlsConfig listener_conf_;
  Metrics& metrics_;
  mutable std::mutex mu_;                              // the list (admin thread and SIGHUP)
  std::vector<std::shared_ptr<UpstreamTls>> upstreams_;  // https ones only, under mu_
  std::atomic<std::shared_ptr<const TlsServerProfile>> listener_;
  std::vector<std::pair<std::string_view, prometheus::Counter*>> listener_results_;
  std::mutex reload_mu_;
};

}  // namespace tollgate::proxy

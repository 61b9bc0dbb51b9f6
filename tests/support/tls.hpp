// TLS for end-to-end tests: a private PKI made at run time (tests/support/tls_pki.sh), nginx as a
// TLS upstream with a log that shows session resumption, and a blocking HTTPS client.
// Boost.Asio's SSL and Beast stay in tls.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "support/http_client.hpp"
#include "support/process.hpp"

namespace tollgate::testing {

// Absolute paths of the files tls_pki.sh makes (see its header for what each one is).
struct TestPki {
  std::string dir;
  std::string ca, ca_key;                          // CN=tollgate-test-ca
  std::string server_cert, server_key;             // localhost, 127.0.0.1, ::1
  std::string wrongname_cert, wrongname_key;       // evil.example only
  std::string expired_cert, expired_key;           // localhost, 127.0.0.1; January 2020
  std::string other_ca, other_ca_key;              // a CA nobody trusts
  std::string unknownca_cert, unknownca_key;       // localhost, 127.0.0.1, signed by other_ca
  std::string client_cert, client_key;             // CN=tollgate-client, clientAuth, signed by ca
  std::string cnonly_cert, cnonly_key;             // CN=localhost, no subjectAltName, signed by ca
};

// Made once per test process, in a temporary directory removed at exit; throws (with the
// script's output) when the script fails.
const TestPki& test_pki();

struct NginxTlsOptions {
  std::string cert;  // empty: test_pki().server_cert
  std::string key;   // empty: test_pki().server_key
  bool require_client_cert = false;  // ssl_verify_client on, against test_pki().ca
  int keepalive_requests = 0;        // 0: nginx's default (1000); 1: a new connection per request
  std::string protocols = "TLSv1.2 TLSv1.3";  // ssl_protocols
};

// Debian's nginx as a child process (no master, no daemon, everything in `dir`) answering HTTPS on
// 127.0.0.1:port with 200 {"ok":true,"path":"<uri>"} (application/json) on every path, with the
// headers X-Tls-Reused ("r" when the TLS session was resumed, "." when not) and X-Tls-Client
// (the client certificate's subject, e.g. "CN=tollgate-client"; nginx leaves the header out
// without one, so header() gives ""). Session cache and tickets are on. With require_client_cert,
// a client without a certificate still completes the handshake and gets nginx's own 400 page.
// access.log has one line per request: "$ssl_session_reused $ssl_protocol $status $request_uri".
// The constructor returns once the port accepts connections, and throws (with nginx's error
// log) when it does not start; the destructor stops it (SIGTERM).
struct NginxTls {
  using Options = NginxTlsOptions;
  explicit NginxTls(const NginxTlsOptions& options = {});
  NginxTls(const NginxTls&) = delete;
  NginxTls& operator=(const NginxTls&) = delete;

  static constexpr const char* kBinary = "/usr/sbin/nginx";
  static bool available();  // nginx is installed (tests skip without it)

  int port = -1;
  std::string dir;
  std::unique_ptr<Process> proc;

  // The access log's lines so far. nginx writes a line just after it sent the answer, so a
  // client that just got its answer may not see the line yet: wait_for_lines first.
  std::vector<std::string> access_lines() const;
  bool wait_for_lines(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  // Of the lines after the first `skip_first`, the share whose session was resumed (0 if none).
  double reused_ratio(std::size_t skip_first = 0) const;
  std::string error_log() const;
};

struct TlsClientOptions {
  std::string ca_file;                    // the CAs to trust; empty: test_pki().ca
  std::string server_name = "localhost";  // SNI (unless an IP address), the Host header and the
                                          // name the server's certificate must carry
  std::string client_cert, client_key;    // both or neither
  std::vector<std::string> alpn;          // protocols to offer, e.g. {"http/1.1"}; empty: none
};

// One request over HTTPS on a new connection to 127.0.0.1:port, verifying the server. Any failure
// (connect, handshake, verification, I/O, timeout) gives status 0 and `error`: "handshake: ..."
// with OpenSSL's reason, and the certificate check's reason when that is what failed (e.g.
// "certificate has expired", "hostname mismatch", "unable to get local issuer certificate").
HttpResponse https_request(int port, const HttpRequest& req, const TlsClientOptions& options = {},
                           std::chrono::milliseconds timeout = std::chrono::seconds(10));
inline HttpResponse https_get(int port, const std::string& target, const TlsClientOptions& options = {}) {
  return https_request(port, {"GET", target, {}, {}}, options);
}

}  // namespace tollgate::testing

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include "support/tls.hpp"
#include "support/http_message.hpp"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tollgate::testing {

namespace net = boost::asio;
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Owns the PKI's directory: private keys do not outlive the test process.
struct PkiHolder {
  TestPki pki;
  PkiHolder() {
    pki.dir = temp_dir();
    Process script({"/bin/bash", TOLLGATE_SOURCE_DIR "/tests/support/tls_pki.sh", pki.dir});
    const auto code = script.wait_exit(std::chrono::seconds(30));
    if (code != 0) {
      throw std::runtime_error("tls_pki.sh " + pki.dir + " failed (" +
                               (code ? "exit " + std::to_string(*code) : std::string("timed out")) + "): " +
                               script.output());
    }
    const auto at = [&](const char* name) { return pki.dir + "/" + name; };
    pki.ca = at("ca.pem");
    pki.ca_key = at("ca.key");
    pki.server_cert = at("server.pem");
    pki.server_key = at("server.key");
    pki.wrongname_cert = at("wrongname.pem");
    pki.wrongname_key = at("wrongname.key");
    pki.cnonly_cert = at("cnonly.pem");
    pki.cnonly_key = at("cnonly.key");
    pki.expired_cert = at("expired.pem");
    pki.expired_key = at("expired.key");
    pki.other_ca = at("other-ca.pem");
    pki.other_ca_key = at("other-ca.key");
    pki.unknownca_cert = at("unknownca.pem");
    pki.unknownca_key = at("unknownca.key");
    pki.client_cert = at("client.pem");
    pki.client_key = at("client.key");
  }
  ~PkiHolder() {
    std::error_code ignored;
    std::filesystem::remove_all(pki.dir, ignored);
  }
};

std::string nginx_config(const std::string& dir, int port, const NginxTlsOptions& o) {
  const TestPki& pki = test_pki();
  const std::string cert = o.cert.empty() ? pki.server_cert : o.cert;
  const std::string key = o.key.empty() ? pki.server_key : o.key;
  std::string c;
  c += "daemon off;\nmaster_process off;\nworker_processes 1;\n";
  c += "error_log " + dir + "/error.log info;\n";
  c += "pid " + dir + "/nginx.pid;\n";
  c += "lock_file " + dir + "/nginx.lock;\n";
  c += "events { worker_connections 256; }\n";
  c += "http {\n";
  // Every temporary path inside dir: the compiled-in ones are under /var/lib/nginx.
  for (const char* t : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
    c += std::string("  ") + t + "_temp_path " + dir + "/" + t + "_temp;\n";
  c += "  log_format tls '$ssl_session_reused $ssl_protocol $status $request_uri';\n";
  c += "  access_log " + dir + "/access.log tls;\n";
  c += "  default_type application/json;\n";
  if (o.keepalive_requests > 0) c += "  keepalive_requests " + std::to_string(o.keepalive_requests) + ";\n";
  c += "  server {\n";
  c += "    listen 127.0.0.1:" + std::to_string(port) + " ssl;\n";
  c += "    server_name localhost;\n";
  c += "    ssl_certificate " + cert + ";\n";
  c += "    ssl_certificate_key " + key + ";\n";
  c += "    ssl_protocols " + o.protocols + ";\n";
  c += "    ssl_session_cache shared:SSL:1m;\n";
  c += "    ssl_session_tickets on;\n";
  if (o.require_client_cert) {
    c += "    ssl_verify_client on;\n";
    c += "    ssl_client_certificate " + pki.ca + ";\n";
  }
  c += "    location / {\n";
  // always: the headers on every status, so that a test reads them whatever it asked.
  c += "      add_header X-Tls-Reused $ssl_session_reused always;\n";
  c += "      add_header X-Tls-Client $ssl_client_s_dn always;\n";
  c += "      return 200 '{\"ok\":true,\"path\":\"$uri\"}';\n";
  c += "    }\n";
  c += "  }\n";
  c += "}\n";
  return c;
}

using detail::build_request;
using detail::to_response;

bool is_ip_address(const std::string& s) {
  beast::error_code ec;
  net::ip::make_address(s, ec);
  return !ec;
}

// What failed, in words a test can match: Asio's SSL message, plus the certificate check's own
// reason when there is one ("certificate verify failed" alone does not say why).
std::string describe(const char* stage, const beast::error_code& ec, SSL* ssl) {
  std::string out = std::string(stage) + ": " + ec.message();
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) out += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
  return out;
}

using Stream = ssl::stream<beast::tcp_stream>;

net::awaitable<void> exchange(Stream& stream, tcp::endpoint ep, http::request<http::string_body>& req,
                              std::chrono::steady_clock::time_point deadline, HttpResponse& out) {
  beast::error_code ec;
  auto& tcp_layer = beast::get_lowest_layer(stream);
  // One deadline for the whole exchange: tcp_stream applies it to each operation below.
  tcp_layer.expires_at(deadline);
  co_await tcp_layer.async_connect(ep, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    out.error = "connect: " + ec.message();
    co_return;
  }
  tcp_layer.socket().set_option(tcp::no_delay(true), ec);
  co_await stream.async_handshake(ssl::stream_base::client, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    out.error = describe("handshake", ec, stream.native_handle());
    co_return;
  }
  co_await http::async_write(stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    out.error = describe("write", ec, stream.native_handle());
    co_return;
  }
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  co_await http::async_read(stream, buffer, res, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    // TLS 1.3 servers reject a client certificate after the client's handshake finished: the
    // refusal (an alert) arrives here.
    out.error = describe("read", ec, stream.native_handle());
    co_return;
  }
  out = to_response(res);
  // close_notify, briefly: the answer is in already, whatever the server does with it.
  tcp_layer.expires_after(std::chrono::milliseconds(500));
  co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ec));
}

}  // namespace

const TestPki& test_pki() {
  static const PkiHolder holder;
  return holder.pki;
}

bool NginxTls::available() { return ::access(kBinary, X_OK) == 0; }

NginxTls::NginxTls(const NginxTlsOptions& options) {
  dir = temp_dir();
  // unused_port() can race with another process taking the port: a failed bind gets a new one.
  for (int attempt = 1;; ++attempt) {
    port = unused_port();
    std::filesystem::remove(dir + "/error.log");
    write_file(dir + "/nginx.conf", nginx_config(dir, port, options));
    proc = std::make_unique<Process>(std::vector<std::string>{
        kBinary, "-p", dir + "/", "-c", dir + "/nginx.conf", "-e", dir + "/error.log"});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool exited = false;
    for (;;) {
      if (const int fd = connect_loopback(port); fd >= 0) {
        ::close(fd);
        return;
      }
      if (proc->wait_exit(std::chrono::milliseconds(0))) {
        exited = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string why = error_log() + proc->output();
    proc.reset();
    if (exited && why.find("Address already in use") != std::string::npos && attempt < 5) continue;
    port = -1;
    throw std::runtime_error("nginx did not start in " + dir + (exited ? "" : " (no connection in 10 s)") +
                             ": " + why);
  }
}

std::string NginxTls::error_log() const { return read_text(dir + "/error.log"); }

std::vector<std::string> NginxTls::access_lines() const {
  std::vector<std::string> lines;
  std::istringstream in(read_text(dir + "/access.log"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

bool NginxTls::wait_for_lines(std::size_t n, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (access_lines().size() >= n) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

double NginxTls::reused_ratio(std::size_t skip_first) const {
  const auto lines = access_lines();
  if (lines.size() <= skip_first) return 0;
  std::size_t reused = 0;
  for (std::size_t i = skip_first; i < lines.size(); ++i)
    if (lines[i].rfind("r ", 0) == 0) ++reused;
  return static_cast<double>(reused) / static_cast<double>(lines.size() - skip_first);
}

HttpResponse https_request(int port, const HttpRequest& r, const TlsClientOptions& o,
                           std::chrono::milliseconds timeout) {
  HttpResponse out;
  ssl::context ctx(ssl::context::tls_client);
  beast::error_code ec;
  ctx.set_verify_mode(ssl::verify_peer, ec);
  const std::string ca = o.ca_file.empty() ? test_pki().ca : o.ca_file;
  if (ctx.load_verify_file(ca, ec); ec) {
    out.error = "ca_file " + ca + ": " + ec.message();
    return out;
  }
  if (!o.client_cert.empty() || !o.client_key.empty()) {
    if (ctx.use_certificate_chain_file(o.client_cert, ec); ec) {
      out.error = "client_cert " + o.client_cert + ": " + ec.message();
      return out;
    }
    if (ctx.use_private_key_file(o.client_key, ssl::context::pem, ec); ec) {
      out.error = "client_key " + o.client_key + ": " + ec.message();
      return out;
    }
  }
  if (!o.alpn.empty()) {
    std::string wire;  // each protocol prefixed with its length (RFC 7301)
    for (const auto& p : o.alpn) wire += static_cast<char>(p.size()) + p;
    if (SSL_CTX_set_alpn_protos(ctx.native_handle(), reinterpret_cast<const unsigned char*>(wire.data()),
                                static_cast<unsigned>(wire.size())) != 0) {
      out.error = "alpn: rejected by OpenSSL";
      return out;
    }
  }

  net::io_context ioc;
  Stream stream(ioc, ctx);
  // SNI carries host names only (RFC 6066), never an address literal.
  if (!is_ip_address(o.server_name)) SSL_set_tlsext_host_name(stream.native_handle(), o.server_name.c_str());
  // Asio's check leaves OpenSSL's verify result at "ok" when only the name is wrong: record the
  // reason, so that the error says "hostname mismatch" rather than just "verify failed".
  stream.set_verify_callback([check = ssl::host_name_verification(o.server_name)](
                                 bool preverified, ssl::verify_context& vc) mutable {
    const bool ok = check(preverified, vc);
    if (!ok && preverified) X509_STORE_CTX_set_error(vc.native_handle(), X509_V_ERR_HOSTNAME_MISMATCH);
    return ok;
  });

  auto req = build_request(r, o.server_name);
  const tcp::endpoint ep(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  net::co_spawn(ioc, exchange(stream, ep, req, std::chrono::steady_clock::now() + timeout, out), net::detached);
  ioc.run();
  return out;
}

}  // namespace tollgate::testing

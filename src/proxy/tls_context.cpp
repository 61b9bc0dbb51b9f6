#include "tollgate/proxy/tls_context.hpp"

#include "tollgate/config/regular_file.hpp"

#include <cstdio>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <sys/stat.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>

#include "tollgate/proxy/metrics.hpp"

namespace tollgate::proxy {

namespace {

std::atomic<std::uint64_t> g_generation{0};

// The first verification error of a handshake and the names on the certificate it was found on,
// kept on the SSL by the verify callback: after a failed handshake OpenSSL no longer says which
// certificate failed.
struct VerifyNote {
  long error = X509_V_OK;
  std::vector<std::string> names;
};

int note_index() {
  static const int idx = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, [](void*, void* p, CRYPTO_EX_DATA*, int, long, void*) {
    delete static_cast<VerifyNote*>(p);
  });
  return idx;
}

// Where a connection's new session goes (the worker's per-endpoint slot).
int slot_index() {
  static const int idx = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return idx;
}

int verify_callback(int ok, X509_STORE_CTX* store) {
  if (ok) return 1;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  if (ssl == nullptr) return 0;
  auto* note = static_cast<VerifyNote*>(SSL_get_ex_data(ssl, note_index()));
  if (note == nullptr) {
    note = new VerifyNote;
    SSL_set_ex_data(ssl, note_index(), note);
  }
  if (note->error == X509_V_OK) {
    note->error = X509_STORE_CTX_get_error(store);
    note->names = certificate_names(X509_STORE_CTX_get_current_cert(store));
  }
  return 0;
}

// TLS 1.3 tickets arrive after the handshake, while the connection is read: each new session goes
// to the worker's cache for that endpoint. Returns 1: the cache keeps the reference.
int new_session(SSL* ssl, SSL_SESSION* session) {
  auto* cache = static_cast<TlsSessionCache*>(SSL_get_ex_data(ssl, slot_index()));
  if (cache == nullptr) return 0;
  cache->add(session);
  return 1;
}

std::string openssl_reason() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  if (ERR_SYSTEM_ERROR(e)) return std::strerror(ERR_GET_REASON(e));  // a file that cannot be read: errno
  const char* r = ERR_reason_error_string(e);
  return r ? r : "error " + std::to_string(e);
}

// A TLS file is a regular file (config/regular_file: a FIFO named by mistake would hang the start,
// a reload or --check inside OpenSSL's read): refused by name otherwise. (OpenSSL opens the path
// again to read it: an operator's own path, not a race anyone else can run.)
void check_regular(const std::string& path) {
  const config::RegularFile f(path);
  if (!f.ok()) throw TlsLoadError(f.error);
}

// A private key another user can read is a key anyone on the host may have: refused, naming it.
void check_key_mode(const std::string& path) {
  const config::RegularFile f(path);
  if (!f.ok()) throw TlsLoadError(f.error);
  const struct stat& st = f.st;
  if (st.st_mode & S_IROTH)
    throw TlsLoadError(path + ": private key is readable by every user (mode " +
                       std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                       std::to_string(st.st_mode & 7) + "); chmod o-r it (e.g. 600)");
}

// The certificate and key of `ctx`, checked to belong together; returns the certificate's expiry.
std::int64_t use_certificate(SSL_CTX* ctx, const std::string& cert, const std::string& key) {
  check_key_mode(key);
  check_regular(cert);
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) throw TlsLoadError(cert + ": " + openssl_reason());
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) throw TlsLoadError(key + ": " + openssl_reason());
  if (SSL_CTX_check_private_key(ctx) != 1) throw TlsLoadError(key + ": does not match " + cert);
  return certificate_not_after(SSL_CTX_get0_certificate(ctx));
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// ALPN on the listener: HTTP/1.1 when the client offers it; a client that offers only other
// protocols gets no ALPN answer (and its HTTP/1.1 request, if it sends one, is served).
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned inlen, void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof kHttp11, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "no name" : out;
}

}  // namespace

std::string escape_cert_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7E && c != '\\') {
      out += ch;
      continue;
    }
    char hex[5];
    std::snprintf(hex, sizeof hex, "\\x%02X", c);
    out += hex;
  }
  return out;
}

std::vector<std::string> certificate_names(X509* cert) {
  std::vector<std::string> out;
  if (cert == nullptr) return out;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type == GEN_DNS) {
        const ASN1_STRING* s = n->d.dNSName;
        out.push_back(escape_cert_text({reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                        static_cast<std::size_t>(ASN1_STRING_length(s))}));
      } else if (n->type == GEN_IPADD) {
        const ASN1_OCTET_STRING* s = n->d.iPAddress;
        char text[INET6_ADDRSTRLEN] = {};
        const int len = ASN1_STRING_length(s);
        if (len == 4 || len == 16) inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), text, sizeof text);
        out.emplace_back(text);
      }
    }
    GENERAL_NAMES_free(sans);
  }
  if (out.empty()) {
    const X509_NAME* subject = X509_get_subject_name(cert);
    const int at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (at >= 0) {
      const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
      out.push_back("CN=" +
                    escape_cert_text({reinterpret_cast<const char*>(ASN1_STRING_get0_data(cn)),
                                      static_cast<std::size_t>(ASN1_STRING_length(cn))}) +
                    " (no subjectAltName: not accepted)");
    }
  }
  return out;
}

std::int64_t certificate_not_after(X509* cert) {
  if (cert == nullptr) return 0;
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return 0;
  return static_cast<std::int64_t>(timegm(&tm));
}

TlsFailure describe_verify_error(long e, const std::vector<std::string>& names) {
  switch (e) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return {"expired", "certificate has expired"};
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return {"not_yet_valid", "certificate is not yet valid"};
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return {"hostname_mismatch", "hostname mismatch: certificate is for " + joined(names)};
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      return {"unknown_ca", "unknown certificate authority"};
    default:
      return {"verify_failed", std::string("certificate verify failed: ") + X509_verify_cert_error_string(e)};
  }
}

TlsFailure describe_tls_failure(SSL* ssl, unsigned long err) {
  if (ssl) {
    if (const auto* note = static_cast<const VerifyNote*>(SSL_get_ex_data(ssl, note_index())); note && note->error != X509_V_OK)
      return describe_verify_error(note->error, note->names);
  }
  if (err == 0) return {"handshake", "handshake failure: connection closed by peer"};
  switch (ERR_GET_REASON(err)) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
    case SSL_R_NO_PROTOCOLS_AVAILABLE:
    case SSL_R_WRONG_VERSION_NUMBER:
      return {"protocol_version", "handshake failure: protocol version"};
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      return {"client_certificate", "handshake failure: the upstream requires a client certificate"};
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
      return {"client_certificate", "handshake failure: the upstream refused the client certificate"};
    default: {
      const char* r = ERR_reason_error_string(err);
      return {"handshake", std::string("handshake failure: ") + (r ? r : "error " + std::to_string(err))};
    }
  }
}

// ---- client profiles -------------------------------------------------------------------------

std::shared_ptr<const TlsClientProfile> TlsClientProfile::load(const config::UpstreamConfig& u) {
  std::shared_ptr<TlsClientProfile> p(new TlsClientProfile);
  const config::UpstreamTlsConfig& t = u.tls;
  p->ctx_ = SSL_CTX_new(TLS_client_method());
  if (p->ctx_ == nullptr) throw TlsLoadError("upstream " + u.name + ": cannot make a TLS context: " + openssl_reason());
  SSL_CTX* ctx = p->ctx_;
  SSL_CTX_set_min_proto_version(ctx, t.min_version == config::TlsVersion::tls1_3 ? TLS1_3_VERSION : TLS1_2_VERSION);
  // Partial writes and moving buffers: a write resumed after EAGAIN may pass the rest; idle
  // connections give their read and write buffers back.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  // Read what the socket has in one recv, not a record's header and then its body in two.
  SSL_CTX_set_read_ahead(ctx, 1);
  // Sessions are kept by the workers per endpoint (new_session), never in a shared cache.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, new_session);
  ERR_clear_error();
  if (!t.insecure_skip_verify) {
    // The trust store is read once per load (the system bundle as one file), not per connection.
    if (!t.ca_file.empty()) {
      try {
        check_regular(t.ca_file);
      } catch (const TlsLoadError& e) {
        throw TlsLoadError("upstream " + u.name + ": " + e.what());
      }
      if (SSL_CTX_load_verify_locations(ctx, t.ca_file.c_str(), nullptr) != 1)
        throw TlsLoadError("upstream " + u.name + ": " + t.ca_file + ": " + openssl_reason());
    } else if (SSL_CTX_set_default_verify_file(ctx) != 1) {
      throw TlsLoadError("upstream " + u.name + ": the system trust store (" + X509_get_default_cert_file() +
                         "): " + openssl_reason() + "; install ca-certificates or set tls.ca_file");
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_callback);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (!t.cert_file.empty()) {
    try {
      p->client_not_after_ = use_certificate(ctx, t.cert_file, t.key_file);
    } catch (const TlsLoadError& e) {
      throw TlsLoadError("upstream " + u.name + ": " + e.what());
    }
  }
  p->server_name_ = t.server_name.empty() ? u.host : t.server_name;
  p->name_is_ip_ = is_ip_literal(p->server_name_);
  p->insecure_ = t.insecure_skip_verify;
  p->generation_ = ++g_generation;
  return p;
}

TlsClientProfile::~TlsClientProfile() {
  if (ctx_) SSL_CTX_free(ctx_);
}

SSL* TlsClientProfile::new_connection(int fd, SSL_SESSION* resume, TlsSessionCache* sessions) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  SSL_set_fd(ssl, fd);
  if (!name_is_ip_) SSL_set_tlsext_host_name(ssl, server_name_.c_str());  // an IP literal sends no SNI
  if (!insecure_) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (name_is_ip_) {
      X509_VERIFY_PARAM_set1_ip_asc(param, server_name_.c_str());
    } else {
      // The subjectAltNames only, as browsers and Go check them: never the CN of a certificate
      // without a DNS name (OpenSSL's default falls back to it).
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
      SSL_set1_host(ssl, server_name_.c_str());
    }
  }
  if (sessions) SSL_set_ex_data(ssl, slot_index(), sessions);
  if (resume) SSL_set_session(ssl, resume);
  SSL_set_connect_state(ssl);
  return ssl;
}

// ---- a worker's sessions with one endpoint -----------------------------------------------------

TlsSessionCache::~TlsSessionCache() {
  for (SSL_SESSION* s : sessions_) SSL_SESSION_free(s);
}

SSL_SESSION* TlsSessionCache::take(std::uint64_t generation) {
  if (generation != generation_) {
    if (generation_ != 0) {  // 0: the first use, whatever came before was made under this one
      for (SSL_SESSION* s : sessions_) SSL_SESSION_free(s);
      sessions_.clear();
    }
    generation_ = generation;
  }
  while (!sessions_.empty()) {
    SSL_SESSION* s = sessions_.back();
    if (!SSL_SESSION_is_resumable(s)) {  // the server refused it, or it expired
      sessions_.pop_back();
      SSL_SESSION_free(s);
      continue;
    }
    if (SSL_SESSION_get_protocol_version(s) == TLS1_3_VERSION && sessions_.size() > 1) {
      sessions_.pop_back();  // once: the caller's reference is this one
      return s;
    }
    // A TLS 1.2 session, or the last ticket: offered again rather than a full handshake (more new
    // connections at once than tickets in hand; the next answers bring new ones).
    SSL_SESSION_up_ref(s);
    return s;
  }
  return nullptr;
}

void TlsSessionCache::add(SSL_SESSION* session) {
  // A TLS 1.2 session replaces what was kept (one is reused); TLS 1.3 tickets queue up.
  if (SSL_SESSION_get_protocol_version(session) != TLS1_3_VERSION || sessions_.size() >= kMax) {
    if (SSL_SESSION_get_protocol_version(session) != TLS1_3_VERSION) {
      for (SSL_SESSION* s : sessions_) SSL_SESSION_free(s);
      sessions_.clear();
    } else {
      SSL_SESSION_free(sessions_.front());
      sessions_.erase(sessions_.begin());
    }
  }
  sessions_.push_back(session);
}

// ---- the listener's profile ------------------------------------------------------------------

std::shared_ptr<const TlsServerProfile> TlsServerProfile::load(const config::ListenerTlsConfig& c) {
  std::shared_ptr<TlsServerProfile> p(new TlsServerProfile);
  p->ctx_ = SSL_CTX_new(TLS_server_method());
  if (p->ctx_ == nullptr) throw TlsLoadError("tls: cannot make a TLS context: " + openssl_reason());
  SSL_CTX_set_min_proto_version(p->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_mode(p->ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_select_cb(p->ctx_, select_alpn, nullptr);
  SSL_CTX_set_read_ahead(p->ctx_, 1);
  // No renegotiation: a client could make the gateway do handshakes for free.
  SSL_CTX_set_options(p->ctx_, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  try {
    p->not_after_ = use_certificate(p->ctx_, c.cert_file, c.key_file);
  } catch (const TlsLoadError& e) {
    throw TlsLoadError(std::string("tls: ") + e.what());
  }
  return p;
}

TlsServerProfile::~TlsServerProfile() {
  if (ctx_) SSL_CTX_free(ctx_);
}

SSL* TlsServerProfile::new_connection(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  SSL_set_fd(ssl, fd);
  SSL_set_accept_state(ssl);
  return ssl;
}

// ---- every profile ---------------------------------------------------------------------------

namespace {
prometheus::Family<prometheus::Gauge>& expiry_family(prometheus::Registry& r) {
  return prometheus::BuildGauge()
      .Name("tollgate_tls_certificate_expiry_seconds")
      .Help("When a certificate expires (Unix seconds): the listener's own, the client certificate "
            "presented to an upstream, and the last certificate each upstream presented.")
      .Register(r);
}
}  // namespace

UpstreamTls::UpstreamTls(const config::UpstreamConfig& conf, std::shared_ptr<const TlsClientProfile> profile,
                         Metrics& metrics)
    : conf_(conf), metrics_(metrics), profile_(std::move(profile)) {
  auto& handshakes = prometheus::BuildCounter()
                         .Name("tollgate_upstream_tls_handshakes_total")
                         .Help("TLS handshakes with upstreams, by whether the session was resumed.")
                         .Register(metrics.registry);
  handshakes_[0] = &handshakes.Add({{"upstream", conf.name}, {"resumed", "false"}});
  handshakes_[1] = &handshakes.Add({{"upstream", conf.name}, {"resumed", "true"}});
}

void UpstreamTls::swap(std::shared_ptr<const TlsClientProfile> p) {
  profile_.store(std::move(p));
  epoch_.fetch_add(1, std::memory_order_release);
}

void UpstreamTls::saw_peer_certificate(std::int64_t not_after) {
  peer_not_after_.store(not_after, std::memory_order_relaxed);
  std::call_once(peer_once_, [&] {
    peer_expiry_ = &expiry_family(metrics_.registry).Add({{"use", "upstream"}, {"name", conf_.name}});
  });
  peer_expiry_->Set(static_cast<double>(not_after));
}

void UpstreamTls::count_handshake(bool resumed) { handshakes_[resumed ? 1 : 0]->Increment(); }

void UpstreamTls::count_failure(const std::string& reason) {
  // Rare, so the series is looked up here (Family::Add returns the existing one).
  prometheus::BuildCounter()
      .Name("tollgate_upstream_tls_failures_total")
      .Help("TLS handshakes and verifications with upstreams that failed, by reason.")
      .Register(metrics_.registry)
      .Add({{"upstream", conf_.name}, {"reason", reason}})
      .Increment();
}

std::shared_ptr<UpstreamTls> TlsProfiles::load_upstream(const config::UpstreamConfig& u) const {
  auto p = TlsClientProfile::load(u);
  if (p->insecure())
    std::cerr << "tollgate: warn: upstream '" << u.name << "' (" << u.url
              << "): tls.insecure_skip_verify is true: its certificate and host name are NOT verified; anyone on "
                 "the path can impersonate it"
              << std::endl;
  if (p->has_client_cert()) publish_expiry("client", u.name, p->client_cert_not_after());
  return std::make_shared<UpstreamTls>(u, std::move(p), metrics_);
}

TlsProfiles::TlsProfiles(const config::GatewayConfig& cfg, Metrics& metrics)
    : listener_conf_(cfg.tls), metrics_(metrics) {
  for (auto& u : prepare(cfg.upstreams))
    if (u) upstreams_.push_back(std::move(u));
  if (cfg.tls.enabled()) {
    auto l = TlsServerProfile::load(cfg.tls);
    publish_expiry("listener", "listener", l->not_after());
    listener_.store(std::move(l));
    auto& results = prometheus::BuildCounter()
                        .Name("tollgate_listener_tls_handshakes_total")
                        .Help("TLS handshakes on the proxy listener, by result (full, resumed, failed, timeout, plain_http).")
                        .Register(metrics.registry);
    for (std::string_view r : {"full", "resumed", "failed", "timeout", "plain_http"})
      listener_results_.emplace_back(r, &results.Add({{"result", std::string(r)}}));
  }
}

void TlsProfiles::count_listener(std::string_view result) {
  for (auto& [name, counter] : listener_results_)
    if (name == result) counter->Increment();
}

TlsProfiles::~TlsProfiles() = default;

std::shared_ptr<UpstreamTls> TlsProfiles::upstream(std::string_view name) const {
  std::lock_guard lock(mu_);
  for (const auto& u : upstreams_)
    if (u->conf().name == name) return u;
  return nullptr;
}

std::vector<std::shared_ptr<UpstreamTls>> TlsProfiles::prepare(const std::vector<config::UpstreamConfig>& upstreams) const {
  std::vector<std::shared_ptr<UpstreamTls>> out;
  for (const auto& u : upstreams) {
    if (!u.https) {
      out.push_back(nullptr);
      continue;
    }
    std::shared_ptr<UpstreamTls> kept;
    {
      std::lock_guard lock(mu_);
      for (const auto& have : upstreams_)
        if (have->conf() == u) kept = have;
    }
    out.push_back(kept ? std::move(kept) : load_upstream(u));
  }
  return out;
}

void TlsProfiles::adopt(std::vector<std::shared_ptr<UpstreamTls>> upstreams) {
  std::erase(upstreams, nullptr);
  std::lock_guard lock(mu_);
  upstreams_ = std::move(upstreams);
}

bool TlsProfiles::any() const {
  if (listener_.load()) return true;
  std::lock_guard lock(mu_);
  return !upstreams_.empty();
}

void TlsProfiles::publish_expiry(const std::string& use, const std::string& name, std::int64_t not_after) const {
  expiry_family(metrics_.registry).Add({{"use", use}, {"name", name}}).Set(static_cast<double>(not_after));
}

TlsProfiles::ReloadReport TlsProfiles::reload() {
  std::lock_guard reload_lock(reload_mu_);
  ReloadReport r;
  std::vector<std::shared_ptr<UpstreamTls>> list;
  {
    std::lock_guard lock(mu_);
    list = upstreams_;
  }
  for (const auto& slot : list) {
    const config::UpstreamConfig& u = slot->conf();
    try {
      auto p = TlsClientProfile::load(u);
      if (p->has_client_cert()) publish_expiry("client", u.name, p->client_cert_not_after());
      slot->swap(std::move(p));
      r.reloaded.push_back("upstream " + u.name);
    } catch (const TlsLoadError& e) {
      r.errors.emplace_back(e.what());
    }
  }
  if (listener_conf_.enabled()) {
    try {
      auto l = TlsServerProfile::load(listener_conf_);
      publish_expiry("listener", "listener", l->not_after());
      listener_.store(std::move(l));
      r.reloaded.emplace_back("listener");
    } catch (const TlsLoadError& e) {
      r.errors.emplace_back(e.what());
    }
  }
  return r;
}

std::vector<TlsProfiles::Status> TlsProfiles::status() const {
  std::vector<Status> out;
  if (auto l = listener_.load()) {
    Status s;
    s.cert_not_after = l->not_after();
    s.min_version = "1.2";
    out.push_back(std::move(s));
  }
  std::lock_guard lock(mu_);
  for (const auto& slot : upstreams_) {
    const config::UpstreamConfig& u = slot->conf();
    auto p = slot->profile();
    Status s;
    s.upstream = u.name;
    s.verify = !p->insecure();
    s.insecure = p->insecure();
    s.server_name = p->server_name();
    s.min_version = u.tls.min_version == config::TlsVersion::tls1_3 ? "1.3" : "1.2";
    s.cert_not_after = p->client_cert_not_after();
    s.peer_not_after = slot->peer_not_after();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tollgate::proxy

// libFuzzer: the request front end. Bytes go through the same Beast parser settings as the proxy
// (header and body limits), then the target through path extraction, suffix matching and the
// header and access-log formatting that echo parts of it, and the client address and keys derived
// from X-Forwarded-For and a key header (issue 7).
#include <utility>

#include <boost/beast/http.hpp>
#include <cstdint>
#include <string>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/client_key.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace http = boost::beast::http;

namespace {
const std::shared_ptr<const tollgate::config::Snapshot>& rules() {
  static const auto snap = [] {
    std::vector<tollgate::config::RawRow> rows;
    for (const char* url : {"/shopping/search", "/search", "/pricing", "/a/b/c"}) {
      tollgate::config::RawRow r;
      r.config_id = static_cast<std::int64_t>(rows.size() + 1);
      r.interface_url = url;
      r.rate_limit = 5;
      r.status = 1;
      rows.push_back(r);
    }
    return tollgate::config::make_snapshot(tollgate::config::validate_rows(rows), 1, "fuzz");
  }();
  return snap;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(64 * 1024);
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (!parser.is_header_done()) return 0;
  const auto& req = parser.get();
  const std::string_view path = tollgate::proxy::path_of(req.target());
  const tollgate::config::Rule* rule = rules()->match(path);
  tollgate::store::StoreDecision sd;
  sd.decision.retry_after_us = static_cast<std::int64_t>(size) * 1000;
  if (rule) {
    (void)tollgate::proxy::rejection_body(*rule, nullptr, sd);
    (void)tollgate::proxy::ratelimit_header(*rule, nullptr, sd);
  }
  static const tollgate::proxy::TrustedProxies trusted = [] {
    tollgate::proxy::TrustedProxies t;
    (void)t.add("127.0.0.0/8");
    (void)t.add("fd00::/8");
    return t;
  }();
  std::string xff;
  for (auto [it, end] = req.equal_range("X-Forwarded-For"); it != end; ++it) {
    if (!xff.empty()) xff += ',';
    xff.append(it->value().data(), it->value().size());
  }
  const std::string client = tollgate::proxy::client_address("127.0.0.1", xff, trusted);
  std::optional<std::string_view> key_header;
  if (auto it = req.find("X-Api-Key"); it != req.end()) key_header = std::string_view(it->value().data(), it->value().size());
  std::string key;
  for (auto kind : {tollgate::config::KeySpec::Kind::client_ip, tollgate::config::KeySpec::Kind::client_ip_path,
                    tollgate::config::KeySpec::Kind::header})
    (void)tollgate::proxy::client_key({kind, "X-Api-Key"}, client, path, key_header,
                                      tollgate::proxy::MissingKey::anonymous, key);
  (void)tollgate::proxy::canonical_address(xff);
  tollgate::proxy::AccessRecord rec;
  rec.method = req.method_string();
  rec.path = path;
  rec.client = "127.0.0.1";
  (void)tollgate::proxy::access_line(rec);
  (void)tollgate::proxy::error_body("bad_request", std::string(req.target()));
  return 0;
}

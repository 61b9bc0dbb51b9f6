// Internal to the test clients (http_client.cpp, tls.cpp): a test request as a Beast message and
// a Beast response as a test response. Beast stays out of the public support headers.
#pragma once

#include <boost/beast/http.hpp>
#include <cctype>
#include <string>

#include "support/http_client.hpp"

namespace tollgate::testing::detail {

namespace http = boost::beast::http;

inline http::request<http::string_body> build_request(const HttpRequest& r, const std::string& host) {
  http::request<http::string_body> req{http::string_to_verb(r.method), r.target, 11};
  req.set(http::field::host, host);
  for (const auto& [k, v] : r.headers) req.set(k, v);
  req.body() = r.body;
  if (!r.body.empty() || r.method == "POST" || r.method == "PUT") req.prepare_payload();
  return req;
}

// Header names in lower case.
inline HttpResponse to_response(http::response<http::string_body>& res) {
  HttpResponse out;
  out.status = res.result_int();
  for (const auto& f : res) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(f.value());
  }
  out.body = std::move(res.body());
  return out;
}

}  // namespace tollgate::testing::detail

#include "responses.hpp"

#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {

net::awaitable<bool> send_answer(TimedSocket& stream, unsigned version, bool keep, const OwnAnswer& a,
                                 milliseconds timeout) {
  http::response<http::string_body> res{a.status, version};
  res.set(http::field::content_type, "application/json");
  if (a.retry_after_s > 0) res.set(http::field::retry_after, std::to_string(a.retry_after_s));
  if (!a.allow.empty()) res.set(http::field::allow, a.allow);
  if (!a.policy_header.empty()) {
    res.set("RateLimit-Policy", a.policy_header);
    res.set("RateLimit", a.limit_header);
  }
  res.keep_alive(keep);
  res.body() = a.body;
  res.prepare_payload();
  beast::error_code ec;
  stream.start(deadline_after(timeout));
  co_await http::async_write(stream, res, with(ec));
  stream.end(ec);
  co_return !ec && keep;
}

OwnAnswer error_answer(http::status status, std::string_view code, std::string_view detail) {
  OwnAnswer a;
  a.status = status;
  a.body = error_body(code, detail);
  return a;
}

}  // namespace tollgate::proxy

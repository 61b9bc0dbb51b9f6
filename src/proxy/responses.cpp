#include "responses.hpp"

#include "tollgate/proxy/json_text.hpp"
#include "tollgate/proxy/request_id.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace tollgate::proxy {

net::awaitable<bool> send_answer(TimedSocket& stream, unsigned version, bool keep, const OwnAnswer& a,
                                 milliseconds timeout) {
  std::string head;
  head.reserve(256 + a.request_id.size() + a.policy_header.size() + a.limit_header.size());
  append_status_line(head, version, a.status, reason_of(a.status));
  // X-Tollgate-Origin marks the gateway's own answers: a 429 from here is never taken for the
  // upstream's. Both fields are constant: one append.
  static constexpr std::string_view kFixed =
      "Content-Type: application/problem+json\r\nX-Tollgate-Origin: gateway\r\n";
  head.append(kFixed);
  if (!a.request_id.empty()) append_request_id_field(head, a.request_id);
  if (a.retry_after_s > 0) append_field(head, "Retry-After", std::to_string(a.retry_after_s));
  if (!a.allow.empty()) append_field(head, "Allow", a.allow);
  if (!a.policy_header.empty()) {
    append_field(head, "RateLimit-Policy", a.policy_header);
    append_field(head, "RateLimit", a.limit_header);
  }
  if (version == 10 && keep) append_field(head, "Connection", "keep-alive");
  if (version != 10 && !keep) append_field(head, "Connection", "close");
  append_field(head, "Content-Length", std::to_string(a.body.size()));
  head.append("\r\n", 2);
  beast::error_code ec;
  stream.start(deadline_after(timeout));
  co_await write_both(stream, net::buffer(head), net::buffer(a.body), ec);
  stream.end(ec);
  co_return !ec && keep;
}

void set_request_id(OwnAnswer& a, std::string_view id) {
  a.request_id = id;
  if (!id.empty()) add_string_member(a.body, "request_id", id);
}

OwnAnswer error_answer(int status, std::string_view code, std::string_view detail, std::string_view request_id) {
  OwnAnswer a;
  a.status = status;
  a.body = problem_body(status, reason_of(status), code, detail);
  set_request_id(a, request_id);
  return a;
}

}  // namespace tollgate::proxy

// Internal to the proxy: one client connection. Reads each request (header and body limits, one
// deadline per part), checks its framing, target, Host and method, plans and carries out its
// decision (request_policy), holds it on a timer when it must wait for its slot, then forwards it
// (upstream.hpp). The gateway's own answers go through responses.hpp.
#pragma once

#include "proxy_context.hpp"

namespace tollgate::proxy {

net::awaitable<void> run_session(ProxyContext& px, Worker& w, tcp::socket sock);

}  // namespace tollgate::proxy

// Internal to the proxy: one client connection. Reads each request (header and body limits, one
// deadline per part), checks its framing, target, Host and method, plans and carries out its
// decision (request_policy), holds it on a timer when it must wait for its slot, then forwards it
// (upstream.hpp). The gateway's own answers go through responses.hpp.
#pragma once

#include "peer_slots.hpp"
#include "proxy_context.hpp"

namespace tollgate::proxy {

// `peer`: the socket peer's address (IPv4-mapped IPv6 as IPv4); `slot`: its place under
// proxy.max_connections_per_client, given back when the connection closes.
net::awaitable<void> run_session(ProxyContext& px, Worker& w, tcp::socket sock, net::ip::address peer, PeerSlot slot);

}  // namespace tollgate::proxy

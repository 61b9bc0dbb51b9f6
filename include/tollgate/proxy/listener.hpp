// Listening sockets for the proxy and the admin API.
#pragma once

#include <utility>  // before Asio's coroutine headers (Boost 1.74 + g++ 12)

#include <boost/asio/ip/tcp.hpp>

#include "tollgate/config/gateway_config.hpp"

namespace tollgate::proxy {

// The address to listen on ("localhost" is 127.0.0.1); throws std::runtime_error if it is none.
boost::asio::ip::tcp::endpoint make_endpoint(const config::Endpoint& e);

// Opens, binds (SO_REUSEADDR; SO_REUSEPORT when several acceptors share the port) and listens;
// throws std::runtime_error naming the address when the bind fails.
void open_acceptor(boost::asio::ip::tcp::acceptor& acc, const boost::asio::ip::tcp::endpoint& ep, bool share_port);

}  // namespace tollgate::proxy

#include "tollgate/proxy/listener.hpp"

#include <boost/asio/ip/address.hpp>
#include <stdexcept>
#include <string>
#include <sys/socket.h>

namespace tollgate::proxy {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using reuse_port = net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

tcp::endpoint make_endpoint(const config::Endpoint& e) {
  boost::system::error_code ec;
  auto addr = net::ip::make_address(e.host == "localhost" ? "127.0.0.1" : e.host, ec);
  if (ec) throw std::runtime_error("listen address '" + e.host + "' is not an IP address");
  return {addr, e.port};
}

void open_acceptor(tcp::acceptor& acc, const tcp::endpoint& ep, bool share_port) {
  acc.open(ep.protocol());
  acc.set_option(net::socket_base::reuse_address(true));
  if (share_port) acc.set_option(reuse_port(true));
  boost::system::error_code ec;
  acc.bind(ep, ec);
  if (ec) throw std::runtime_error("cannot bind " + ep.address().to_string() + ":" + std::to_string(ep.port()) + ": " + ec.message());
  acc.listen(net::socket_base::max_listen_connections);
}

}  // namespace tollgate::proxy

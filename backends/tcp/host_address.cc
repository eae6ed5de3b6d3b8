#include "backends/tcp/host_address.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/host_name.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "common/logging.h"

namespace kolo::tcp {

namespace asio = boost::asio;

std::string publish_host(const std::string& chosen, int local_size, int size) {
  if (!chosen.empty()) return chosen;
  if (local_size >= size) return "127.0.0.1";
  boost::system::error_code ec;
  const std::string name = asio::ip::host_name(ec);
  if (!ec) {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(asio::ip::tcp::v4(), name, "0", ec);
    if (!ec) {
      for (const auto& entry : results) {
        const asio::ip::address a = entry.endpoint().address();
        if (!a.is_loopback() && !a.is_unspecified()) return a.to_string();
      }
    }
  }
  KOLO_LOG_WARNING("tcp: could not find a non-loopback address for host '"
                   << name << "'; publishing 127.0.0.1, so ranks on other hosts cannot connect"
                   << " (set KOLO_TCP_HOST to this host's address)");
  return "127.0.0.1";
}

Result<HostPortText> split_host_port(std::string_view text, std::string_view what) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument(std::string(what) + ": '" + std::string(text) + "' " + why +
                                   "; expected host:port or [ipv6]:port");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad("has an unterminated bracket or no port");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("has no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) return bad("has an empty host");
  if (port.empty() || port.size() > 5) return bad("has no valid port");
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad("has a non-numeric port");
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > 65535) return bad("has a port outside 1..65535");
  return HostPortText{std::string(host), value};
}

std::string join_host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace kolo::tcp

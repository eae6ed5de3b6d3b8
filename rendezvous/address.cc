#include "rendezvous/address.h"

#include <charconv>

namespace kolo {

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<HostPort> parse_host_port(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(std::string(what) + "=\"" + std::string(text) +
                                   "\" is invalid (" + std::string(why) +
                                   "): expected HOST:PORT, e.g. 127.0.0.1:29500 or [::1]:29500");
  };
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("missing ']'");
    out.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("missing ':PORT'");
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("missing ':PORT'");
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) return bad("IPv6 hosts need brackets");
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty()) return bad("empty host");
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size())
    return bad("port is not a number");
  if (port < 0 || port > 65535) return bad("port must be in 0..65535");
  out.port = port;
  return out;
}

}  // namespace kolo

// Which address a rank publishes for its peers to connect to, and the small address helpers the
// tcp bootstrap needs.
#pragma once

#include <string>
#include <string_view>

#include "kolo/status.h"

namespace kolo::tcp {

// The host this rank publishes, in order of preference:
//   1. `chosen` when non-empty (KOLO_TCP_HOST: a name or an IP literal; the user knows best,
//      e.g. the address of a fast interface);
//   2. "127.0.0.1" when every rank runs on this host (local_size == size);
//   3. the first non-loopback IPv4 address the host name resolves to;
//   4. "127.0.0.1", with a warning, when that fails (single-host runs still work).
std::string publish_host(const std::string& chosen, int local_size, int size);

struct HostPortText {
  std::string host;
  int port = 0;
};
// Parses "host:port" or "[v6]:port". InvalidArgument naming `what`, the text and the accepted
// forms otherwise.
Result<HostPortText> split_host_port(std::string_view text, std::string_view what);
// "host:port", bracketing hosts that contain ':'.
std::string join_host_port(const std::string& host, int port);

}  // namespace kolo::tcp

// "host:port" addresses as used by --rdzv and KOLO_STORE_ADDR. IPv6 hosts are written in
// brackets: "[::1]:29500".
#pragma once

#include <string>
#include <string_view>

#include "kolo/status.h"

namespace kolo {

struct HostPort {
  std::string host;
  int port = 0;  // 0..65535; 0 asks a server for an ephemeral port
  // "host:port", with brackets around a host that contains ':'.
  std::string to_string() const;
};

// Parses "host:port". InvalidArgument naming `what` (e.g. "KOLO_STORE_ADDR"), the text and the
// accepted form when the host is empty, the port is missing, not a number or out of range.
Result<HostPort> parse_host_port(std::string_view text, std::string_view what = "address");

}  // namespace kolo

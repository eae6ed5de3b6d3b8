// The tcp bootstrap: listens, publishes this rank's address in the store, connects to lower
// ranks, accepts higher ones, and authenticates every connection (auth.h). See tcp_backend.h
// for the public contract; this header only exposes the knobs the factories read from the env.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "backends/registry.h"
#include "backends/tcp/tcp_channel.h"
#include "kolo/status.h"

namespace kolo::tcp {

// The knobs of the tcp bootstrap; the member defaults are the registry's (tcp_backend_test
// checks that they agree).
struct ConnectOptions {
  std::string host;                              // KOLO_TCP_HOST; empty: publish_host()'s choice
  size_t socket_buffer_bytes = size_t{4} << 20;  // SO_SNDBUF and SO_RCVBUF
  uint64_t max_frame_bytes = kDefaultMaxFrameBytes;
  std::chrono::microseconds spin = TcpChannelOptions::kDefaultSpin;  // TcpChannelOptions::spin
  // Replace the TCP connection to a peer on the same host by an AF_UNIX socket (tcp_connect.cc).
  bool same_host_unix = true;
  bool integrity = false;  // KOLO_TCP_INTEGRITY: TcpChannelOptions::integrity
};

// Reads KOLO_TCP_HOST, KOLO_TCP_SOCKET_BUFFER, KOLO_TCP_MAX_FRAME, KOLO_TCP_SPIN,
// KOLO_TCP_UNIX and KOLO_TCP_INTEGRITY through the registry; InvalidArgument naming any invalid
// KOLO_* variable.
Result<ConnectOptions> connect_options_from_env();

// Connects this rank's TcpChannel (see tcp_backend.h for the protocol and the errors).
Result<std::unique_ptr<TcpChannel>> connect_channel(const BackendContext& context,
                                                    const ConnectOptions& options);

}  // namespace kolo::tcp

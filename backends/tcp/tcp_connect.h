// The tcp bootstrap: listens, publishes this rank's address in the store, connects to lower
// ranks, accepts higher ones, and authenticates every connection (auth.h). See tcp_backend.h
// for the public contract; this header only exposes the options the factories read from the
// job's knobs.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "backends/registry.h"
#include "backends/tcp/tcp_channel.h"
#include "common/knobs.h"
#include "kolo/status.h"

namespace kolo::tcp {

// The knobs of the tcp bootstrap (tcp_knobs.h). No defaults here: connect_options() fills every
// member from a KnobSet (tests start from connect_options(KnobSet::defaults())).
struct ConnectOptions {
  std::string host;                   // KOLO_TCP_HOST; empty: publish_host()'s choice
  size_t socket_buffer_bytes = 0;     // KOLO_TCP_SOCKET_BUFFER: SO_SNDBUF and SO_RCVBUF
  uint64_t max_frame_bytes = 0;       // KOLO_TCP_MAX_FRAME: TcpChannelOptions::max_frame_bytes
  std::chrono::microseconds spin{0};  // KOLO_TCP_SPIN: TcpChannelOptions::spin
  // KOLO_TCP_UNIX: replace the TCP connection to a peer on the same host by an AF_UNIX socket
  // (tcp_connect.cc).
  bool same_host_unix = false;
  bool integrity = false;  // KOLO_TCP_INTEGRITY: TcpChannelOptions::integrity
};

// KOLO_TCP_HOST, KOLO_TCP_SOCKET_BUFFER, KOLO_TCP_MAX_FRAME, KOLO_TCP_SPIN, KOLO_TCP_UNIX and
// KOLO_TCP_INTEGRITY from `knobs` (validated when they were read).
ConnectOptions connect_options(const KnobSet& knobs);

// Connects this rank's TcpChannel (see tcp_backend.h for the protocol and the errors).
Result<std::unique_ptr<TcpChannel>> connect_channel(const BackendContext& context,
                                                    const ConnectOptions& options);

}  // namespace kolo::tcp

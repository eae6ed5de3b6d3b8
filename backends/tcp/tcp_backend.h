// The embedded TCP backend: Kolo's default for CPU tensors when no MPI is around.
//
// connect_tcp_channel() connects a full mesh of TCP connections through the rendezvous store:
// every rank listens on an ephemeral port and publishes "host:port" under
// `<store_prefix>/tcp/addr/<rank>`; each rank then connects to every lower rank (retrying until
// connect_timeout while that rank is not listening yet) and accepts every higher one. Each new
// connection is authenticated with the job secret before it carries data (auth.h: mutual
// challenge/response bound to the endpoints each side sees, so a relay cannot complete it; the
// data that follows is MAC'd per frame only with KOLO_TCP_INTEGRITY=1: docs/security.md). Incoming
// handshakes run concurrently (accept_peers.h). Sockets get TCP_NODELAY and large kernel buffers.
// Same-host peers: once authenticated, a connection whose two ends have the same IP address is
// replaced by an AF_UNIX stream socket (abstract name offered under the connection's session
// key, token derived from it; see tcp_connect.cc). Same bytes, same framing, but no TCP/IP
// stack per segment: on the 2-core development VM a 2-rank 16-256 MiB allreduce went from
// ~0.3-0.8 to ~1.1-3 GB/s busbw (docs/benchmarks.md). Error messages name such a link
// "rank R (host:port via AF_UNIX)".
// make_tcp_backend() wraps that channel in a ChannelBackend ("tcp"), which runs the ops/
// algorithms (segmented pipelined ring, recursive doubling) over it.
//
// Control lane. One channel carries one ordered byte stream per peer, so a small message queues
// behind bulk data sent before it on the same channel. For a control plane that must never wait
// behind gradients, connect a SECOND channel with a different store_prefix (e.g.
// "<prefix>/control"): it has its own connections, and its wait() drives its own event loop.
//
// Knobs: this folder's rows (tcp_knobs.h: KOLO_TCP_HOST, KOLO_TCP_SOCKET_BUFFER,
// KOLO_TCP_MAX_FRAME, KOLO_TCP_UNIX, KOLO_TCP_SPIN, KOLO_TCP_INTEGRITY) and the core's channel
// backend rows (KOLO_RING_THRESHOLD, KOLO_RING_SEGMENT), read by these factories from the
// context's knobs (BackendContext::knobs). KOLO_TCP_MAX_FRAME and KOLO_TCP_INTEGRITY must match
// on every rank; KOLO_TCP_UNIX switches a pair to AF_UNIX only when both ranks allow it.
//
// Errors: InvalidArgument for a bad context (no knobs among them); Timeout when the peers do not
// all connect within connect_timeout (the message lists the missing ranks and any rejected
// connections); PeerFailure when a peer fails authentication (naming its rank and address) or
// is not the rank/job size its address claims; IoError when a socket cannot be opened.
// Thread-safety: the factories may run concurrently for different ranks (as threads in tests);
// the returned objects follow ops::Channel's / Backend's contracts.
#pragma once

#include <memory>

#include "backends/backend.h"
#include "backends/registry.h"
#include "kolo/status.h"
#include "ops/channel.h"

namespace kolo {

// The tcp Backend ("tcp") for this rank, connected to every other rank of the group.
Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& context);

// The registry's entry (backends/registry.h): CPU buffers; no launcher of its own (it runs
// under kolorun and, through the store mpi_world sets up, under mpirun).
BackendEntry backend_entry_tcp();

// This rank's TcpChannel, connected and authenticated to every other rank. Several channels per
// group may exist at once if each uses its own context.store_prefix.
Result<std::unique_ptr<ops::Channel>> connect_tcp_channel(const BackendContext& context);

}  // namespace kolo

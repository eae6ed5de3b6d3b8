// TcpChannel: the tcp backend's ops::Channel over one connected, authenticated stream socket per
// peer: TCP, or AF_UNIX for a same-host peer (tcp_connect.h sets those up through the rendezvous
// store).
//
// Progress model. There is no I/O thread: isend/irecv start a non-blocking socket operation at
// once, and wait() drives the channel's io_context in the calling thread until the awaited
// request completes. A small message therefore costs no thread hand-off on either side, and
// every posted request on any link makes progress while any one request is waited for (so
// sendrecv and the pipelined ring never stall on the order they wait in). A request that is
// never waited for only progresses while another request of the same channel is waited for.
//
// Optional spin. With `spin` > 0, wait() polls the sockets without sleeping (non-blocking epoll)
// for up to `spin` since the channel last moved a byte before it blocks in the reactor. That
// saves a scheduler wake-up per message on hosts with idle cores; on the shared 2-core
// development VM it made every size slower (a spinning rank takes the CPU its peer, or the
// peer's softirq work, needs: 4 KiB went from ~40 us to 0.2-1 ms), so the default is 0 (block
// as soon as nothing is ready).
//
// Sockets. A link is any connected stream socket: TCP, or an AF_UNIX socket that tcp_connect
// substitutes for a same-host peer (no TCP/IP stack per segment: ~2.5x the loopback bandwidth).
//
// Data path. Each message travels as frames (wire.h); per ops::Channel's contract a receive
// takes the next bytes of the peer's stream, whatever frames carried them. Payload is read with
// scatter reads straight into the posted buffer (with the next frame header in the same read):
// no intermediate copy and no allocation sized by the wire. Bytes that arrive before their
// receive is posted stay in the kernel's socket buffer. Zero-byte sends and receives complete at
// once and put nothing on the wire.
//
// Integrity (TcpChannelOptions::integrity). Each direction of a link has its own 128-bit
// SipHash key derived from the connection's session key, and each frame a tag over its
// sequence number, header and payload (wire.h). Tagged frames are read whole into a per-link
// buffer of kTaggedFrameBytes and copied to the posted receives only after the tag matched: a
// receive never completes with bytes that were not verified. Cost: one SipHash pass on each
// side and a copy on the receiver (README, docs/security.md).
//
// Errors. A connection reset, EOF, or malformed or oversized frame breaks that link: every
// pending and later request on it fails with the same Status (PeerFailure or IoError) naming the
// peer rank and address. wait() fails with Timeout, and breaks the awaited link, when the whole
// channel moves no byte for timeout() (op_timeout); a slow but moving transfer never times out.
//
// Thread-safety: not thread-safe. One thread at a time calls every method (ops::Channel's
// contract); handlers run only inside wait(), in that thread.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/tcp/wire.h"
#include "common/mac.h"
#include "ops/channel.h"

namespace kolo::tcp {

// The channel's settings, which connect_channel() takes from the context and the job's knobs
// (ConnectOptions, tcp_knobs.h); no defaults here, the registry's rows hold them.
struct TcpChannelOptions {
  std::chrono::milliseconds op_timeout{0};          // > 0: BackendContext::op_timeout
  std::string op_timeout_knob = "KOLO_OP_TIMEOUT";  // named by the timeout's error
  uint64_t max_frame_bytes = 0;                     // > 0; must match on every rank
  // How long wait() polls without sleeping after the last byte moved (see "Spin, then block").
  std::chrono::microseconds spin{0};
  // KOLO_TCP_INTEGRITY: every frame carries a tag under the link's session key (wire.h); a
  // frame whose tag does not match breaks the link with IoError naming the peer and
  // "integrity". Must match on every rank.
  bool integrity = false;
};

// Any connected stream socket (a tcp::socket or local::stream_protocol::socket converts to it by
// move construction).
using StreamSocket = boost::asio::generic::stream_protocol::socket;

// One peer's connection. `address` ("host:port") names the peer in error messages.
struct PeerSocket {
  int rank = -1;
  std::string address;
  std::unique_ptr<StreamSocket> socket;
  AuthKey session{};  // the handshake's key of this connection (auth.h); keys the frame tags
};

class TcpChannel : public ops::Channel {
 public:
  // `peers` holds one connected socket per other rank (any order), each created on `io`, which
  // the channel takes over. Ownership of the sockets passes to the channel.
  TcpChannel(int rank, int size, std::unique_ptr<boost::asio::io_context> io,
             std::vector<PeerSocket> peers, TcpChannelOptions options);
  // Fails every pending request with Aborted and closes the connections.
  ~TcpChannel() override;

  TcpChannel(const TcpChannel&) = delete;
  TcpChannel& operator=(const TcpChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::chrono::milliseconds timeout() const override { return options_.op_timeout; }

  ops::Request isend(int peer, const void* data, size_t bytes) override;
  ops::Request irecv(int peer, void* data, size_t bytes) override;
  Status wait(const ops::Request& request) override;

 private:
  struct Link;

  Status check_peer(const char* op, int peer, const void* data, size_t bytes) const;
  void start_write(Link& link);
  void start_read(Link& link);
  void on_written(Link& link, size_t n);
  void on_read(Link& link, size_t n);
  void start_read_tagged(Link& link);
  void on_read_tagged(Link& link, size_t n);
  void deliver_staged(Link& link);
  void on_read_error(Link& link, const boost::system::error_code& ec);
  // close: whether the socket closes now (see the definition).
  void fail(Link& link, const Status& status, bool close);
  uint64_t frame_bound() const;  // the largest frame payload this channel sends or accepts
  Link* link_of(const ops::Completion* completion);

  // Constant after construction.
  const int rank_;
  const int size_;
  const TcpChannelOptions options_;
  // Declared before links_ so that the sockets are destroyed first.
  std::unique_ptr<boost::asio::io_context> io_;
  std::vector<std::unique_ptr<Link>> links_;  // indexed by peer rank; null for rank_
  uint64_t progress_ = 0;                     // bytes moved on any link, for the idle timeout
};

}  // namespace kolo::tcp

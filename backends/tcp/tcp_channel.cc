#include "backends/tcp/tcp_channel.h"

#include <algorithm>
#include <array>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <deque>
#include <utility>

namespace kolo::tcp {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// One message in flight on a link. For a send, `offset` is where the current frame starts in the
// message and `in_frame` counts the header and payload bytes of that frame written so far. For a
// receive, `offset` counts the bytes received (frames are tracked per link, see Link).
struct Transfer {
  uint8_t* data = nullptr;  // const for sends; never written through then
  uint64_t size = 0;
  uint64_t offset = 0;
  uint64_t frame_len = 0;
  uint64_t in_frame = 0;
  bool frame_started = false;
  std::shared_ptr<ops::Completion> completion;
};

}  // namespace

struct TcpChannel::Link {
  int peer = -1;
  std::string address;
  std::unique_ptr<StreamSocket> socket;
  Status failure;  // non-OK once the link broke; then it stays broken
  // The fronts are in flight; std::deque keeps references to them valid while others queue.
  std::deque<Transfer> sends;
  std::deque<Transfer> recvs;
  bool writing = false;
  bool reading = false;
  FrameHeader tx_header{};
  // Receive side: frames are parsed per link, not per receive (the stream may split or join
  // messages differently from how they were sent; see wire.h).
  FrameHeader rx_header{};
  uint64_t rx_header_done = 0;  // bytes of rx_header read so far (< 16 unless in a frame)
  uint64_t rx_frame_left = 0;   // payload bytes of the current frame not yet read
  bool rx_in_frame = false;     // rx_header complete and valid
  // Integrity (only with TcpChannelOptions::integrity): per-direction keys and frame counters,
  // and the buffer a tagged frame is read into: payload then tag. Bytes [stage_pos,
  // stage_ready) are verified and not yet handed to a receive; stage_filled counts the bytes
  // of the frame being read (rx_in_frame) while it is not verified yet.
  SipKey tx_key{}, rx_key{};
  uint64_t tx_seq = 0, rx_seq = 0;
  std::array<uint8_t, kFrameTagBytes> tx_tag{};
  std::vector<uint8_t> stage;
  uint64_t stage_filled = 0, stage_pos = 0, stage_ready = 0;

  std::string name() const { return "rank " + std::to_string(peer) + " (" + address + ")"; }
};

TcpChannel::TcpChannel(int rank, int size, std::unique_ptr<asio::io_context> io,
                       std::vector<PeerSocket> peers, TcpChannelOptions options)
    : rank_(rank), size_(size), options_(options), io_(std::move(io)) {
  links_.resize(size);
  for (PeerSocket& p : peers) {
    auto link = std::make_unique<Link>();
    link->peer = p.rank;
    link->address = std::move(p.address);
    link->socket = std::move(p.socket);
    if (options_.integrity) {
      link->tx_key = frame_key(p.session, rank_, p.rank);
      link->rx_key = frame_key(p.session, p.rank, rank_);
      link->stage.resize(kTaggedFrameBytes + kFrameTagBytes);
    }
    links_.at(p.rank) = std::move(link);
  }
}

TcpChannel::~TcpChannel() {
  for (auto& link : links_)
    if (link)
      fail(*link, Status::Aborted("the tcp channel to " + link->name() + " was closed"),
           /*close=*/true);
}

Status TcpChannel::check_peer(const char* op, int peer, const void* data, size_t bytes) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    return Status::InvalidArgument(std::string(op) + ": peer must be in [0, " +
                                   std::to_string(size_) + ") and differ from this rank " +
                                   std::to_string(rank_) + ", got " + std::to_string(peer));
  if (data == nullptr && bytes > 0)
    return Status::InvalidArgument(std::string(op) + ": data is null but bytes is " +
                                   std::to_string(bytes));
  if (!links_[peer])
    return Status::Internal(std::string(op) + ": no connection to rank " + std::to_string(peer));
  return Status::Ok();
}

ops::Request TcpChannel::isend(int peer, const void* data, size_t bytes) {
  if (Status s = check_peer("isend", peer, data, bytes); !s.ok()) return ops::Request::failed(s);
  Link& link = *links_[peer];
  if (!link.failure.ok()) return ops::Request::failed(link.failure);
  if (bytes == 0) return ops::Request();  // nothing goes on the wire
  auto completion = std::make_shared<ops::Completion>();
  Transfer t;
  t.data = static_cast<uint8_t*>(const_cast<void*>(data));
  t.size = bytes;
  t.completion = completion;
  link.sends.push_back(std::move(t));
  start_write(link);
  return ops::Request(std::move(completion));
}

ops::Request TcpChannel::irecv(int peer, void* data, size_t bytes) {
  if (Status s = check_peer("irecv", peer, data, bytes); !s.ok()) return ops::Request::failed(s);
  Link& link = *links_[peer];
  if (!link.failure.ok()) return ops::Request::failed(link.failure);
  if (bytes == 0) return ops::Request();  // takes nothing from the stream
  auto completion = std::make_shared<ops::Completion>();
  Transfer t;
  t.data = static_cast<uint8_t*>(data);
  t.size = bytes;
  t.completion = completion;
  link.recvs.push_back(std::move(t));
  start_read(link);
  return ops::Request(std::move(completion));
}

// Writes the rest of the current frame of the front send: header and payload in one gather
// write. asio attempts the write at once (speculatively), so a small message leaves in isend.
void TcpChannel::start_write(Link& link) {
  if (link.writing || link.sends.empty() || !link.failure.ok()) return;
  Transfer& t = link.sends.front();
  if (!t.frame_started) {
    t.frame_len = frame_length(t.size, t.offset, frame_bound());
    t.in_frame = 0;
    t.frame_started = true;
    link.tx_header = encode_frame_header(t.frame_len, options_.integrity ? kFrameTagged : 0);
    if (options_.integrity)
      link.tx_tag =
          frame_tag(link.tx_key, link.tx_seq++, link.tx_header, t.data + t.offset, t.frame_len);
  }
  std::array<asio::const_buffer, 3> buffers;
  const uint64_t header_done = std::min<uint64_t>(t.in_frame, kFrameHeaderBytes);
  const uint64_t payload_done = std::min(t.in_frame - header_done, t.frame_len);
  const uint64_t tag_done = t.in_frame - header_done - payload_done;
  buffers[0] = asio::buffer(link.tx_header.data() + header_done, kFrameHeaderBytes - header_done);
  buffers[1] = asio::buffer(t.data + t.offset + payload_done, t.frame_len - payload_done);
  buffers[2] = asio::buffer(link.tx_tag.data() + tag_done,
                            options_.integrity ? kFrameTagBytes - tag_done : 0);
  link.writing = true;
  link.socket->async_write_some(buffers, [this, &link](const error_code& ec, size_t n) {
    link.writing = false;
    if (!link.failure.ok()) return;  // broken meanwhile; the transfer was already failed
    if (ec) {
      fail(link,
           Status::PeerFailure("tcp: sending to " + link.name() + " failed: " + ec.message() +
                               " (the peer process likely died)"),
           /*close=*/true);
      return;
    }
    on_written(link, n);
  });
}

void TcpChannel::on_written(Link& link, size_t n) {
  progress_ += n;
  Transfer& t = link.sends.front();
  t.in_frame += n;
  if (t.in_frame == kFrameHeaderBytes + t.frame_len + (options_.integrity ? kFrameTagBytes : 0)) {
    t.offset += t.frame_len;
    t.frame_started = false;
    if (t.offset == t.size) {
      auto completion = std::move(t.completion);
      link.sends.pop_front();
      completion->complete(Status::Ok());
    }
  }
  start_write(link);
}

// Reads for the front receive with one scatter read. Outside a frame it reads only the rest of
// the next header (the payload length is unknown until the header is checked). Inside a frame
// it reads payload straight into the caller's buffer, and when that part reaches the frame's end
// also the next frame's header, so that in steady state one read per message suffices. Never
// more: a read never consumes payload bytes that no posted receive owns.
void TcpChannel::start_read(Link& link) {
  if (link.reading || link.recvs.empty() || !link.failure.ok()) return;
  if (options_.integrity) return start_read_tagged(link);
  Transfer& t = link.recvs.front();
  std::array<asio::mutable_buffer, 2> buffers;
  size_t count = 0;
  if (link.rx_in_frame) {
    const uint64_t part = std::min(t.size - t.offset, link.rx_frame_left);
    buffers[count++] = asio::buffer(t.data + t.offset, part);
    if (part == link.rx_frame_left) buffers[count++] = asio::buffer(link.rx_header);
  } else {
    buffers[count++] = asio::buffer(link.rx_header.data() + link.rx_header_done,
                                    kFrameHeaderBytes - link.rx_header_done);
  }
  link.reading = true;
  auto handler = [this, &link](const error_code& ec, size_t n) {
    link.reading = false;
    if (!link.failure.ok()) return;
    if (ec) return on_read_error(link, ec);
    on_read(link, n);
  };
  if (count == 1)
    link.socket->async_read_some(buffers[0], handler);
  else
    link.socket->async_read_some(buffers, handler);
}

void TcpChannel::on_read(Link& link, size_t n) {
  progress_ += n;
  Transfer& t = link.recvs.front();
  if (link.rx_in_frame) {
    const uint64_t payload = std::min<uint64_t>(n, std::min(t.size - t.offset, link.rx_frame_left));
    t.offset += payload;
    link.rx_frame_left -= payload;
    n -= payload;
    if (link.rx_frame_left == 0) {
      link.rx_in_frame = false;
      link.rx_header_done = 0;
    }
  }
  // Whatever is left of n belongs to the next header.
  link.rx_header_done += n;
  if (!link.rx_in_frame && link.rx_header_done == kFrameHeaderBytes) {
    // The header is complete: check it before trusting its length.
    Result<uint64_t> length = decode_frame_header(link.rx_header, options_.max_frame_bytes);
    if (!length.ok()) {
      fail(link, length.status().with_context("tcp: bad frame from " + link.name()),
           /*close=*/false);
      return;
    }
    link.rx_in_frame = true;
    link.rx_frame_left = *length;
  }
  if (t.offset == t.size) {
    auto completion = std::move(t.completion);
    link.recvs.pop_front();
    completion->complete(Status::Ok());
  }
  start_read(link);
}

void TcpChannel::on_read_error(Link& link, const error_code& ec) {
  const Transfer& t = link.recvs.front();
  std::string what = ec == asio::error::eof ? "the connection was closed by the peer"
                                            : "receive failed: " + ec.message();
  fail(link,
       Status::PeerFailure("tcp: " + what + " while receiving a " + std::to_string(t.size) +
                           "-byte message from " + link.name() + " after " +
                           std::to_string(t.offset) +
                           " of its bytes (the peer process likely died)"),
       /*close=*/true);
}

uint64_t TcpChannel::frame_bound() const {
  return options_.integrity ? std::min(options_.max_frame_bytes, kTaggedFrameBytes)
                            : options_.max_frame_bytes;
}

// Tagged frames: first hand out verified bytes already staged; then read the next header, or
// the rest of the current frame's payload and tag, into the link's own buffers.
void TcpChannel::start_read_tagged(Link& link) {
  deliver_staged(link);
  if (link.recvs.empty() || !link.failure.ok()) return;
  asio::mutable_buffer buffer;
  if (link.rx_in_frame)
    buffer = asio::buffer(link.stage.data() + link.stage_filled,
                          link.rx_frame_left + kFrameTagBytes - link.stage_filled);
  else
    buffer = asio::buffer(link.rx_header.data() + link.rx_header_done,
                          kFrameHeaderBytes - link.rx_header_done);
  link.reading = true;
  link.socket->async_read_some(buffer, [this, &link](const error_code& ec, size_t n) {
    link.reading = false;
    if (!link.failure.ok()) return;
    if (ec) return on_read_error(link, ec);
    on_read_tagged(link, n);
  });
}

void TcpChannel::on_read_tagged(Link& link, size_t n) {
  progress_ += n;
  if (!link.rx_in_frame) {
    link.rx_header_done += n;
    if (link.rx_header_done == kFrameHeaderBytes) {
      Result<uint64_t> length = decode_frame_header(link.rx_header, frame_bound(), kFrameTagged);
      if (!length.ok()) {
        fail(link, length.status().with_context("tcp: bad frame from " + link.name()),
             /*close=*/false);
        return;
      }
      link.rx_in_frame = true;
      link.rx_frame_left = *length;  // the frame's payload length while it is being read
      link.stage_filled = 0;
    }
    return start_read(link);
  }
  link.stage_filled += n;
  if (link.stage_filled < link.rx_frame_left + kFrameTagBytes) return start_read(link);
  const uint64_t length = link.rx_frame_left;
  const FrameTag want =
      frame_tag(link.rx_key, link.rx_seq, link.rx_header, link.stage.data(), length);
  uint8_t diff = 0;
  for (size_t i = 0; i < kFrameTagBytes; ++i)
    diff |= static_cast<uint8_t>(want[i] ^ link.stage[length + i]);
  if (diff != 0) {
    fail(link,
         Status::IoError("tcp: integrity check failed on frame " + std::to_string(link.rx_seq) +
                         " (" + std::to_string(length) + " bytes) from " + link.name() +
                         ": the frame was altered, replayed, reordered or dropped on the "
                         "way (KOLO_TCP_INTEGRITY); its bytes were not used"),
         /*close=*/false);
    return;
  }
  ++link.rx_seq;
  link.rx_in_frame = false;
  link.rx_header_done = 0;
  link.rx_frame_left = 0;
  link.stage_pos = 0;
  link.stage_ready = length;
  start_read(link);
}

// Copies verified bytes to the front receives, completing each that is full.
void TcpChannel::deliver_staged(Link& link) {
  while (!link.recvs.empty() && link.stage_pos < link.stage_ready) {
    Transfer& t = link.recvs.front();
    const uint64_t part = std::min(t.size - t.offset, link.stage_ready - link.stage_pos);
    std::memcpy(t.data + t.offset, link.stage.data() + link.stage_pos, part);
    t.offset += part;
    link.stage_pos += part;
    if (t.offset == t.size) {
      auto completion = std::move(t.completion);
      link.recvs.pop_front();
      completion->complete(Status::Ok());
    }
  }
}

// Breaks the link for good: cancels or closes the socket (either way no later read touches a
// caller's buffer) and fails every queued transfer with `status`. Handlers still queued in io_
// see the failure and return without touching the transfers.
// A failure this rank detected itself (a timeout, a bad or altered frame) keeps the connection
// open: closing it would fail the peer at once, and the peer could then record its "connection
// closed by this rank" on the failure board before this rank records what it saw
// (coordinator/failure_board.h). It closes with the channel (the process's exit, shutdown()).
void TcpChannel::fail(Link& link, const Status& status, bool close) {
  error_code ignored;
  if (!link.failure.ok()) {
    if (close) link.socket->close(ignored);  // the channel's end: a link kept open closes now
    return;
  }
  link.failure = status;
  if (close) {
    link.socket->shutdown(StreamSocket::shutdown_both, ignored);
    link.socket->close(ignored);
  } else {
    link.socket->cancel(ignored);
  }
  auto sends = std::move(link.sends);
  auto recvs = std::move(link.recvs);
  link.sends.clear();
  link.recvs.clear();
  for (Transfer& t : sends) t.completion->complete(status);
  for (Transfer& t : recvs) t.completion->complete(status);
}

TcpChannel::Link* TcpChannel::link_of(const ops::Completion* completion) {
  for (auto& link : links_) {
    if (!link) continue;
    for (const Transfer& t : link->sends)
      if (t.completion.get() == completion) return link.get();
    for (const Transfer& t : link->recvs)
      if (t.completion.get() == completion) return link.get();
  }
  return nullptr;
}

Status TcpChannel::wait(const ops::Request& request) {
  const std::shared_ptr<ops::Completion>& completion = request.completion();
  if (!completion) return Status::Ok();
  using Clock = std::chrono::steady_clock;
  uint64_t seen = progress_;
  Clock::time_point idle_since = Clock::now();
  while (!completion->done()) {
    // Run what is ready without blocking; block in the reactor only when nothing is ready and
    // nothing has moved for options_.spin.
    if (io_->stopped()) io_->restart();
    const size_t ran = io_->poll();
    if (completion->done()) break;
    Clock::time_point now = Clock::now();
    if (progress_ != seen) {
      seen = progress_;
      idle_since = now;
    }
    if (ran == 0 && now - idle_since >= options_.spin) {
      if (io_->stopped()) io_->restart();
      io_->run_one_for(std::chrono::milliseconds(100));
      now = Clock::now();
      if (progress_ != seen) {
        seen = progress_;
        idle_since = now;
      }
    }
    if (!completion->done() && progress_ == seen && now - idle_since >= options_.op_timeout) {
      Link* link = link_of(completion.get());
      const std::string where = link ? link->name() : std::string("a peer");
      Status timeout = Status::Timeout(
          "tcp: a transfer with " + where + " made no progress for " +
          std::to_string(options_.op_timeout.count()) + " ms (" + options_.op_timeout_knob +
          "); the peer is stuck or the ranks' operations do not match");
      if (link) fail(*link, timeout, /*close=*/false);
      completion->complete(timeout);
    }
  }
  // Done: returns the stored status without waiting.
  return completion->wait_until(Clock::now(), "a tcp transfer");
}

}  // namespace kolo::tcp

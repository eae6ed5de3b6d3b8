#include "ops/thread_channel.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include "common/enforce.h"
#include "common/thread_annotations.h"

namespace kolo::ops {

namespace {

// One direction of one link: the bytes `from` sent that `to` has not received yet, or the
// receives `to` posted that are still waiting for bytes. Never both at once: a send first
// fills waiting receives and a receive first drains buffered bytes.
struct Stream {
  struct PendingRecv {
    char* data;
    size_t bytes;
    size_t filled;
    std::shared_ptr<Completion> completion;
  };

  Mutex mu;
  std::deque<std::vector<char>> chunks KOLO_GUARDED_BY(mu);
  size_t front_offset KOLO_GUARDED_BY(mu) = 0;  // consumed bytes of chunks.front()
  std::deque<PendingRecv> recvs KOLO_GUARDED_BY(mu);
  bool broken KOLO_GUARDED_BY(mu) = false;
  std::string broken_reason KOLO_GUARDED_BY(mu);

  // Moves up to `bytes` buffered bytes into `out`; returns how many.
  size_t take(char* out, size_t bytes) KOLO_REQUIRES(mu) {
    size_t done = 0;
    while (done < bytes && !chunks.empty()) {
      std::vector<char>& c = chunks.front();
      const size_t n = std::min(bytes - done, c.size() - front_offset);
      std::memcpy(out + done, c.data() + front_offset, n);
      done += n;
      front_offset += n;
      if (front_offset == c.size()) {
        chunks.pop_front();
        front_offset = 0;
      }
    }
    return done;
  }
};

}  // namespace

struct ThreadChannelGroup {
  explicit ThreadChannelGroup(int n) : size(n), streams(static_cast<size_t>(n) * n) {
    for (auto& s : streams) s = std::make_unique<Stream>();
  }
  Stream& stream(int from, int to) { return *streams[static_cast<size_t>(from) * size + to]; }

  const int size;
  std::vector<std::unique_ptr<Stream>> streams;
};

ThreadChannel::ThreadChannel(std::shared_ptr<ThreadChannelGroup> group, int rank,
                             std::chrono::milliseconds timeout)
    : group_(std::move(group)), rank_(rank), timeout_(timeout) {}

ThreadChannel::~ThreadChannel() { close(); }

int ThreadChannel::size() const { return group_->size; }

Status ThreadChannel::check_peer(const char* what, int peer) const {
  if (peer >= 0 && peer < group_->size && peer != rank_) return Status::Ok();
  return Status::InvalidArgument(std::string("thread channel ") + what + ": peer must be in [0, " +
                                 std::to_string(group_->size) + ") and not this rank (" +
                                 std::to_string(rank_) + "), got " + std::to_string(peer));
}

Request ThreadChannel::isend(int peer, const void* data, size_t bytes) {
  if (Status s = check_peer("isend", peer); !s.ok()) return Request::failed(s);
  Stream& st = group_->stream(rank_, peer);
  MutexLock lock(st.mu);
  if (st.broken) return Request::failed(Status::PeerFailure(st.broken_reason));
  const char* src = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0 && !st.recvs.empty()) {
    Stream::PendingRecv& r = st.recvs.front();
    const size_t n = std::min(left, r.bytes - r.filled);
    std::memcpy(r.data + r.filled, src, n);
    r.filled += n;
    src += n;
    left -= n;
    if (r.filled == r.bytes) {
      r.completion->complete(Status::Ok());
      st.recvs.pop_front();
    }
  }
  if (left > 0) st.chunks.emplace_back(src, src + left);
  return Request();
}

Request ThreadChannel::irecv(int peer, void* data, size_t bytes) {
  if (Status s = check_peer("irecv", peer); !s.ok()) return Request::failed(s);
  Stream& st = group_->stream(peer, rank_);
  MutexLock lock(st.mu);
  char* out = static_cast<char*>(data);
  // Earlier receives still waiting means nothing is buffered: this one queues behind them.
  const size_t got = st.recvs.empty() ? st.take(out, bytes) : 0;
  if (got == bytes) return Request();
  if (st.broken) return Request::failed(Status::PeerFailure(st.broken_reason));
  auto completion = std::make_shared<Completion>();
  st.recvs.push_back({out, bytes, got, completion});
  return Request(std::move(completion));
}

Status ThreadChannel::wait(const Request& request) {
  Status s = Channel::wait(request);
  if (s.code() == StatusCode::kTimeout) close();
  return s;
}

void ThreadChannel::close() {
  for (int peer = 0; peer < group_->size; ++peer) {
    if (peer == rank_) continue;
    for (auto [from, to] : {std::pair{rank_, peer}, std::pair{peer, rank_}}) {
      Stream& st = group_->stream(from, to);
      MutexLock lock(st.mu);
      if (st.broken) continue;
      st.broken = true;
      st.broken_reason = "thread channel: the link between rank " + std::to_string(rank_) +
                         " and rank " + std::to_string(peer) + " was closed by rank " +
                         std::to_string(rank_) + " (receive from rank " + std::to_string(from) +
                         " at rank " + std::to_string(to) + ")";
      for (auto& r : st.recvs) r.completion->complete(Status::PeerFailure(st.broken_reason));
      st.recvs.clear();
    }
  }
}

std::vector<std::unique_ptr<Channel>> make_thread_channels(int size,
                                                           std::chrono::milliseconds timeout) {
  KOLO_ENFORCE(size >= 1, "make_thread_channels: size must be >= 1, got " << size);
  auto group = std::make_shared<ThreadChannelGroup>(size);
  std::vector<std::unique_ptr<Channel>> channels;
  channels.reserve(size);
  for (int r = 0; r < size; ++r)
    channels.push_back(std::make_unique<ThreadChannel>(group, r, timeout));
  return channels;
}

}  // namespace kolo::ops

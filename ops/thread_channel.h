// ThreadChannel: Channels between the threads of one process, for unit tests of the ops/
// algorithms and of anything built on a Channel (e.g. ChannelBackend).
//
// Each ordered pair of ranks (a -> b) is an in-memory byte stream. isend copies the bytes at
// once (straight into receives already posted by the peer, the rest into the stream's buffer),
// so a send request is complete when isend returns and never blocks. irecv takes buffered bytes
// at once and otherwise waits for the peer's sends.
//
// Failures: close() (also run by the destructor) breaks every link of this rank: pending and
// later receives on them, on both sides, fail with PeerFailure naming both ranks; bytes the
// peer had already sent stay receivable. A wait that runs past timeout() fails with Timeout
// and closes the channel, because a stream with an abandoned receive can no longer be trusted
// (and the abandoned receive must not write into a buffer its owner has since freed).
//
// Thread-safety: each channel is driven by one thread; different channels of the same group
// may be used from different threads concurrently (that is the point).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "ops/channel.h"

namespace kolo::ops {

struct ThreadChannelGroup;  // the shared streams; defined in thread_channel.cc

class ThreadChannel : public Channel {
 public:
  ThreadChannel(std::shared_ptr<ThreadChannelGroup> group, int rank,
                std::chrono::milliseconds timeout);
  ~ThreadChannel() override;
  ThreadChannel(const ThreadChannel&) = delete;
  ThreadChannel& operator=(const ThreadChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override;
  Request isend(int peer, const void* data, size_t bytes) override;
  Request irecv(int peer, void* data, size_t bytes) override;
  std::chrono::milliseconds timeout() const override { return timeout_; }
  Status wait(const Request& request) override;

  // Breaks every link of this rank (see above). Idempotent.
  void close();

 private:
  Status check_peer(const char* what, int peer) const;

  const std::shared_ptr<ThreadChannelGroup> group_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
};

// `size` connected channels; element i is rank i. size must be >= 1.
std::vector<std::unique_ptr<Channel>> make_thread_channels(
    int size, std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace kolo::ops

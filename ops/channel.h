// Channel: one rank's point-to-point links to every other rank of a group. The collective
// algorithms in ops/ are written against this interface only, so they run unchanged over TCP
// (backends/tcp), shared memory, or threads in one process (ops/thread_channel.h, for tests).
//
// Semantics. The bytes that rank A sends to rank B form one ordered stream. A receive from a
// peer takes exactly the next `bytes` bytes of that stream; sends and receives on the same
// (peer, direction) complete in the order they were posted. There are no tags: the algorithms
// keep both sides in step, as the proofs in their comments show.
//
// Ownership. A posted buffer is borrowed until its Request completes: the caller must keep it
// alive and (for sends) unchanged until then. Destroying a Request does not cancel the transfer.
//
// Errors. When a peer dies, its link breaks, a wait exceeds the channel's timeout, or the
// channel is closed, the affected requests complete with a non-OK Status that names the peer.
// A failed channel stays failed: every later request on the broken link fails at once.
//
// Thread-safety. One thread drives a channel at a time (the backend's caller); implementations
// may complete requests from their own I/O threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>

#include "common/thread_annotations.h"
#include "kolo/status.h"

namespace kolo::ops {

// Completion state shared between a Request and the transport that fulfils it.
class Completion {
 public:
  // Marks the transfer finished. Only the first call has an effect.
  void complete(Status status);
  // Blocks until complete() or the deadline; returns the transfer's status, or Timeout naming
  // `what` when the deadline passes first.
  Status wait_until(std::chrono::steady_clock::time_point deadline, const char* what);
  bool done() const;

 private:
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool done_ KOLO_GUARDED_BY(mu_) = false;
  Status status_ KOLO_GUARDED_BY(mu_);
};

class Request {
 public:
  Request() = default;  // an already-completed, successful request
  explicit Request(std::shared_ptr<Completion> completion) : completion_(std::move(completion)) {}
  static Request failed(Status status);

  // True once the transfer finished (successfully or not).
  bool done() const { return !completion_ || completion_->done(); }
  const std::shared_ptr<Completion>& completion() const { return completion_; }

 private:
  std::shared_ptr<Completion> completion_;
};

class Channel {
 public:
  virtual ~Channel() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Posts a send of `bytes` bytes to `peer` (peer != rank()). Never blocks on the network.
  virtual Request isend(int peer, const void* data, size_t bytes) = 0;
  // Posts a receive of exactly `bytes` bytes from `peer` into `data`.
  virtual Request irecv(int peer, void* data, size_t bytes) = 0;

  // How long wait() lets one request take before failing with Timeout. A dead peer is
  // normally detected much sooner, through its broken connection.
  virtual std::chrono::milliseconds timeout() const = 0;

  // Waits for one request and returns its status; fails with Timeout after timeout().
  // Virtual so that a transport may drive its event loop in the waiting thread instead of
  // handing off to an I/O thread (saves two thread wake-ups per small message).
  virtual Status wait(const Request& request);
  // Blocking conveniences.
  Status send(int peer, const void* data, size_t bytes) { return wait(isend(peer, data, bytes)); }
  Status recv(int peer, void* data, size_t bytes) { return wait(irecv(peer, data, bytes)); }
  // Sends to one peer and receives from another concurrently (both may be the same peer).
  Status sendrecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                  void* recv_data, size_t recv_bytes);
};

}  // namespace kolo::ops

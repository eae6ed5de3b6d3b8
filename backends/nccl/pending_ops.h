// PendingOps: the bookkeeping of the GPU operations that were queued on a stream and have not
// completed yet, and of how they fail when the communicator has to be aborted (a peer died, an
// operation exceeded KOLO_OP_TIMEOUT, NCCL reported an asynchronous error), in the manner of
// c10d's watchdog. It knows nothing of CUDA: an operation is polled through its `query`
// function (NcclBackend's queries cudaEventQuery), so the whole abort path is unit-tested
// without a GPU.
//
// Ops complete in the order they were added (they run on one stream). Every op's `done` runs
// exactly once: with OK when its query says so, or with the failure that ended the
// communicator, prefixed by the op's own description (e.g. "allreduce 'grad/w'").
//
// The abort order (NcclBackend::abort): close(why) first, so that no op can complete OK from
// then on (an aborted kernel exits, and its event fires, with its buffers half written); then
// the communicator is aborted; then fail_all() reports every op failed, once NCCL can no
// longer write their buffers. An op added between close() and fail_all() (another thread's
// abort is inside ncclCommAbort) waits in the set for fail_all(), for the same reason; one
// added after fail_all() fails at once.
//
// The watchdog sleeps in wait(): on a condition variable while nothing is pending (an idle
// backend costs no CPU), at most a poll interval while ops are pending.
//
// Thread-safety: every method may be called from any thread; `done` and `query` run in the
// calling thread outside the lock, so they may call back into PendingOps.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>

#include "common/thread_annotations.h"
#include "kolo/status.h"

namespace kolo::nccl {

class PendingOps {
 public:
  using Clock = std::chrono::steady_clock;
  // true: completed; false: still running; an error: the op failed on the device.
  using Query = std::function<Result<bool>()>;
  using Done = std::function<void(const Status&)>;

  // Queues an op described by `what` (names its tensors), started at `now`, and wakes wait().
  // After fail_all() it runs done(failure) at once instead, in the calling thread.
  void add(std::string what, Query query, Done done, Clock::time_point now = Clock::now());

  // Completes the finished ops at the head of the queue. Returns OK, or the reason the
  // communicator must be aborted: an op's query error, or Timeout when the oldest op has been
  // running longer than `timeout` ("... did not complete within 60s (KOLO_OP_TIMEOUT)"), or,
  // once closed, the closing reason (and it completes nothing: a closed set's ops only fail).
  // It does not fail the ops itself: the caller closes the set and aborts the communicator
  // first, then calls fail_all() (an op must not be reported failed while NCCL may still write
  // its buffers).
  Status poll(std::chrono::nanoseconds timeout, Clock::time_point now = Clock::now());

  // Closes the set with `why` (the first reason wins; an OK `why` reads as Aborted) and runs
  // no `done`: from now on no op completes OK and add() fails new ops at once. The pending ops
  // stay until fail_all().
  void close(const Status& why);

  // close(why), then fails every pending op with "<what>: <reason>" (same code), the reason
  // being the first one the set was closed with, and every op added later at once. Returns
  // how many ops it failed.
  size_t fail_all(const Status& why);

  // The watchdog's sleep: returns after at most `interval` while ops are pending; while none
  // are, blocks until add() or shutdown(). Returns false once shutdown() was called.
  bool wait(std::chrono::nanoseconds interval);
  // Ends every wait(), now and later (the backend's destructor, before it joins the watchdog).
  void shutdown();

  size_t size() const;
  // OK while open; the reason it was closed with after.
  Status failure() const;

 private:
  struct Op {
    std::string what;
    Query query;
    Done done;
    Clock::time_point started;
  };
  mutable Mutex mu_;
  void close_locked(const Status& why) KOLO_REQUIRES(mu_);

  std::condition_variable cv_;  // add() and shutdown() wake wait()
  std::deque<Op> ops_ KOLO_GUARDED_BY(mu_);
  Status failure_ KOLO_GUARDED_BY(mu_);
  bool failed_all_ KOLO_GUARDED_BY(mu_) = false;  // fail_all() ran: add() fails at once
  bool shut_down_ KOLO_GUARDED_BY(mu_) = false;
};

// "<what>: <why's message>" with why's code: how one pending op reports the communicator's end.
Status op_failure(const std::string& what, const Status& why);

}  // namespace kolo::nccl

// OpState: the shared state behind a kolo::Handle. The runtime completes it exactly once from
// the background thread (or at submission, for a rejected request); user threads wait on it.
// Thread-safe: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "kolo/handle.h"
#include "kolo/status.h"
#include "kolo/tensor.h"

namespace kolo::detail {

class OpState;

// What runs the cycles that complete an operation, for a thread that waits on it
// (Note [Waiter drives] in coordinator/runtime.cc). Thread-safe.
class CycleDriver {
 public:
  virtual ~CycleDriver() = default;
  // Runs cycles on the calling thread until `op` has settled, when no other thread runs them
  // now; returns at once otherwise (or once the runtime has stopped).
  virtual void drive(const OpState& op) = 0;
};

// While one is alive on a thread, an operation completed on that thread hands its callbacks to
// `later` instead of running them: a caller that drives cycles must not run users' callbacks,
// which Handle::then promises to Kolo's background thread. Scoped to its thread; an inner one
// shadows an outer one until it ends.
class DeferCallbacks {
 public:
  using Later = std::function<void(std::function<void()>)>;
  explicit DeferCallbacks(Later later);
  ~DeferCallbacks();
  DeferCallbacks(const DeferCallbacks&) = delete;
  DeferCallbacks& operator=(const DeferCallbacks&) = delete;

 private:
  friend class OpState;
  Later later_;
  DeferCallbacks* outer_;  // the one this shadows on this thread, if any
};

class OpState : public std::enable_shared_from_this<OpState> {
 public:
  explicit OpState(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Records the result and runs the callbacks (in the calling thread, outside the lock, or
  // later through the thread's DeferCallbacks). Only the first call has an effect; returns
  // whether it was the first.
  bool complete(Status status);
  // Without a timeout, a waiter runs the operation's cycles itself when it can (set_driver).
  // Timeout when a timeout is given and the operation has not completed by then.
  Status wait(std::optional<std::chrono::milliseconds> timeout);
  bool done() const;
  // complete() has been called: done, or its callbacks are running or deferred.
  bool settled() const { return settled_flag_.load(std::memory_order_acquire); }
  // The runtime a blocking call submitted the operation to, for wait(). Called once, before
  // the Handle leaves the submitting thread (so wait() reads it without the lock).
  void set_driver(std::shared_ptr<CycleDriver> driver);
  Status status() const;
  void then(Handle::Callback callback);

  // Outputs, set by the runtime before complete().
  void set_output(std::vector<int64_t> shape, void* data);
  void set_owned_output(HostTensor tensor);
  void set_received_splits(std::vector<int64_t> splits);
  std::vector<int64_t> output_shape() const;
  void* output_data() const;
  HostTensor take_output();
  std::vector<int64_t> received_splits() const;
  void set_last_joined_rank(int rank);
  int last_joined_rank() const;
  // A device backend's completion event (a cudaEvent_t, kept alive by the shared pointer);
  // set before the operation can complete. Null for host operations.
  void set_completion_event(std::shared_ptr<void> event);
  void* completion_event() const;

 private:
  const std::string name_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool done_ KOLO_GUARDED_BY(mu_) = false;
  std::atomic<bool> done_flag_{false};            // done_, for wait()'s lock-free spin
  std::atomic<bool> settled_flag_{false};         // complete() was called
  std::shared_ptr<CycleDriver> driver_;           // set_driver(), before any wait()
  bool completing_ KOLO_GUARDED_BY(mu_) = false;  // callbacks running
  Status status_ KOLO_GUARDED_BY(mu_);
  std::vector<Handle::Callback> callbacks_ KOLO_GUARDED_BY(mu_);
  std::vector<int64_t> output_shape_ KOLO_GUARDED_BY(mu_);
  void* output_data_ KOLO_GUARDED_BY(mu_) = nullptr;
  HostTensor owned_ KOLO_GUARDED_BY(mu_);
  std::vector<int64_t> received_splits_ KOLO_GUARDED_BY(mu_);
  int last_joined_rank_ KOLO_GUARDED_BY(mu_) = -1;
  std::shared_ptr<void> completion_event_ KOLO_GUARDED_BY(mu_);

  // Runs the callbacks with the operation's status, then wakes the waiters.
  void finish(std::vector<Handle::Callback>& callbacks, const Status& status);
};

}  // namespace kolo::detail

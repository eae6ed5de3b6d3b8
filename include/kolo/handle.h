// Handle: the caller's side of one asynchronous Kolo operation.
//
// Every *_async call returns a Handle at once. The operation completes exactly once, with a
// Status: OK, or an error naming the tensor and what went wrong (a mismatch between ranks, a
// dead peer, shutdown, ...). A Handle is a cheap shared reference: copies observe the same
// operation, and the operation's state lives until the last copy (and Kolo) let go of it.
//
// Thread-safety: every method may be called from any thread, concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "kolo/tensor.h"

namespace kolo::detail {
class OpState;  // defined by the runtime (coordinator/op_state.h); not exported
}

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

class Handle {
 public:
  using Callback = std::function<void(const Status&)>;

  // An empty handle: valid() is false and wait() returns PreconditionFailed.
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // The operation's name (its identity across ranks).
  const std::string& name() const;

  // Blocks until the operation completes and returns its Status. With a timeout, returns
  // Timeout if it has not completed by then (the operation itself continues).
  Status wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;
  // True once the operation completed (successfully or not). Never blocks.
  bool poll() const;
  // The final Status once poll() is true; PreconditionFailed("... still pending") before.
  Status status() const;
  // Runs callback(status) once the operation completes: on Kolo's background thread, or at
  // once in the calling thread when it has already completed. Callbacks registered before
  // completion have run by the time wait() returns. The callback must not block
  // on other Kolo operations (it would stall the background thread). Operations on CUDA
  // tensors that a device backend (nccl) runs complete on that backend's watchdog thread
  // instead, which must not be blocked either.
  void then(Callback callback) const;

  // Results of allgather, alltoall and reducescatter (valid after an OK completion).
  // The output's shape, e.g. [sum of first dims, ...] for allgather.
  std::vector<int64_t> output_shape() const;
  // The output's memory: the caller's allocator's buffer, or Kolo's own HostTensor.
  void* output_data() const;
  // Moves Kolo's own output buffer out of the handle (empty when an allocator was used).
  HostTensor take_output() const;
  // alltoall only: rows received from each rank (the peers' splits for this rank).
  std::vector<int64_t> received_splits() const;
  // join only: the rank that joined last (the same on every rank); -1 before an OK completion.
  int last_joined_rank() const;

  // For an operation on CUDA tensors that a device backend (KOLO_GPU_OPERATIONS=nccl) runs:
  // the cudaEvent_t (as void*) recorded on Kolo's stream after the operation. A caller may make
  // its own stream wait on it (cudaStreamWaitEvent) and go on queueing work without a host
  // synchronisation, as with c10d's Work::synchronize(); the results are then valid for that
  // stream's later work even before the handle completes. It is set once the operation has
  // been queued on the device (it may be null just after submission) and stays valid while
  // this handle or a copy of it lives. Null for host operations and for CUDA tensors staged
  // through host memory (those are complete, copies included, when the handle is).
  void* completion_event() const;

 private:
  std::shared_ptr<detail::OpState> state_;
};

}  // namespace kolo
#pragma GCC visibility pop

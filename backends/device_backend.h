// DeviceBackend: a Backend whose collectives run on a GPU stream (nccl). The executor hands it
// the caller's device buffers and does not wait for them: the host thread only queues work.
//
// Protocol, one operation at a time (the coordinator's background thread):
//   wait_ready(...) for each tensor  -> the backend's stream waits for the tensor's producer
//   allreduce(...)/allgather(...)... -> queued on that stream, return at once
//   fence(what, done)                -> records the completion event; done(status) runs later
// Collectives called outside such a sequence (no wait_ready since the last fence) keep
// Backend's blocking contract: they return once the device finished them (polled, bounded by
// the op timeout), so benchmarks and tests may read the buffers right after.
//
// Failures: `done` gets the error of its own operation, naming `what`. When the communicator
// fails (an asynchronous NCCL error, an operation past KOLO_OP_TIMEOUT, or abort() because the
// control plane saw a peer die) the backend aborts it, fails every pending operation, and every
// later call returns the same error.
//
// Thread-safety: the collectives, wait_ready and fence from one thread at a time; abort() from
// any thread. `done` runs on the backend's watchdog thread (or at once in fence's caller when
// the communicator has already failed): it must not block.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backends/backend.h"

namespace kolo {

class DeviceBackend : public Backend {
 public:
  using Done = std::function<void(const Status&)>;

  // Orders the next collectives after `ready_event` (a cudaEvent_t recorded by the producer;
  // null: the data is ready, or was written on the legacy default stream, which the backend's
  // stream also waits for) and checks that `data` is device memory on the communicator's
  // device. `what` names the operation and tensor for errors. InvalidArgument naming it for a
  // tensor on another device, a host pointer labelled as CUDA, or an event that is not one.
  virtual Status wait_ready(Device device, const void* data, void* ready_event,
                            const std::string& what) = 0;

  // Ends the operation begun by wait_ready: records its completion event on the stream and
  // returns it (a cudaEvent_t that stays valid while the returned pointer is held), after which
  // `done` runs exactly once. Null when the event could not be recorded; `done` has then
  // already run with the error.
  virtual std::shared_ptr<void> fence(const std::string& what, Done done) = 0;

  // A peer failed (the control plane or the store says so): abort the communicator and fail
  // every pending operation with `why` (which names the peer). Idempotent.
  virtual void abort(const Status& why) = 0;
};

}  // namespace kolo

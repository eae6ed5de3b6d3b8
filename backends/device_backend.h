// DeviceBackend: a Backend whose collectives run on a GPU stream (nccl). The executor hands it
// the caller's device buffers and does not wait for them: the host thread only queues work.
//
// Protocol, one operation at a time (the coordinator's background thread):
//   wait_ready(...) for each tensor  -> the backend's stream waits for the tensor's producer
//   allreduce(...)/allgather(...)... -> recorded (nccl: into one NCCL group), return at once
//   fence(what, publish, done)       -> launches them, records the completion event, hands it
//                                       to publish; done(status) runs later; an error when
//                                       the operation could not be launched
// An operation's collectives are one unit on the device: nccl launches them together at
// fence(), so a call's output may not feed a later call of the same operation. Collectives
// called outside such a sequence (no wait_ready since the last fence) keep Backend's blocking
// contract: they run after the work queued on the legacy default stream and return once the
// device finished them (polled, bounded by the op timeout), so benchmarks and tests may read
// the buffers right after.
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
#include "kolo/status.h"

namespace kolo {

class DeviceBackend : public Backend {
 public:
  using Done = std::function<void(const Status&)>;
  // Receives the completion event (a cudaEvent_t that stays valid while the pointer is held).
  using Publish = std::function<void(std::shared_ptr<void> event)>;

  // Orders the next collectives after `ready_event` (a cudaEvent_t recorded by the producer,
  // which must stay valid until this returns; the caller keeps it until the handle completes
  // to be safe) and checks that `data` is device memory on the communicator's device. A null
  // event: the data is ready, or was written on the legacy default stream; the backend's own
  // stream does not wait for that stream by itself (it is non-blocking, so that communication
  // overlaps compute), so it waits for an event recorded there now. `what` names the operation
  // and tensor for errors. InvalidArgument naming it for a tensor on another device, a host
  // pointer labelled as CUDA, or an event that is not one.
  virtual Status wait_ready(Device device, const void* data, void* ready_event,
                            const std::string& what) = 0;

  // Device memory of at least `bytes` on the communicator's device, owned by the backend and
  // valid until the next stand_in() call: the stand-in output of a tensor whose allocator
  // failed, so that this rank still takes part and its peers are not stranded. Its contents
  // are garbage. An error (naming `what`) when the device cannot allocate it.
  virtual Result<void*> stand_in(size_t bytes, const std::string& what) = 0;

  // Ends the operation begun by wait_ready: launches its collectives, records its completion
  // event on the stream, calls publish(event) (on the calling thread, before `done` can run),
  // after which `done` runs exactly once, and returns OK. When the operation cannot be
  // launched in full (NCCL refused its group, a kernel did not launch, the event cannot be
  // recorded) or the communicator was aborted before, publish is not called, the communicator
  // is aborted (the peers' side of the operation would wait for this rank), `done` has run
  // with the error naming `what`, and fence returns that error: the caller must stop as after
  // a failed collective, so that the control plane tells the peers.
  virtual Status fence(const std::string& what, const Publish& publish, Done done) = 0;

  // OK while the communicator is usable; once it was aborted (by abort(), or by the backend
  // itself: an NCCL error, an operation past KOLO_OP_TIMEOUT), the first reason. Any thread.
  // The runtime polls it every cycle and stops when it is set, so that the control plane
  // tells the peers: their side of the failed operation waits for this rank otherwise.
  virtual Status failure() const = 0;

  // A peer failed (the control plane or the store says so): abort the communicator and fail
  // every pending operation with `why` (which names the peer). Idempotent and safe from any
  // thread at any time: a second caller waits until the first one's abort has returned, and
  // every operation fails with the first caller's reason, none completes OK after abort began.
  virtual void abort(const Status& why) = 0;
};

}  // namespace kolo

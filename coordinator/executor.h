// Executor: runs one fused batch of responses on the data backend and completes the handles.
//
// Per batch: copy into the persistent fusion buffer with the prescale fused into the copy
// (skipped for a single tensor: the backend works on the caller's memory directly), one
// backend call, copy out with the postscale fused in, then every entry's callbacks. A backend
// with allreduce_pieces gets the batch's tensors as they are instead, in one call, with no
// fusion buffer of the executor's (Note [Allreduce pieces] in backends/backend.h; every rank
// cuts the batch alike, from the one response): shm for a CPU batch that no rank joined, which
// it stages itself; a GPU backend (nccl) for a batch of device tensors, which it fuses in a
// device buffer of its own (without allreduce_pieces, one call per device tensor). A rank
// that had joined has no entry for a response; it contributes the reduction's identity (or
// zero rows) and discards the result.
//
// Timeline. Each phase is a span inside the operation's own (Entry::trace, opened at
// submission); the operation's span ends, with its args (bytes, dtype, shape or members, backend,
// fused and, when fused with others, fused_bytes: the backend call's bytes) and status, before
// its handle completes, and the completion (waiters woken, callbacks run) is a CALLBACK span on
// the Runtime's row of callbacks (trace_format::kCallbacksRow), not inside the operation.
//
// Devices. The backend gets the caller's buffers when it supports their device
// (Backend::supports). A batch on a device other than the host that the backend takes is not
// fused: each tensor is its own backend call. CUDA tensors that the backend does not take (see
// cuda_staging.h) are copied, after their ready events, into pinned host memory (a fused batch
// straight into the pinned fusion buffer), the backend runs on the host copy and the result is
// copied back before the handle completes. A failed copy fails the handles of its batch, but
// this rank still takes part in the backend call so that the other ranks are not stranded. A
// tensor that can go neither way fails with Unsupported on every rank, with no backend call.
// For a staged CUDA input, an OutputAllocator must return memory on the input's device;
// without one the output is a HostTensor in host memory. A backend that takes device buffers
// writes allgather/alltoall/reducescatter results straight into the allocator's memory, so it
// needs one (a HostTensor is host memory); the executor checks this for a device backend.
//
// GPU backend. CUDA tensors go to `gpu` when one is given (KOLO_GPU_OPERATIONS), every other
// tensor to `backend`. A gpu backend that takes CUDA tensors (a DeviceBackend: nccl) gets the
// caller's device buffers after wait_ready() on each tensor's ready event; its calls only queue
// work on its stream, and the handles complete when its fence() reports the completion event
// done (executor_device.cc), on the backend's watchdog thread; the timeline's spans of such an
// operation (the backend's phase, e.g. NCCL_ALLREDUCE, and the operation's own) end there too,
// so a trace shows the time on the GPU. The tensor's name is free again before that, and its
// next operation goes on a sibling row while this one holds the tensor's (Note [Timeline rows]
// in timeline/timeline.h). A gpu backend that takes host memory is staged to as above. A tensor a
// DeviceBackend refuses (wrong device, a host pointer labelled CUDA, a bad ready event, no
// allocator for a device output), and an operation it cannot launch (fence() fails: NCCL refused
// the group), fails its handle and stops the runtime (run() returns the error): the other ranks
// already wait in the collective, and the control plane's PeerFailure (or the op timeout) is what
// releases them.
//
// Not thread-safe: the runtime's cycle thread's (whoever holds the turn: Note [Waiter drives]
// in runtime.cc).
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/device_backend.h"
#include "coordinator/cuda_staging.h"
#include "coordinator/entry.h"
#include "coordinator/message.h"
#include "ops/collectives.h"
#include "timeline/timeline.h"

namespace kolo::coord {

struct BatchItem {
  const Response* response;
  Entry* entry;  // null when this rank had joined (or has no such entry)
};

// An operation's timeline args from its tensors: "bytes" (all of them), "dtype", and "shape"
// for one tensor or "members" (their number) for several: a grouped allreduce, such as a
// gradient bucket, is one operation whose members' shapes differ.
TimelineArgs operation_args(const std::vector<std::vector<int64_t>>& shapes, DataType dtype);

class Executor {
 public:
  // `gpu` (may be null: CUDA tensors then use `backend` too) is borrowed like `backend`, and
  // `timeline`, whose rows of this Executor's Runtime are named "<rows><tensor>" (TimelineRows).
  Executor(Backend& backend, Timeline& timeline, std::string rows, Backend* gpu = nullptr);
  // KOLO_REDUCTION=exact (RuntimeConfig::exact_reduction): float sums and averages, allreduce,
  // piggy-back and reducescatter alike, through the superaccumulator (executor_exact.cc). Set
  // before the first run().
  void reduce_exactly(bool on) { exact_ = on; }
  // Every failed operation ends with namer(its status) instead (RuntimeConfig::
  // name_first_failure); set before the first run().
  void name_failures_with(std::function<Status(const Status&)> namer) { namer_ = std::move(namer); }

  // Runs the batch and completes each entry's handle. Returns a non-OK Status only when the
  // backend failed: the ranks may then be out of step, and the runtime must stop.
  Status run(const std::vector<BatchItem>& batch);
  // Completes a single-tensor CPU allreduce whose every rank's input arrived with the
  // negotiation (inputs[r]: rank r's bytes, 8-byte aligned): reduces them locally in rank
  // order, so every rank computes the identical result, with the backend's scaling rules.
  void reduce_gathered(const BatchItem& item, const std::vector<const void*>& inputs);

 private:
  // run() of a batch, but for the outcome of a device operation's fence.
  Status dispatch(const std::vector<BatchItem>& batch);
  Status allreduce(const std::vector<BatchItem>& batch);
  // What every way of running an allreduce batch derives from its response, alike on every
  // rank.
  struct AllreducePlan {
    // `traced`: the timeline records (else `args` stays empty).
    AllreducePlan(const std::vector<BatchItem>& batch, int ranks, bool traced);
    const std::vector<BatchItem>& batch;
    const Response& head;
    int active = 0;            // ranks that contributed (not joined)
    bool divide_here = false;  // kAverage with joined ranks: the backend sums, this rank divides
    ReduceOp backend_op = ReduceOp::kSum;
    int64_t total = 0;  // elements of the batch
    size_t esize = 0;
    TimelineArgs args;  // of the backend's span
  };
  // Every tensor through its own backend call, on the caller's memory.
  Status allreduce_in_place(const AllreducePlan& plan);
  // Through the fusion buffer (pinned host memory for CUDA tensors staged to the host).
  Status allreduce_fused(const AllreducePlan& plan, bool cuda);
  // The copies into the fusion buffer (prescaled; joined ranks' identity) and out of it
  // (divided, postscaled). A failed CUDA copy's Status; the copies go on.
  Status copy_into_fusion(const AllreducePlan& plan, char* buffer, bool cuda);
  Status copy_out_of_fusion(const AllreducePlan& plan, char* buffer, bool cuda);
  // KOLO_REDUCTION=exact (executor_exact.cc). Whether the response takes it: exact_ and a float
  // sum or average (other ops and integers run as without it).
  bool exact_applies(const Response& p) const;
  // OK, or why the exact path cannot run it, alike on every rank: tensors a device backend takes
  // on the device, more ranks than the accumulator holds.
  Status exact_refusal(const Response& p, bool via_host) const;
  // allreduce_fused, with exact_allreduce (backends/exact_allreduce.h) for the backend's
  // allreduce.
  Status allreduce_exact(const AllreducePlan& plan, bool cuda);
  // The backend reducescatter of the response, exactly, on host buffers.
  Status reducescatter_exact(const void* in, void* out, const Response& p,
                             const std::vector<int64_t>& counts);
  // reduce_gathered's combine: prescale, exact sum, divide, postscale.
  void reduce_gathered_exactly(const Response& p, const std::vector<const void*>& inputs, void* out,
                               int64_t n);
  Status allgather(const BatchItem& item);
  Status broadcast(const BatchItem& item);
  Status alltoall(const BatchItem& item);
  Status reducescatter(const BatchItem& item);
  // The backend op's timeline name, e.g. "TCP_ALLREDUCE".
  std::string op_span(OpType type) const;
  // Opens the span `phase` in each traced entry's operation; in a device batch (batch_spans_)
  // in the first entry's only, with "tensors" (the batch's entries) added to its args.
  void begin(const std::vector<BatchItem>& batch, const std::string& phase, TimelineArgs args = {});
  // Ends the innermost span of each traced entry (the first's only in a device batch); a failed
  // `status` is added to its args.
  void end(const std::vector<BatchItem>& batch, const Status& status = Status::Ok());
  // Allocates an output through the entry's allocator or as an owned HostTensor. Returns
  // null (and fails the entry later) when the allocator returns null.
  void* allocate_output(Entry& entry, const std::vector<int64_t>& shape, DataType dtype,
                        Status& alloc_status);
  // Ends the batch's operations (their spans, then their handles) with `status`.
  void finish(const std::vector<BatchItem>& batch, const Status& status);
  // The args every operation of `batch` ends with: backend, fused (the operations of `batch`)
  // and fused_bytes (theirs, when several). Once per batch: per operation it was quadratic.
  TimelineArgs batch_span_args(const std::vector<BatchItem>& batch) const;
  // The args an operation's span ends with, but the status: bytes, dtype, shape or members,
  // then `batch_args` (batch_span_args of its batch).
  static TimelineArgs op_span_args(const BatchItem& item, const TimelineArgs& batch_args);
  // The backend of the batch being run: gpu_ for CUDA tensors when there is one.
  Backend& backend() const { return *active_; }

  // Device backends (executor_device.cc).
  // Orders the batch after its tensors' ready events and checks their buffers; on an error
  // the batch has been failed (not deferred).
  Status prepare_on_device(const std::vector<BatchItem>& batch);
  // finish() of a deferred batch: fences it on the device backend; the handles complete with
  // the completion event's outcome (or `status` when the call already failed).
  void finish_on_device(const std::vector<BatchItem>& batch, const Status& status);
  // The device output of an entry of a deferred batch: `allocated` (the allocator's) when it
  // is device memory on the tensor's device, else (null, host memory) the backend's stand-in
  // device memory of `bytes`, with alloc_status set to why (null when even that failed).
  void* device_output(Entry& entry, void* allocated, size_t bytes, Status& alloc_status);

  // CUDA staging (executor_staging.cc).
  // Whether the response's tensors go to the backend through host memory: false when the
  // backend takes their device (backend_.supports), true for CUDA tensors that a backend
  // taking host memory does not take. Unsupported, naming the op, tensor, backend and device,
  // when neither works, or when a rank joined a batch the backend takes on a device (a joined
  // rank has only host memory to offer). Depends only on what every rank sees alike (the
  // response and the backend), so every rank decides the same.
  Result<bool> through_host(const Response& p) const;
  // Host memory for a staging slot: pinned, or pageable when pinning fails (slower copies,
  // same results).
  void* host_buffer(CudaStaging::Slot slot, size_t bytes);
  // Copies a CUDA tensor to host memory (or back) and waits for the copy.
  Status stage_in(void* host, const TensorView& src, size_t bytes, const std::string& name);
  Status stage_out(const TensorView& dst, const void* host, size_t bytes, const std::string& name);
  // Runs `call(in, out)`, the backend op of a one-tensor item whose output `out` was
  // allocated already (alloc: how that went), staging input and output through host memory
  // when the entry's tensors are on a GPU, then completes the item.
  using BackendCall = std::function<Status(const void* in, void* out)>;
  Status run_single(const BatchItem& item, size_t in_bytes, void* out, size_t out_bytes,
                    const Status& alloc, TimelineArgs args, const BackendCall& call);

  Backend& backend_;
  Timeline& timeline_;
  const std::string rows_;           // TimelineRows::prefix of the Runtime
  const std::string callbacks_row_;  // its row of CALLBACK spans
  std::function<Status(const Status&)> namer_;
  Backend* gpu_ = nullptr;
  DeviceBackend* device_ = nullptr;  // gpu_ when it takes CUDA buffers directly
  Backend* active_ = &backend_;      // set by run() for each batch
  bool deferred_ = false;            // the batch runs on device_: finish() fences it
  // The batch runs on device_ (set before its first phase): its phases, the backend's device
  // span among them, are recorded once per batch, on its first entry's operation (Note
  // [Device spans per batch] in executor_device.cc).
  bool batch_spans_ = false;
  Status fence_status_;           // the batch's fence: not OK when it could not launch
  ops::Workspace fusion_buffer_;  // persistent: grows to the largest batch and stays
  // Every tensor of `batch` (each item with an entry) as allreduce_pieces takes them, in
  // pieces_ (reused: valid until the next call).
  const std::vector<AllreducePiece>& pieces_of(const std::vector<BatchItem>& batch);
  std::vector<AllreducePiece> pieces_;
  ops::Workspace scratch_;    // joined ranks' stand-in buffers
  ops::Workspace prescaled_;  // reduce_gathered: one rank's input times the prescale
  ops::Workspace exact_acc_;  // KOLO_REDUCTION=exact: the accumulators
  bool exact_ = false;
  CudaStaging staging_;  // pinned buffers and copy streams (idle for CPU tensors)
  std::array<ops::Workspace, 3> pageable_;  // per slot, when pinned memory is unavailable
  bool warned_pageable_ = false;
};

}  // namespace kolo::coord

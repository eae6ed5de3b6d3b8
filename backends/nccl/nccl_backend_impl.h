// NcclBackend, the class behind make_nccl_backend (nccl_backend.h), shared by its files:
// nccl_backend.cc (connect, the destructor, the DeviceBackend protocol, completion and abort),
// nccl_collectives.cc (the collectives and the scale kernels and copies around them),
// nccl_group.cc (their NCCL groups and the settling of a call) and nccl_memory.cc (its device
// buffers). Internal: included by those only.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/device_backend.h"
#include "backends/nccl/abort_notice.h"
#include "backends/nccl/nccl_errors.h"
#include "backends/nccl/pending_ops.h"
#include "backends/registry.h"
#include "common/cuda_device_guard.h"
#include "common/thread_annotations.h"

namespace kolo::nccl {

using Clock = std::chrono::steady_clock;

// How often the watchdog looks at the pending events and the communicator's error state:
// often enough that a completed gradient is handed back within a fraction of a typical
// layer's backward time, rarely enough to leave the CPU to the training loop.
// With nothing pending it sleeps on PendingOps' condition variable (pending_ops.h).
constexpr auto kPollInterval = std::chrono::microseconds(100);
// How long a host wait on NCCL or the GPU yields before it sleeps: since NCCL 2.23 every
// ncclGroupEnd on a non-blocking communicator returns ncclInProgress and launches from a
// helper thread within tens of microseconds; a 100 us sleep would dominate a small collective.
constexpr auto kSpinFor = std::chrono::microseconds(200);
// How often a shutdown that waits for GPU work looks for a peer's abort notice in the store.
constexpr auto kNoticeInterval = std::chrono::milliseconds(200);
// The stand-in for an empty buffer (Note [Empty collectives]): NCCL never touches it, it only
// needs a valid device pointer; 256 bytes is cudaMalloc's alignment, the least it hands out.
constexpr size_t kEmptyBufferBytes = 256;

// Yields while `start` is recent, sleeps a poll interval after.
inline void backoff(Clock::time_point start) {
  if (Clock::now() - start < kSpinFor)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(kPollInterval);
}

// The caller's thread (connect, the destructor, a blocking collective) gets its device back.
using DeviceGuard = CudaDeviceGuard;

inline std::string last_nccl_error(ncclComm_t comm) {
  const char* s = comm ? ncclGetLastError(comm) : nullptr;
  return s ? s : "";
}

class NcclBackend final : public DeviceBackend {
 public:
  NcclBackend(const BackendContext& ctx, int device)
      : rank_(ctx.rank),
        size_(ctx.size),
        device_(device),
        op_timeout_(ctx.op_timeout),
        notice_(ctx.size > 1 ? ctx.store : nullptr, ctx.store_prefix, ctx.rank) {}
  ~NcclBackend() override;

  // Creates the stream and communicator and starts the watchdog.
  Status connect(const BackendContext& ctx);

  std::string_view name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool supports(Device device) const override { return device.is_cuda(); }

  Status wait_ready(Device device, const void* data, void* ready_event,
                    const std::string& what) override;
  Result<void*> stand_in(size_t bytes, const std::string& what) override;
  Status fence(const std::string& what, const Publish& publish, Done done) override;
  // A peer failed (the runtime says so): the peers know, no notice is published.
  void abort(const Status& why) override { (void)abort_communicator(why); }
  Status failure() const override { return pending_.failure(); }

  // A fused batch through the device fusion buffer (Note [Allreduce pieces] in backend.h):
  // batched copy kernels in (one launch per kBatchedCopyMax tensors), one ncclAllReduce, the
  // average and postscale kernels once, batched copy kernels out. Only where every rank's GPU
  // has memory pools (pools_): the buffer grows stream-ordered; without, the executor makes one
  // NCCL call per tensor, as before the buffer existed.
  bool has_allreduce_pieces() const override { return pools_; }

 protected:
  Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                      const Reduction& reduction) override;
  Status do_allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                             const Reduction& reduction) override;
  Status do_allgather(const void* input, void* output, DataType dtype,
                      const std::vector<int64_t>& counts) override;
  Status do_broadcast(void* data, int64_t count, DataType dtype, int root) override;
  Status do_alltoall(const void* input, void* output, DataType dtype,
                     const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& recv_counts) override;
  Status do_reducescatter(const void* input, void* output, DataType dtype,
                          const Reduction& reduction, const std::vector<int64_t>& counts) override;
  Status do_barrier() override;

 private:
  // Every collective starts here: the communicator's sticky failure, the current device,
  // and outside an operation the order after the legacy default stream (the blocking
  // contract). The device guard restores the caller's device (a blocking call runs on the
  // caller's thread); inside an operation it is the background thread, already on device_.
  Status enter(const char* op, std::optional<DeviceGuard>& guard);
  // The result of an NCCL call in non-blocking mode: ncclInProgress means "queued, the
  // communicator is busy"; it is polled (bounded by the op timeout) until it settles.
  Status settle(ncclResult_t r, const std::string& what);
  // A CUDA call's result; a failure is cleared from the thread's last error (the Status holds
  // it), so that the next launch() does not take it for someone else's pending error.
  Status cuda(cudaError_t err, const std::string& what) {
    if (err != cudaSuccess) (void)cudaGetLastError();
    return cuda_status(err, what);
  }
  // A call inside an open group (comm_mu_ held): it only records work, so anything but
  // success (or InProgress) is an error, returned without aborting (abort needs comm_mu_).
  static Status group_call(ncclResult_t r, const std::string& what) {
    return r == ncclSuccess || r == ncclInProgress ? Status::Ok() : nccl_status(r, what);
  }
  // A collective with nothing to move on any rank (Note [Empty collectives], nccl_plan.h):
  // OK without NCCL, the communicator, a group or the stream; once the backend failed, that
  // failure (every later call returns it, device_backend.h).
  Status nothing_to_move(const std::string& what) const {
    Status failed = pending_.failure();
    return failed.ok() ? failed : failed.with_context(what);
  }
  // Makes stream_ wait for the work queued so far on the legacy default stream (once per
  // operation: one mark covers every tensor of it).
  Status wait_for_legacy_stream(const std::string& what);
  // The group of the running operation. open_group() (the first collective after wait_ready)
  // takes comm_mu_ and calls ncclGroupStart; every collective until fence() is recorded into
  // that one group; close_group() ends it (end_group(): ncclGroupEnd, releases comm_mu_),
  // settles it once and then queues the deferred post-scale kernels and the fusion buffer's
  // copy out (they must follow the NCCL kernels, which NCCL enqueues only when the group
  // settles). Holding comm_mu_ for the open group is what keeps abort() (another thread) from
  // freeing the communicator inside it; the background thread holds it only while it queues
  // work, never while it waits. Owner thread only (the one that opened it, group_owner_): NCCL's
  // group state is thread-local, and only the locking thread may unlock comm_mu_.
  Status open_group(const std::string& what) KOLO_NO_THREAD_SAFETY_ANALYSIS;
  Status close_group(const std::string& what) KOLO_NO_THREAD_SAFETY_ANALYSIS;
  // The open group ended for an abort (owner thread only): ncclGroupEnd without settle(), whose
  // wait for a dead peer's connections would take KOLO_OP_TIMEOUT, and no post work queued.
  // Buffers outgrown inside it stay in retired_ for the destructor: NCCL may still enqueue the
  // group's kernels until ncclCommAbort.
  void abort_group() KOLO_NO_THREAD_SAFETY_ANALYSIS;
  ncclResult_t end_group() KOLO_NO_THREAD_SAFETY_ANALYSIS;
  // Frees retired_ stream-ordered (release()).
  void free_retired();
  // close_group() of a group a blocking collective opened for its own calls (exchange, the
  // per-rank reducescatter); `calls`: how recording them went. A refused call fails the
  // communicator, as settle() does: the rest of the group launched, and the peers wait for it.
  Status end_own_group(const Status& calls, const std::string& what);
  // Runs NCCL call f(comm): into the open group inside an operation, else on its own, settled.
  template <typename F>
  Status nccl_call(F f, const std::string& what) {
    if (group_open_) return group_call(f(comm_), what);
    return settle(locked(f), what);
  }
  // A kernel launch on stream_ (`f` queues it and returns its cudaError_t). An error already
  // pending on this thread (someone's unchecked CUDA call) is reported as such, not as the
  // kernel's, and left pending for its owner (pending_cuda_status, nccl_errors.h).
  template <typename F>
  Status launch(F f, const std::string& what) {
    if (const cudaError_t pending = cudaPeekAtLastError(); pending != cudaSuccess)
      return pending_cuda_status(pending, what);
    return cuda(static_cast<cudaError_t>(f()), what);
  }
  // Queues post_copies_ (the fusion buffer's copy out) and clears it.
  Status copy_out(const std::string& what);
  // dst = src * mul / div on the stream (nccl_kernels.h); a plain copy when that is src.
  Status map(void* dst, const void* src, int64_t n, DataType dtype, double mul, double div,
             const std::string& what);
  // The allreduce itself, for do_allreduce and the fusion buffer of do_allreduce_pieces: the
  // prescale kernel, ncclAllReduce and finish_reduction, on stream_ (into the open group
  // inside an operation). Not finish_call(): the caller's.
  Status reduce(const void* input, void* output, int64_t count, DataType dtype,
                const Reduction& reduction, const std::string& what);
  // ops::finish_reduction's rule on a reduction's output, so that every dtype's result is
  // the CPU backends': kAverage was an NCCL sum (nccl_op) and divides by the ranks here, then
  // the postscale, each rounded as the host rounds it. Queued now outside an operation,
  // after the group settles inside one (the kernels must follow the NCCL kernels).
  Status finish_reduction(void* data, int64_t n, DataType dtype, const Reduction& reduction,
                          const std::string& what);
  // Outside an operation begun by wait_ready: Backend's blocking contract (see
  // device_backend.h). Inside one: nothing, fence() completes it.
  Status finish_call(const std::string& what);
  // Device scratch of at least `bytes` (stream-ordered allocation: no host wait).
  Result<void*> scratch(size_t bytes);
  // `buffer` (of `capacity` bytes) grown to at least `bytes`, stream-ordered.
  Result<void*> grow(void*& buffer, size_t& capacity, size_t bytes, const std::string& what);
  // Frees `buffer` after the work queued on stream_ so far (cudaFreeAsync; a failure is logged
  // and cleared, so that the next kernel launch does not report it as its own). Without pools
  // it is kept (kept_) for the destructor, which frees it once the stream is idle.
  void release(void* buffer, const char* what);
  void free_kept();
  // Sets pools_: whether this GPU has memory pools (cudaDevAttrMemoryPoolsSupported), and with
  // several ranks, whether all of theirs do (an NCCL min at connect: has_allreduce_pieces()
  // must answer alike on every rank).
  Status agree_on_pools(const std::string& me);
  // Grouped point-to-point: sends send_counts[j] elements from input and receives
  // recv_counts[j] into output for every peer j, the own block as a device copy. same_input:
  // every peer gets the same block, input's first send_counts[j] elements (allgather).
  Status exchange(const void* input, void* output, DataType dtype,
                  const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts,
                  bool same_input, const std::string& what);
  void watchdog();
  // The abort protocol (close, ncclCommAbort once, fail every op); returns whether this call
  // aborted the communicator (false: it was already gone).
  bool abort_communicator(const Status& why);
  // This rank's own failure (an NCCL error, a timeout, an operation that cannot launch, a
  // shutdown with work left): abort, then publish the notice for the peers (abort_notice.h),
  // whose side of the operation waits for this rank. The ops have failed before the store
  // call, which may take the store's I/O timeout when the store is gone.
  void fail(const Status& why);

  // Runs f(comm) under comm_mu_, so that abort() (any thread) never frees the communicator
  // under a call; returns ncclInvalidUsage once the communicator was aborted (settle() then
  // reports the abort's reason). Non-blocking mode: no NCCL call waits, so neither does this.
  template <typename F>
  ncclResult_t locked(F f) {
    MutexLock lock(comm_mu_);
    return comm_ ? f(comm_) : ncclInvalidUsage;
  }
  ncclResult_t async_error() {
    ncclResult_t r = ncclSuccess;
    ncclResult_t q = locked([&](ncclComm_t c) { return ncclCommGetAsyncError(c, &r); });
    return q == ncclSuccess ? r : q;
  }
  std::string last_error() {
    MutexLock lock(comm_mu_);
    return last_nccl_error(comm_);
  }

  struct PostMap {
    void* data;
    int64_t n;
    DataType dtype;
    double mul, div;
    std::string what;
  };

  const int rank_, size_, device_;
  const std::chrono::milliseconds op_timeout_;
  AbortNotice notice_;  // this rank's abort for the peers, and theirs for it
  Mutex comm_mu_;       // guards comm_ after connect(): every call and the abort
  ncclComm_t comm_ = nullptr;
  // Non-blocking: neither waits for nor holds up the legacy default stream, where the
  // framework computes; wait_for_legacy_stream() orders it after that stream where needed.
  cudaStream_t stream_ = nullptr;
  cudaEvent_t legacy_mark_ = nullptr;  // recorded on the legacy stream, waited on by stream_
  // Set by connect(), constant after it.
  bool pools_ = false;       // stream-ordered allocation on every rank's GPU (agree_on_pools)
  int multiprocessors_ = 1;  // the GPU's SM count: the batched copy's grid
  // The stand-in for this rank's empty buffer in a collective that is not empty (Note [Empty
  // collectives]): never read or written; cudaMalloc'd by connect(), freed by the destructor.
  void* empty_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* stand_in_ = nullptr;
  size_t stand_in_bytes_ = 0;
  std::vector<void*> kept_;  // without pools: outgrown buffers, freed by the destructor
  // The background thread's operation state, between wait_ready and fence.
  bool in_op_ = false;
  bool legacy_waited_ = false;  // this operation's stream already waits for the legacy stream
  bool group_open_ = false;     // open_group() ran: comm_mu_ is held
  // The thread that holds comm_mu_ for the open group (abort() from it must end the group
  // first, or it would wait on itself).
  std::atomic<std::thread::id> group_owner_{};
  std::vector<PostMap> post_maps_;
  // The fusion buffer's copies (do_allreduce_pieces), reused: in, queued at once; out, moved to
  // post_copies_ once the call succeeded, which is queued after post_maps_ (close_group), or at
  // once outside an operation (copy_out()).
  std::vector<CopySegment> copies_in_;
  std::vector<CopySegment> copies_out_;
  std::vector<CopySegment> post_copies_;
  void* fusion_ = nullptr;  // the device fusion buffer (grow())
  size_t fusion_bytes_ = 0;
  // Buffers outgrown inside the open group: freed once it settled, or by the destructor.
  std::vector<void*> retired_;
  PendingOps pending_;  // also the watchdog's sleep and stop request
  std::atomic<bool> aborted_{false};
  std::thread watchdog_;
};

}  // namespace kolo::nccl

#include "backends/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "backends/nccl/abort_notice.h"
#include "backends/nccl/nccl_errors.h"
#include "backends/nccl/nccl_kernels.h"
#include "backends/nccl/pending_ops.h"
#include "common/cuda_device_guard.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "kolo/units.h"

namespace kolo {

namespace {

using Clock = std::chrono::steady_clock;
using nccl::cuda_status;
using nccl::nccl_status;

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

// Yields while `start` is recent, sleeps a poll interval after.
void backoff(Clock::time_point start) {
  if (Clock::now() - start < kSpinFor)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(kPollInterval);
}

// The caller's thread (connect, the destructor, a blocking collective) gets its device back.
using DeviceGuard = CudaDeviceGuard;

std::string last_nccl_error(ncclComm_t comm) {
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

 protected:
  Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
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
  Status cuda(cudaError_t err, const std::string& what) { return cuda_status(err, what); }
  // A call inside an open group (comm_mu_ held): it only records work, so anything but
  // success (or InProgress) is an error, returned without aborting (abort needs comm_mu_).
  static Status group_call(ncclResult_t r, const std::string& what) {
    return r == ncclSuccess || r == ncclInProgress ? Status::Ok() : nccl_status(r, what);
  }
  // Makes stream_ wait for the work queued so far on the legacy default stream (once per
  // operation: one mark covers every tensor of it).
  Status wait_for_legacy_stream(const std::string& what);
  // The group of the running operation. open_group() (the first collective after wait_ready)
  // takes comm_mu_ and calls ncclGroupStart; every collective until fence() is recorded into
  // that one group; close_group() calls ncclGroupEnd, releases comm_mu_, settles the group
  // once and then queues the deferred post-scale kernels (they must follow the NCCL kernels,
  // which NCCL enqueues only when the group settles). Holding comm_mu_ for the open group is
  // what keeps abort() (another thread) from freeing the communicator inside it; the
  // background thread holds it only while it queues work, never while it waits.
  Status open_group(const std::string& what) KOLO_NO_THREAD_SAFETY_ANALYSIS;
  Status close_group(const std::string& what) KOLO_NO_THREAD_SAFETY_ANALYSIS;
  // Runs NCCL call f(comm): into the open group inside an operation, else on its own, settled.
  template <typename F>
  Status nccl_call(F f, const std::string& what) {
    if (group_open_) return group_call(f(comm_), what);
    return settle(locked(f), what);
  }
  // dst = src * mul / div on the stream (nccl_kernels.h); a plain copy when that is src.
  Status map(void* dst, const void* src, int64_t n, DataType dtype, double mul, double div,
             const std::string& what);
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
  nccl::AbortNotice notice_;  // this rank's abort for the peers, and theirs for it
  Mutex comm_mu_;             // guards comm_ after connect(): every call and the abort
  ncclComm_t comm_ = nullptr;
  // Non-blocking: neither waits for nor holds up the legacy default stream, where the
  // framework computes; wait_for_legacy_stream() orders it after that stream where needed.
  cudaStream_t stream_ = nullptr;
  cudaEvent_t legacy_mark_ = nullptr;  // recorded on the legacy stream, waited on by stream_
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* stand_in_ = nullptr;
  size_t stand_in_bytes_ = 0;
  // The background thread's operation state, between wait_ready and fence.
  bool in_op_ = false;
  bool legacy_waited_ = false;  // this operation's stream already waits for the legacy stream
  bool group_open_ = false;     // open_group() ran: comm_mu_ is held
  // The thread that holds comm_mu_ for the open group (abort() from it must end the group
  // first, or it would wait on itself).
  std::atomic<std::thread::id> group_owner_{};
  std::vector<PostMap> post_maps_;
  std::vector<void*> retired_;  // buffers outgrown inside the open group: freed after it
  nccl::PendingOps pending_;    // also the watchdog's sleep and stop request
  std::atomic<bool> aborted_{false};
  std::thread watchdog_;
};

NcclBackend::~NcclBackend() {
  if (group_open_) (void)close_group("nccl shutdown");  // a fence never came: launch, then wait
  if (stream_) {
    // Let queued work finish (bounded by the op timeout); the watchdog completes it. The
    // runtimes no longer talk (an orderly shutdown was agreed), so a peer that aborted since
    // is learnt from its notice in the store (abort_notice.h), not at the op timeout.
    const auto deadline = Clock::now() + op_timeout_;
    auto next_look = Clock::now();
    while (pending_.size() > 0 && !aborted_ && Clock::now() < deadline) {
      std::this_thread::sleep_for(kPollInterval);
      if (Clock::now() < next_look) continue;
      next_look = Clock::now() + kNoticeInterval;
      Result<std::optional<std::string>> peer = notice_.first();
      if (peer.ok() && *peer)
        abort(Status::PeerFailure("nccl: a peer aborted its communicator (" + **peer +
                                  "), so this rank's pending GPU operations cannot complete"));
    }
    if (pending_.size() > 0) fail(Status::Aborted("the nccl backend was shut down"));
  }
  pending_.shutdown();
  if (watchdog_.joinable()) watchdog_.join();
  pending_.fail_all(Status::Aborted("the nccl backend was shut down"));
  DeviceGuard guard(device_);
  if (comm_ && !aborted_) {
    // Finalize flushes outstanding work; in non-blocking mode it returns at once and is
    // polled. Whatever goes wrong, abort releases the communicator without waiting on peers.
    ncclResult_t r = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + op_timeout_;
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(kPollInterval);
      if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (scratch_) cudaFreeAsync(scratch_, stream_);
  if (stand_in_) cudaFreeAsync(stand_in_, stream_);
  if (stream_) {
    // Polled, never cudaStreamSynchronize: a kernel stuck on a peer (finalize timed out before
    // the abort ended it) must not hang the shutdown.
    const auto deadline = Clock::now() + op_timeout_;
    const auto start = Clock::now();
    cudaError_t q = cudaStreamQuery(stream_);
    while (q == cudaErrorNotReady && Clock::now() < deadline) {
      backoff(start);
      q = cudaStreamQuery(stream_);
    }
    if (q == cudaErrorNotReady)
      KOLO_LOG_ERROR("nccl: the stream of cuda:" << device_ << " still runs after "
                                                 << format_duration(op_timeout_)
                                                 << " at shutdown; it is left to the driver");
    else
      cudaStreamDestroy(stream_);
  }
  if (legacy_mark_) cudaEventDestroy(legacy_mark_);
}

Status NcclBackend::connect(const BackendContext& ctx) {
  const std::string me =
      "nccl rank " + std::to_string(rank_) + " (cuda:" + std::to_string(device_) + ")";
  DeviceGuard guard(device_);  // the caller's thread: its device is restored
  KOLO_RETURN_IF_ERROR(cuda(guard.status(), me + ": cudaSetDevice"));
  // Non-blocking (as PyTorch's streams are): a blocking stream would serialise every
  // collective with the compute on the legacy default stream, both ways. The legacy stream's
  // work is waited for through legacy_mark_ where the contract asks for it (wait_ready).
  KOLO_RETURN_IF_ERROR(cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                            me + ": creating its stream"));
  KOLO_RETURN_IF_ERROR(cuda(cudaEventCreateWithFlags(&legacy_mark_, cudaEventDisableTiming),
                            me + ": creating its event"));

  ncclUniqueId id;
  const std::string key = ctx.store_prefix + "/nccl/id";
  if (rank_ == 0) {
    KOLO_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), me + ": ncclGetUniqueId"));
    if (size_ > 1)
      KOLO_RETURN_IF_ERROR(ctx.store->set(key, std::string(id.internal, sizeof(id.internal)))
                               .with_context(me + ": publishing the NCCL unique id in the store"));
  } else {
    Result<std::string> value = ctx.store->get(key, ctx.connect_timeout);
    if (!value.ok())
      return value.status().with_context(me + ": waiting for rank 0's NCCL unique id");
    if (value->size() != sizeof(id.internal))
      return Status::InvalidArgument(me + ": the NCCL unique id in the store under '" + key +
                                     "' has " + std::to_string(value->size()) +
                                     " bytes, expected " + std::to_string(sizeof(id.internal)));
    std::memcpy(id.internal, value->data(), sizeof(id.internal));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; we poll, so a dead peer cannot hang us
  ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  const auto deadline = Clock::now() + ctx.connect_timeout;
  while (r == ncclInProgress) {
    if (Clock::now() > deadline) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      return Status::Timeout(me + ": the NCCL communicator of " + std::to_string(size_) +
                             " ranks was not ready within " + format_duration(ctx.connect_timeout) +
                             " (a rank did not join, or cannot reach this one)");
    }
    std::this_thread::sleep_for(kPollInterval);
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r != ncclSuccess) {
    Status st = nccl_status(r, me + ": ncclCommInitRankConfig", last_nccl_error(comm_));
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    return st;
  }
  watchdog_ = std::thread([this] { watchdog(); });
  return Status::Ok();
}

Status NcclBackend::enter(const char* op, std::optional<DeviceGuard>& guard) {
  const std::string what = std::string("nccl ") + op;
  Status failed = pending_.failure();
  if (!failed.ok()) return failed.with_context(what);
  if (in_op_) return open_group(what);  // the background thread: on device_ since wait_ready
  guard.emplace(device_);
  KOLO_RETURN_IF_ERROR(cuda(guard->status(), what + ": cudaSetDevice"));
  return wait_for_legacy_stream(what);
}

Status NcclBackend::wait_for_legacy_stream(const std::string& what) {
  if (legacy_waited_) return Status::Ok();
  KOLO_RETURN_IF_ERROR(cuda(cudaEventRecord(legacy_mark_, cudaStreamLegacy),
                            what + ": recording an event on the legacy default stream"));
  KOLO_RETURN_IF_ERROR(cuda(cudaStreamWaitEvent(stream_, legacy_mark_, 0),
                            what + ": waiting for the legacy default stream"));
  legacy_waited_ = in_op_;  // outside an operation every call waits anew
  return Status::Ok();
}

Status NcclBackend::open_group(const std::string& what) {
  if (group_open_) return Status::Ok();
  comm_mu_.lock();
  if (!comm_) {
    comm_mu_.unlock();
    Status failed = pending_.failure();
    return failed.ok() ? Status::Aborted(what + ": the communicator was aborted")
                       : failed.with_context(what);
  }
  const ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    comm_mu_.unlock();
    return nccl_status(r, what + ": ncclGroupStart");
  }
  group_open_ = true;
  group_owner_ = std::this_thread::get_id();
  return Status::Ok();
}

Status NcclBackend::close_group(const std::string& what) {
  if (!group_open_) return Status::Ok();
  // Closed even after a failed call in it, or the communicator stays in the group.
  const ncclResult_t ended = ncclGroupEnd();
  group_open_ = false;
  group_owner_ = std::thread::id();
  comm_mu_.unlock();
  Status st = settle(ended, what + ": ncclGroupEnd");
  std::vector<PostMap> post = std::move(post_maps_);
  post_maps_.clear();
  for (const PostMap& p : post)
    if (st.ok()) st = map(p.data, p.data, p.n, p.dtype, p.mul, p.div, p.what);
  for (void* b : retired_) cudaFreeAsync(b, stream_);
  retired_.clear();
  return st;
}

Status NcclBackend::settle(ncclResult_t r, const std::string& what) {
  const auto start = Clock::now();
  const auto deadline = start + op_timeout_;
  while (r == ncclInProgress) {
    if (Clock::now() > deadline) {
      Status st = Status::Timeout(what + ": NCCL did not accept the call within " +
                                  format_duration(op_timeout_) + " (KOLO_OP_TIMEOUT)");
      fail(st);
      return st;
    }
    backoff(start);
    r = async_error();
  }
  if (r == ncclSuccess) return Status::Ok();
  // Aborted meanwhile (by the watchdog or the runtime): that reason, not the symptom.
  if (Status failed = pending_.failure(); !failed.ok()) return failed.with_context(what);
  Status st = nccl_status(r, what, last_error());
  // Every error aborts, an invalid argument too: it leaves the communicator usable, but the
  // peers' side of this collective was launched and would wait for this rank until
  // KOLO_OP_TIMEOUT. Aborted, this rank fails at once and the runtime stops, which the peers
  // learn from the control plane.
  fail(st);
  return st;
}

Status NcclBackend::map(void* dst, const void* src, int64_t n, DataType dtype, double mul,
                        double div, const std::string& what) {
  if (mul == 1.0 && div == 1.0) {
    if (dst == src || n == 0) return Status::Ok();
    return cuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dtype),
                                cudaMemcpyDeviceToDevice, stream_),
                what + ": copy");
  }
  return cuda(static_cast<cudaError_t>(
                  nccl::map_on_stream(dst, src, n, nccl::kernel_type(dtype), mul, div, stream_)),
              what + (div == 1.0 ? ": scale kernel" : ": average kernel"));
}

Status NcclBackend::finish_reduction(void* data, int64_t n, DataType dtype,
                                     const Reduction& reduction, const std::string& what) {
  if (n == 0) return Status::Ok();
  // Two passes, as ops::finish_reduction makes them: one fused x * post / size would round
  // once where the host rounds twice.
  std::vector<PostMap> maps;
  if (reduction.op == ReduceOp::kAverage && size_ > 1)
    maps.push_back({data, n, dtype, 1.0, static_cast<double>(size_), what});
  if (reduction.postscale != 1.0) maps.push_back({data, n, dtype, reduction.postscale, 1.0, what});
  for (PostMap& p : maps) {
    if (group_open_)
      post_maps_.push_back(std::move(p));
    else
      KOLO_RETURN_IF_ERROR(map(p.data, p.data, p.n, p.dtype, p.mul, p.div, p.what));
  }
  return Status::Ok();
}

Status NcclBackend::finish_call(const std::string& what) {
  if (in_op_) return Status::Ok();
  // Blocking contract outside an operation: poll an event (never cudaStreamSynchronize,
  // which would hang on a dead peer), bounded by the op timeout and the async error.
  cudaEvent_t ev = nullptr;
  KOLO_RETURN_IF_ERROR(cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), what));
  Status st = cuda(cudaEventRecord(ev, stream_), what + ": cudaEventRecord");
  const auto start = Clock::now();
  const auto deadline = start + op_timeout_;
  while (st.ok()) {
    cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      st = cuda(q, what);
      break;
    }
    if (Status failed = pending_.failure(); !failed.ok()) {
      st = failed.with_context(what);
      break;
    }
    const ncclResult_t async = async_error();
    if (async != ncclSuccess && async != ncclInProgress) {
      st = nccl_status(async, what, last_error());
      fail(st);
      break;
    }
    if (Clock::now() > deadline) {
      st = Status::Timeout(what + ": did not complete on the GPU within " +
                           format_duration(op_timeout_) +
                           " (KOLO_OP_TIMEOUT): a peer is dead or stuck");
      fail(st);
      break;
    }
    // Spin (yielding) first, as cudaStreamSynchronize would: a small collective completes
    // in microseconds and a sleep would dominate it.
    backoff(start);
  }
  cudaEventDestroy(ev);
  return st;
}

Result<void*> NcclBackend::grow(void*& buffer, size_t& capacity, size_t bytes,
                                const std::string& what) {
  if (bytes <= capacity && buffer) return buffer;
  // Stream-ordered, after its last use; inside an open group that use is not queued yet, so
  // the free waits until close_group() launched the group.
  if (buffer) {
    if (group_open_)
      retired_.push_back(buffer);
    else
      cudaFreeAsync(buffer, stream_);
  }
  buffer = nullptr;
  capacity = 0;
  const size_t want = std::max<size_t>(bytes, 4096);
  KOLO_RETURN_IF_ERROR(cuda(cudaMallocAsync(&buffer, want, stream_),
                            what + ": allocating " + std::to_string(want) +
                                " bytes of device memory on cuda:" + std::to_string(device_)));
  capacity = want;
  return buffer;
}

Result<void*> NcclBackend::scratch(size_t bytes) {
  return grow(scratch_, scratch_bytes_, bytes, "nccl scratch");
}

Result<void*> NcclBackend::stand_in(size_t bytes, const std::string& what) {
  return grow(stand_in_, stand_in_bytes_, bytes, what + ": a stand-in output");
}

Status NcclBackend::wait_ready(Device device, const void* data, void* ready_event,
                               const std::string& what) {
  if (Status failed = pending_.failure(); !failed.ok()) return failed.with_context(what);
  in_op_ = true;
  // The background thread (Kolo's own): it stays on device_.
  KOLO_RETURN_IF_ERROR(cuda(cudaSetDevice(device_), what + ": cudaSetDevice"));
  if (!device.is_cuda() || device.index != device_)
    return Status::InvalidArgument(
        what + ": the tensor is on " + device.to_string() +
        " but this rank's NCCL communicator is on cuda:" + std::to_string(device_));
  if (data != nullptr) {
    cudaPointerAttributes attr{};
    cudaError_t err = cudaPointerGetAttributes(&attr, data);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it
      return cuda(err, what + ": checking the tensor's data pointer");
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
      return Status::InvalidArgument(
          what + ": the tensor says " + device.to_string() + " but its data pointer is " +
          (attr.type == cudaMemoryTypeHost ? "pinned host" : "unregistered host") + " memory");
    if (attr.type == cudaMemoryTypeDevice && attr.device != device_)
      return Status::InvalidArgument(what + ": the tensor says " + device.to_string() +
                                     " but its memory is on cuda:" + std::to_string(attr.device));
  }
  if (!ready_event) return wait_for_legacy_stream(what);
  cudaError_t err = cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(ready_event), 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::InvalidArgument(what + ": its ready event is not a usable CUDA event (" +
                                   cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")");
  }
  return Status::Ok();
}

Status NcclBackend::fence(const std::string& what, const Publish& publish, Done done) {
  // Launch the operation's group (and its post-scales) before its completion event. Inside
  // the group the calls only recorded work: NCCL reports their errors here (and settle()
  // aborted the communicator for them).
  const Status launched = close_group(what);
  in_op_ = false;
  legacy_waited_ = false;
  // A group (or a post-scale) that did not launch leaves part of this operation unqueued,
  // which the peers' side waits for: abort, so that they learn it. `launched` names the op.
  if (!launched.ok()) {
    fail(launched);  // returns once the communicator is gone
    done(launched);
    return launched;
  }
  if (Status failed = pending_.failure(); !failed.ok()) {
    // Closed: an abort began, maybe on another thread and still inside ncclCommAbort, with
    // this op's work queued. abort() returns only once the communicator is gone, so that no
    // buffer is written after the handle reports the failure.
    abort(failed);
    Status st = nccl::op_failure(what, pending_.failure());
    done(st);
    return st;
  }
  cudaEvent_t ev = nullptr;
  Status recorded = cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), what);
  if (recorded.ok())
    recorded = cuda(cudaEventRecord(ev, stream_), what + ": recording its completion event");
  if (!recorded.ok()) {
    if (ev) cudaEventDestroy(ev);
    // Work of this operation may still be queued, with nothing to tell when it ends: abort,
    // so that no buffer is written after its handle reports the failure.
    fail(recorded);
    done(recorded);
    return recorded;
  }
  // Destroying an event whose work is still queued is allowed: CUDA frees it on completion.
  std::shared_ptr<void> event(ev, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  // Published before the op is registered: the watchdog may complete it at once.
  publish(event);
  pending_.add(
      what,
      // Holds the event: the query must never see a destroyed one, whoever else drops it.
      [event]() -> Result<bool> {
        cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(event.get()));
        if (q == cudaSuccess) return true;
        if (q == cudaErrorNotReady) return false;
        return cuda_status(q, "waiting for its completion event");
      },
      std::move(done));
  return Status::Ok();
}

bool NcclBackend::abort_communicator(const Status& why) {
  // Closed first: from now on no op completes OK (an aborted kernel exits, and its event
  // fires, with its buffers half written) and every new call fails with this first reason.
  pending_.close(why);
  // The background thread inside an operation (the runtime failing between its calls):
  // release the group it holds, so that the abort below does not wait on this thread.
  if (group_owner_ == std::this_thread::get_id()) (void)close_group("nccl abort");
  bool aborted_now = false;
  {
    // A second caller waits here until the first one's ncclCommAbort returned.
    MutexLock lock(comm_mu_);
    if (comm_) {
      KOLO_LOG_ERROR("nccl: aborting the communicator: " << pending_.failure().to_string());
      ncclCommAbort(comm_);
      comm_ = nullptr;
      aborted_now = true;
    }
  }
  aborted_ = true;
  // Only now, with NCCL unable to write their buffers, are the ops reported failed.
  pending_.fail_all(why);
  return aborted_now;
}

void NcclBackend::fail(const Status& why) {
  if (!abort_communicator(why)) return;
  // The first abort of the group names the cause; a store that cannot be reached only loses
  // the notice.
  if (Status told = notice_.publish(pending_.failure()); !told.ok())
    KOLO_LOG_WARNING(
        "nccl: could not publish this rank's abort in the store: " << told.to_string());
}

void NcclBackend::watchdog() {
  cudaSetDevice(device_);
  while (pending_.wait(kPollInterval)) {
    if (!pending_.failure().ok()) continue;  // closed: an abort runs or ran
    Status st = pending_.poll(op_timeout_);
    if (st.ok()) {
      const ncclResult_t async = async_error();
      if (async != ncclSuccess && async != ncclInProgress && pending_.failure().ok())
        st = nccl_status(async, "the nccl communicator", last_error());
    }
    if (!st.ok()) fail(st);
  }
}

Status NcclBackend::do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                                 const Reduction& reduction) {
  const std::string what = "nccl allreduce";
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("allreduce", guard));
  // A prescale is a kernel into the output, then the reduction is in place there; without one
  // NCCL reads the input directly. (Inside a group the kernel is queued at once, so before
  // the group's NCCL kernels, which NCCL enqueues when the group ends.)
  const void* src = input;
  if (reduction.prescale != 1.0) {
    KOLO_RETURN_IF_ERROR(map(output, input, count, dtype, reduction.prescale, 1.0, what));
    src = output;
  }
  KOLO_RETURN_IF_ERROR(nccl_call(
      [&](ncclComm_t c) {
        return ncclAllReduce(src, output, static_cast<size_t>(count),
                             static_cast<ncclDataType_t>(nccl::nccl_dtype(dtype)),
                             static_cast<ncclRedOp_t>(nccl::nccl_op(reduction.op)), c, stream_);
      },
      what));
  KOLO_RETURN_IF_ERROR(finish_reduction(output, count, dtype, reduction, what));
  return finish_call(what);
}

Status NcclBackend::exchange(const void* input, void* output, DataType dtype,
                             const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts, bool same_input,
                             const std::string& what) {
  const size_t esize = dtype_size(dtype);
  const auto dt = static_cast<ncclDataType_t>(nccl::nccl_dtype(dtype));
  auto in = static_cast<const char*>(input);
  auto out = static_cast<char*>(output);
  int64_t send_off = 0, recv_off = 0;
  // In a group: the operation's (inside one), or one of its own, so that an abort cannot
  // free the communicator between the calls of an open group.
  const bool own_group = !group_open_;
  if (own_group) KOLO_RETURN_IF_ERROR(open_group(what));
  Status st;
  for (int j = 0; j < size_ && st.ok(); ++j) {
    const int64_t s = send_counts[j], rc = recv_counts[j];
    if (j == rank_) {
      if (s > 0 && in + send_off * esize != out + recv_off * esize)
        st =
            cuda(cudaMemcpyAsync(out + recv_off * esize, in + send_off * esize,
                                 static_cast<size_t>(s) * esize, cudaMemcpyDeviceToDevice, stream_),
                 what + ": own block");
    } else {
      if (s > 0)
        st = group_call(
            ncclSend(in + send_off * esize, static_cast<size_t>(s), dt, j, comm_, stream_),
            what + ": ncclSend to rank " + std::to_string(j));
      if (st.ok() && rc > 0)
        st = group_call(
            ncclRecv(out + recv_off * esize, static_cast<size_t>(rc), dt, j, comm_, stream_),
            what + ": ncclRecv from rank " + std::to_string(j));
    }
    if (!same_input) send_off += s;
    recv_off += rc;
  }
  if (!own_group) return st;
  Status end_status = close_group(what);
  return st.ok() ? end_status : st;
}

Status NcclBackend::do_allgather(const void* input, void* output, DataType dtype,
                                 const std::vector<int64_t>& counts) {
  const std::string what = "nccl allgather";
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("allgather", guard));
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  if (equal) {
    // ncclAllGather is in place when input is this rank's slot of output.
    KOLO_RETURN_IF_ERROR(nccl_call(
        [&](ncclComm_t c) {
          return ncclAllGather(input, output, static_cast<size_t>(counts[0]),
                               static_cast<ncclDataType_t>(nccl::nccl_dtype(dtype)), c, stream_);
        },
        what));
  } else {
    // Every rank sends its one block to every other rank.
    KOLO_RETURN_IF_ERROR(exchange(input, output, dtype,
                                  std::vector<int64_t>(static_cast<size_t>(size_), counts[rank_]),
                                  counts, /*same_input=*/true, what));
  }
  return finish_call(what);
}

Status NcclBackend::do_broadcast(void* data, int64_t count, DataType dtype, int root) {
  const std::string what = "nccl broadcast";
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("broadcast", guard));
  KOLO_RETURN_IF_ERROR(nccl_call(
      [&](ncclComm_t c) {
        return ncclBroadcast(data, data, static_cast<size_t>(count),
                             static_cast<ncclDataType_t>(nccl::nccl_dtype(dtype)), root, c,
                             stream_);
      },
      what));
  return finish_call(what);
}

Status NcclBackend::do_alltoall(const void* input, void* output, DataType dtype,
                                const std::vector<int64_t>& send_counts,
                                const std::vector<int64_t>& recv_counts) {
  const std::string what = "nccl alltoall";
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("alltoall", guard));
  KOLO_RETURN_IF_ERROR(
      exchange(input, output, dtype, send_counts, recv_counts, /*same_input=*/false, what));
  return finish_call(what);
}

Status NcclBackend::do_reducescatter(const void* input, void* output, DataType dtype,
                                     const Reduction& reduction,
                                     const std::vector<int64_t>& counts) {
  const std::string what = "nccl reducescatter";
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("reducescatter", guard));
  const size_t esize = dtype_size(dtype);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const void* src = input;
  if (reduction.prescale != 1.0) {
    KOLO_ASSIGN_OR_RETURN(void* scaled, scratch(static_cast<size_t>(total) * esize));
    KOLO_RETURN_IF_ERROR(map(scaled, input, total, dtype, reduction.prescale, 1.0, what));
    src = scaled;
  }
  const auto dt = static_cast<ncclDataType_t>(nccl::nccl_dtype(dtype));
  const auto op = static_cast<ncclRedOp_t>(nccl::nccl_op(reduction.op));
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  if (equal) {
    KOLO_RETURN_IF_ERROR(nccl_call(
        [&](ncclComm_t c) {
          return ncclReduceScatter(src, output, static_cast<size_t>(counts[0]), dt, op, c, stream_);
        },
        what));
  } else {
    // NCCL has no reduce-scatter with per-rank counts: one ncclReduce per block, to the rank
    // that owns it, in one group (NCCL schedules them together), as in exchange().
    const bool own_group = !group_open_;
    if (own_group) KOLO_RETURN_IF_ERROR(open_group(what));
    Status st;
    int64_t off = 0;
    for (int r = 0; r < size_ && st.ok(); ++r) {
      if (counts[r] > 0)
        st = group_call(ncclReduce(static_cast<const char*>(src) + off * esize, output,
                                   static_cast<size_t>(counts[r]), dt, op, r, comm_, stream_),
                        what + ": ncclReduce of rank " + std::to_string(r) + "'s block");
      off += counts[r];
    }
    Status end_status = own_group ? close_group(what) : Status::Ok();
    KOLO_RETURN_IF_ERROR(st.ok() ? end_status : st);
  }
  KOLO_RETURN_IF_ERROR(finish_reduction(output, counts[rank_], dtype, reduction, what));
  return finish_call(what);
}

Status NcclBackend::do_barrier() {
  const std::string what = "nccl barrier";
  // A barrier is always blocking, that is its point: it launches an open group first.
  KOLO_RETURN_IF_ERROR(close_group(what));
  const bool was_in_op = in_op_;
  in_op_ = false;
  std::optional<DeviceGuard> guard;
  Status st = enter("barrier", guard);
  Result<void*> one = st.ok() ? scratch(sizeof(int32_t)) : Result<void*>(st);
  if (!one.ok()) st = one.status();
  if (st.ok())
    st = nccl_call(
        [&](ncclComm_t c) { return ncclAllReduce(*one, *one, 1, ncclInt32, ncclSum, c, stream_); },
        what);
  if (st.ok()) st = finish_call(what);
  in_op_ = was_in_op;
  return st;
}

}  // namespace

Result<std::unique_ptr<Backend>> make_nccl_backend(const BackendContext& ctx) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  Result<int> device = gpu_of_local_rank(ctx.local_rank, ctx.local_size, count);
  if (!device.ok()) return device.status().with_context("nccl");
  if (ctx.size > 1 && ctx.store == nullptr)
    return Status::InvalidArgument("nccl: context.store must not be null for a group of " +
                                   std::to_string(ctx.size) + " ranks");
  auto backend = std::make_unique<NcclBackend>(ctx, *device);
  KOLO_RETURN_IF_ERROR(backend->connect(ctx));
  return std::unique_ptr<Backend>(std::move(backend));
}

BackendEntry backend_entry_nccl() {
  BackendEntry entry;
  entry.name = "nccl";
  entry.factory = &make_nccl_backend;
  entry.devices = {DeviceKind::kCuda};
  return entry;
}

}  // namespace kolo

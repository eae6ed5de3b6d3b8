#include "backends/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "backends/nccl/nccl_backend_impl.h"
#include "common/logging.h"
#include "kolo/units.h"

namespace kolo {

Result<int> gpu_of_local_rank(int local_rank, int local_size, int visible_gpus) {
  if (visible_gpus <= 0)
    return Status::Unsupported(
        "this process sees no CUDA device (CUDA_VISIBLE_DEVICES, driver); NCCL needs one GPU "
        "per rank");
  if (visible_gpus == 1) return 0;
  if (local_size > visible_gpus)
    return Status::InvalidArgument(
        std::to_string(local_size) + " ranks run on this host but it has " +
        std::to_string(visible_gpus) + " visible GPU(s); NCCL needs one GPU per rank");
  return local_rank;
}

namespace nccl {

NcclBackend::~NcclBackend() {
  if (group_open_) {
    // An operation's calls without their fence (the runtime fences every operation it begins,
    // and a failure aborts on the owner thread, which ends the group: this is a bug). Only the
    // owner can end the group (NCCL's group state is thread-local) or unlock comm_mu_, which
    // every later step here needs: from another thread the shutdown could only hang.
    if (group_owner_ != std::this_thread::get_id()) {
      KOLO_LOG_ERROR("nccl: the backend of cuda:"
                     << device_ << " is destroyed on a thread that does not own its open NCCL "
                     << "group (an operation without its fence); stopping the process");
      std::abort();
    }
    fail(Status::Aborted("nccl shutdown: an operation's collectives were never fenced"));
  }
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
  // The communicator is gone: nothing enqueues work that uses them any more.
  free_retired();
  if (scratch_) release(scratch_, "the scratch buffer");
  if (stand_in_) release(stand_in_, "the stand-in output");
  if (fusion_) release(fusion_, "the fusion buffer");
  if (empty_) kept_.push_back(empty_);  // cudaMalloc'd: freed with the kept ones below
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
    if (q == cudaSuccess) free_kept();
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
  KOLO_RETURN_IF_ERROR(cuda(cudaMalloc(&empty_, kEmptyBufferBytes),
                            me + ": allocating the stand-in for empty buffers"));

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
  KOLO_RETURN_IF_ERROR(
      cuda(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device_),
           me + ": reading its multiprocessor count"));
  KOLO_RETURN_IF_ERROR(agree_on_pools(me));
  watchdog_ = std::thread([this] { watchdog(); });
  return Status::Ok();
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
    Status st = op_failure(what, pending_.failure());
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
  // release the group it holds, so that the abort below does not wait on this thread; not
  // launched and waited for (abort_group()): its peer may be what failed.
  if (group_owner_ == std::this_thread::get_id()) abort_group();
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

}  // namespace nccl

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
  auto backend = std::make_unique<nccl::NcclBackend>(ctx, *device);
  KOLO_RETURN_IF_ERROR(backend->connect(ctx));
  return std::unique_ptr<Backend>(std::move(backend));
}

BackendEntry backend_entry_nccl() {
  BackendEntry entry;
  entry.name = "nccl";
  entry.factory = &make_nccl_backend;
  entry.devices = {DeviceKind::kCuda};
  entry.default_for_cuda = true;  // where each rank of the host has a GPU of its own
  // NCCL is reproducible only for one fixed configuration (ranks, GPUs, topology, version,
  // buffer layout: fusion changes it): KOLO_DETERMINISTIC=1 is refused at init.
  entry.rank_order = false;
  return entry;
}

}  // namespace kolo

// NcclBackend's collectives (nccl_backend_impl.h): each one outside an operation is its own
// group, settled, and waited for (Backend's blocking contract); inside one, it is recorded into
// the operation's group, which fence() launches.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <optional>
#include <string>
#include <vector>

#include "backends/nccl/nccl_backend_impl.h"
#include "backends/nccl/nccl_kernels.h"
#include "backends/nccl/nccl_plan.h"
#include "kolo/units.h"

namespace kolo::nccl {

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

Status NcclBackend::map(void* dst, const void* src, int64_t n, DataType dtype, double mul,
                        double div, const std::string& what) {
  if (mul == 1.0 && div == 1.0) {
    if (dst == src || n == 0) return Status::Ok();
    return cuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dtype),
                                cudaMemcpyDeviceToDevice, stream_),
                what + ": copy");
  }
  return launch([&] { return map_on_stream(dst, src, n, kernel_type(dtype), mul, div, stream_); },
                what + (div == 1.0 ? ": scale kernel" : ": average kernel"));
}

Status NcclBackend::copy_out(const std::string& what) {
  if (post_copies_.empty()) return Status::Ok();
  Status st = launch(
      [&] {
        return batched_copy_on_stream(post_copies_.data(),
                                      static_cast<int64_t>(post_copies_.size()), stream_,
                                      multiprocessors_);
      },
      what + ": copy out of the fusion buffer");
  post_copies_.clear();
  return st;
}

Status NcclBackend::finish_reduction(void* data, int64_t n, DataType dtype,
                                     const Reduction& reduction, const std::string& what) {
  if (n == 0) return Status::Ok();
  // Two passes, as ops::finish_reduction makes them: one fused x * post / size would round
  // once where the host rounds twice.
  // No allocation per tensor: queued into post_maps_ (reused) or run at once.
  auto pass = [&](double mul, double div) {
    if (!group_open_) return map(data, data, n, dtype, mul, div, what);
    post_maps_.push_back({data, n, dtype, mul, div, what});
    return Status::Ok();
  };
  if (reduction.op == ReduceOp::kAverage && size_ > 1)
    KOLO_RETURN_IF_ERROR(pass(1.0, static_cast<double>(size_)));
  if (reduction.postscale != 1.0) KOLO_RETURN_IF_ERROR(pass(reduction.postscale, 1.0));
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

Status NcclBackend::do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                                 const Reduction& reduction) {
  const std::string what = "nccl allreduce";
  KOLO_RETURN_IF_ERROR(int16_reduction_unsupported(dtype, what));
  if (plan_allreduce(count).empty) return nothing_to_move(what);
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("allreduce", guard));
  KOLO_RETURN_IF_ERROR(reduce(input, output, count, dtype, reduction, what));
  return finish_call(what);
}

Status NcclBackend::reduce(const void* input, void* output, int64_t count, DataType dtype,
                           const Reduction& reduction, const std::string& what) {
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
                             static_cast<ncclDataType_t>(nccl_dtype(dtype)),
                             static_cast<ncclRedOp_t>(nccl_op(reduction.op)), c, stream_);
      },
      what));
  return finish_reduction(output, count, dtype, reduction, what);
}

Status NcclBackend::do_allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                        const Reduction& reduction) {
  if (pieces.size() == 1)
    return do_allreduce(pieces[0].input, pieces[0].output, pieces[0].count, dtype, reduction);
  const std::string what = "nccl allreduce of " + std::to_string(pieces.size()) + " tensors";
  KOLO_RETURN_IF_ERROR(int16_reduction_unsupported(dtype, what));
  // Empty pieces are skipped below (no copy, no space in the buffer); all of them: no call.
  if (plan_allreduce_pieces(pieces).empty) return nothing_to_move(what);
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("allreduce", guard));
  // Every piece starts 16-byte aligned in the buffer, so that the batched copy moves 16-byte
  // words for each one whatever the sizes before it (an fp16 tensor of an odd count would
  // misalign every later piece). The padding depends on the cut, which is every rank's same
  // (Note [Allreduce pieces]); the gaps are reduced with the rest and never read. 16 is a
  // multiple of every element size, so the padded total is a whole count.
  constexpr size_t kPieceAlign = 16;
  auto aligned = [](size_t offset) {
    return (offset + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
  };
  const size_t es = dtype_size(dtype);
  size_t end = 0;
  for (const AllreducePiece& p : pieces)
    if (p.count > 0) end = aligned(end) + static_cast<size_t>(p.count) * es;
  const auto total = static_cast<int64_t>(end / es);
  KOLO_ASSIGN_OR_RETURN(void* buffer,
                        grow(fusion_, fusion_bytes_, end, what + ": the fusion buffer"));
  auto* fused = static_cast<char*>(buffer);
  // In now, before the group's NCCL kernels; out after them (close_group), or now outside an
  // operation, where the allreduce was queued at once.
  copies_in_.clear();
  copies_out_.clear();
  size_t offset = 0;
  for (const AllreducePiece& p : pieces) {
    if (p.count == 0) continue;
    offset = aligned(offset);
    const auto bytes = static_cast<int64_t>(static_cast<size_t>(p.count) * es);
    copies_in_.push_back({p.input, fused + offset, bytes});
    copies_out_.push_back({fused + offset, p.output, bytes});
    offset += static_cast<size_t>(bytes);
  }
  KOLO_RETURN_IF_ERROR(launch(
      [&] {
        return batched_copy_on_stream(copies_in_.data(), static_cast<int64_t>(copies_in_.size()),
                                      stream_, multiprocessors_);
      },
      what + ": copy into the fusion buffer"));
  KOLO_RETURN_IF_ERROR(reduce(fused, fused, total, dtype, reduction, what));
  // Only now: a call that failed on the way leaves no copy out behind for the fence.
  post_copies_.insert(post_copies_.end(), copies_out_.begin(), copies_out_.end());
  if (!group_open_) KOLO_RETURN_IF_ERROR(copy_out(what));
  return finish_call(what);
}

Status NcclBackend::exchange(const void* input, void* output, DataType dtype,
                             const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts, bool same_input,
                             const std::string& what) {
  const size_t esize = dtype_size(dtype);
  const auto dt = static_cast<ncclDataType_t>(nccl_dtype(dtype));
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
  return own_group ? end_own_group(st, what) : st;
}

Status NcclBackend::do_allgather(const void* input, void* output, DataType dtype,
                                 const std::vector<int64_t>& counts) {
  const std::string what = "nccl allgather";
  const RankPart part = plan_allgather(counts, rank_);
  if (part.empty) return nothing_to_move(what);
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("allgather", guard));
  // This rank's block may be empty while the others' are not: never a null pointer to NCCL.
  input = buffer_or<const void>(input, part.input, empty_);
  if (part.equal) {
    // ncclAllGather is in place when input is this rank's slot of output.
    KOLO_RETURN_IF_ERROR(nccl_call(
        [&](ncclComm_t c) {
          return ncclAllGather(input, output, static_cast<size_t>(counts[0]),
                               static_cast<ncclDataType_t>(nccl_dtype(dtype)), c, stream_);
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
  if (plan_allreduce(count).empty) return nothing_to_move(what);
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("broadcast", guard));
  KOLO_RETURN_IF_ERROR(nccl_call(
      [&](ncclComm_t c) {
        return ncclBroadcast(data, data, static_cast<size_t>(count),
                             static_cast<ncclDataType_t>(nccl_dtype(dtype)), root, c, stream_);
      },
      what));
  return finish_call(what);
}

Status NcclBackend::do_alltoall(const void* input, void* output, DataType dtype,
                                const std::vector<int64_t>& send_counts,
                                const std::vector<int64_t>& recv_counts) {
  const std::string what = "nccl alltoall";
  const RankPart part = plan_alltoall(send_counts, recv_counts);
  if (part.empty) return nothing_to_move(what);
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("alltoall", guard));
  input = buffer_or<const void>(input, part.input, empty_);
  output = buffer_or(output, part.output, empty_);
  KOLO_RETURN_IF_ERROR(
      exchange(input, output, dtype, send_counts, recv_counts, /*same_input=*/false, what));
  return finish_call(what);
}

Status NcclBackend::do_reducescatter(const void* input, void* output, DataType dtype,
                                     const Reduction& reduction,
                                     const std::vector<int64_t>& counts) {
  const std::string what = "nccl reducescatter";
  KOLO_RETURN_IF_ERROR(int16_reduction_unsupported(dtype, what));
  const RankPart part = plan_reducescatter(counts, rank_);
  if (part.empty) return nothing_to_move(what);
  std::optional<DeviceGuard> guard;
  KOLO_RETURN_IF_ERROR(enter("reducescatter", guard));
  // This rank's block may be empty while the others' are not: its ncclReduce recvbuffs (a
  // non-root's is never written) get the stand-in, never null.
  output = buffer_or(output, part.output, empty_);
  const size_t esize = dtype_size(dtype);
  const int64_t total = part.input;
  const void* src = input;
  if (reduction.prescale != 1.0) {
    KOLO_ASSIGN_OR_RETURN(void* scaled, scratch(static_cast<size_t>(total) * esize));
    KOLO_RETURN_IF_ERROR(map(scaled, input, total, dtype, reduction.prescale, 1.0, what));
    src = scaled;
  }
  const auto dt = static_cast<ncclDataType_t>(nccl_dtype(dtype));
  const auto op = static_cast<ncclRedOp_t>(nccl_op(reduction.op));
  if (part.equal) {
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
    KOLO_RETURN_IF_ERROR(own_group ? end_own_group(st, what) : st);
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

}  // namespace kolo::nccl

// The nccl backend: Kolo's collectives on CUDA tensors with NCCL, on one communicator per
// process (rank r of the job is rank r of the communicator, on gpu_of_local_rank(): the local
// rank's GPU, or the only one the process sees).
//
// Bootstrap: rank 0 calls ncclGetUniqueId and publishes it in the rendezvous store under
// `<store_prefix>/nccl/id`; the other ranks read it (within connect_timeout) and every rank
// calls ncclCommInitRankConfig with blocking = 0, polling ncclCommGetAsyncError until the
// communicator is ready, so that a rank that never joins ends in Timeout, never in a hang.
// A one-rank group needs no store.
//
// Data path (DeviceBackend's protocol, backends/device_backend.h): the collectives run on this
// backend's non-blocking stream for the device, after cudaStreamWaitEvent on each tensor's
// ready event (or on an event recorded on the legacy default stream when there is none); the
// collectives of one operation are one NCCL group, launched and settled once at fence(); the
// pre- and post-scale of an allreduce are device kernels on the same stream (nccl_kernels.h),
// the post-scale queued after the group; an average is an NCCL sum and a division kernel
// (ncclAvg's results are not the CPU backends', nccl_errors.h). Allgather with equal counts is
// ncclAllGather; with per-rank counts, and alltoall, it is grouped ncclSend/ncclRecv (exactly the
// bytes each rank has, no padded copy and no compaction pass; padding to the largest count would
// move size * max bytes). A reducescatter with equal counts is ncclReduceScatter, with per-rank
// counts a group of ncclReduce (one per rank's block). float16 and bfloat16 are NCCL types.
//
// Device fusion buffer: a fused batch of CUDA tensors is one allreduce_pieces call (Note
// [Allreduce pieces] in backends/backend.h: every rank passes the same cut). Batched copy
// kernels copy the tensors into one device buffer, each piece 16-byte aligned, then one
// ncclAllReduce and the scale kernels run on it and batched copy kernels copy the results out.
// The buffer holds the largest fused batch so far (up to KOLO_FUSION_THRESHOLD plus one tensor,
// and the padding), grows with cudaMallocAsync on the backend's stream and is held until the
// backend is destroyed. Only where every rank's GPU has memory pools (agreed at connect, one
// NCCL min): without them has_allreduce_pieces() is false, the executor calls once per
// tensor, and the scratch and stand-in buffers are cudaMalloc'd and freed at shutdown.
//
// Empty tensors (Note [Empty collectives] in nccl_plan.h): a collective with nothing to move on
// any rank returns OK without NCCL, the communicator or the stream; where only this rank's part
// is empty, NCCL gets a small stand-in device buffer of the backend's instead of a null pointer.
//
// Completion: fence() records an event; the backend's watchdog thread polls it with
// cudaEventQuery (no host thread ever blocks on the GPU), polls ncclCommGetAsyncError, and
// aborts the communicator (ncclCommAbort) when NCCL reports an error, when the oldest pending
// operation has run longer than op_timeout (KOLO_OP_TIMEOUT), when an event cannot be
// recorded, or when abort() is called. The abort closes PendingOps first (no operation
// completes OK after it began), aborts the communicator, then fails every pending operation
// with the first reason (pending_ops.h). An abort of the backend's own (not abort(): the
// runtime's peer failure, which the peers know) is published in the store (abort_notice.h);
// a shutdown that waits for GPU work reads the peers' notices, so that a peer's abort after
// the runtimes agreed to shut down costs it a fraction of a second, not KOLO_OP_TIMEOUT.
//
// Errors: Unsupported when the process sees no GPU; InvalidArgument when this host has more
// ranks than its several visible GPUs (NCCL refuses two ranks on one GPU, and says so at init
// when ranks that see one GPU each share it); Timeout when the communicator is not
// ready within connect_timeout; NCCL and CUDA errors as nccl_errors.h maps them, naming the
// operation and tensor.
// Thread-safety: DeviceBackend's.
#pragma once

#include <memory>

#include "backends/device_backend.h"
#include "backends/registry.h"
#include "kolo/status.h"

namespace kolo {

// The GPU (an ordinal among the visible ones) of the rank `local_rank` of `local_size` on its
// host, for a device backend's factory: with exactly one visible GPU, that one (each process was
// given its own through CUDA_VISIBLE_DEVICES; ranks that share it are refused by NCCL at init,
// naming the duplicate GPU); with several, the local rank's own. Unsupported when none is visible;
// InvalidArgument when the host has more ranks than its several visible GPUs.
Result<int> gpu_of_local_rank(int local_rank, int local_size, int visible_gpus);

// This rank's nccl backend, its communicator ready.
Result<std::unique_ptr<Backend>> make_nccl_backend(const BackendContext& context);

// The registry's entry: CUDA buffers only; no launcher of its own.
BackendEntry backend_entry_nccl();

}  // namespace kolo

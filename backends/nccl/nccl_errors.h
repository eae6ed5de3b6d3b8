// The translation of NCCL and CUDA results, types and reductions into Kolo's terms (and of
// Kolo's dtypes into the kernels'). Pure
// functions: none of them touches a device, so they are unit-tested on machines without a GPU.
// Thread-safety: all of them may be called from any thread.
#pragma once

#include <string>

#include "backends/nccl/nccl_kernels.h"
#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::nccl {

// `result` is an ncclResult_t, `detail` ncclGetLastError's text (may be empty). The Status
// reads "<what>: NCCL error <name>: <ncclGetErrorString>[ (<detail>)]" with the code:
//   ncclInvalidArgument, ncclInvalidUsage -> InvalidArgument (a bad call: our bug or the caller's)
//   ncclRemoteError                       -> PeerFailure (a peer died or its network failed)
//   ncclSystemError                       -> IoError (sockets, shared memory, the OS)
//   ncclUnhandledCudaError, ncclInternalError and anything else -> Internal
// ncclSuccess gives OK. `what` names the operation and the tensor, e.g. "allreduce 'grad/w'".
Status nccl_status(int result, const std::string& what, const std::string& detail = "");

// `err` is a cudaError_t. "<what>: CUDA error <cudaGetErrorName>: <cudaGetErrorString>" with:
//   cudaErrorInvalidValue, cudaErrorInvalidResourceHandle (an event that is not an event),
//   cudaErrorInvalidDevice -> InvalidArgument (the call was refused, nothing else is harmed)
//   everything else -> Internal, among them cudaErrorIllegalAddress (a kernel touched memory
//     it must not: sticky, the process's CUDA context is unusable from then on; bad pointers
//     are caught before any launch, by wait_ready).  cudaSuccess gives OK.
Status cuda_status(int err, const std::string& what);

// `err` (a cudaError_t) was already pending on the thread before a kernel launch of `what`:
// someone's unchecked CUDA call, not the launch's. Internal, "<what>: not launched: CUDA error
// <name>: <string> was already pending on this thread (an earlier call's, left unchecked; it
// stays pending for that call's owner)".
Status pending_cuda_status(int err, const std::string& what);

// The ncclDataType_t of a dtype; every Kolo dtype has one (float16 and bfloat16 natively).
// NCCL has no 16-bit integer: int16 maps to ncclFloat16, another 2-byte type, which is exact
// for the data movements (broadcast, allgather, alltoall copy bits); reductions of int16 are
// refused before they get here (int16_reduction_unsupported).
int nccl_dtype(DataType dtype);
// The element type of the device kernels (nccl_kernels.h) for a dtype; not called for int16
// (the kernels scale reductions only).
ScaleType kernel_type(DataType dtype);
// Unsupported naming `what` when `dtype` is int16, which NCCL cannot reduce; OK otherwise.
Status int16_reduction_unsupported(DataType dtype, const std::string& what);

// The ncclRedOp_t of an op. kAverage maps to ncclSum: the backend divides the sum afterwards
// as the host does (ops::finish_reduction), because ncclAvg is not the CPU backends' average:
// for floats it premultiplies by 1/n (an evenly dividing sum is then not exact), for integers
// it divides in integer arithmetic (int64 beyond 2^53 differs from the host's double).
int nccl_op(ReduceOp op);

}  // namespace kolo::nccl

// The device kernels of the nccl backend: the pre- and post-scale of a reduction, an
// average's division, and the batched copy in and out of the device fusion buffer. One .cu
// translation unit (nvcc time on a 2-core CI machine is what keeps it to one).
// Thread-safety: stateless; each call queues one kernel on `stream`.
#pragma once

#include <cstdint>

namespace kolo::nccl {

// The element types the kernels know: kolo::DataType's, restated because this header is
// compiled by nvcc in C++17 and kolo/types.h is C++20 (kernel_type() in nccl_errors.cc maps).
enum class ScaleType { kUInt8, kInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64 };

// dst[i] = src[i] * mul / div for n elements of type, queued on `stream` (a cudaStream_t);
// dst == src is in place. The arithmetic is ops::scale's and ops::divide's on the host (one
// map, ops/reduce.cc), so that the GPU path's results are the CPU backends' bit for bit: float
// and float64 in their own precision, float16 and bfloat16 widened to float and rounded once
// (to nearest even), integers in double and truncated toward zero. Except out of range: an
// integer whose scaled value does not fit its type (uint8 150 * 2) is unspecified, and host
// and device differ (C++ leaves the conversion undefined; x86 wraps, the GPU saturates). A
// scale is div = 1, a division mul = 1. Returns the cudaError_t of the launch (0 on success).
int map_on_stream(void* dst, const void* src, int64_t n, ScaleType type, double mul, double div,
                  void* stream);

// One piece of a batched copy: `bytes` bytes from src to dst (device memory, no overlap).
struct CopySegment {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
};

// Queues the copy of every segment on `stream` in one kernel launch per kBatchedCopyMax
// segments (passed by value as the kernel's parameters: no device-side table to allocate or
// upload), instead of one cudaMemcpyAsync per tensor, whose launch cost dominates for the many
// small tensors of a fused batch (Horovod's batched memcpy does the same). The segments are cut
// into 16 KiB chunks shared out among at most 8 blocks per multiprocessor (`multiprocessors`:
// the device's cudaDevAttrMultiProcessorCount, which the caller caches; below 1 counts as 1), so
// one large tensor gets the whole GPU. A chunk moves 16-byte words when both its addresses are
// 16-byte aligned (the device fusion buffer's pieces are: nccl pads them), else 4, 2 or 1, and
// its tail byte by byte. Returns the cudaError_t of the first failed launch (0 on success).
inline constexpr int kBatchedCopyMax = 64;
int batched_copy_on_stream(const CopySegment* segments, int64_t n, void* stream,
                           int multiprocessors);

}  // namespace kolo::nccl

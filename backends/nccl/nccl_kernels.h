// The device kernels of the nccl backend: the pre- and post-scale of a reduction and an
// average's division. One .cu translation unit (nvcc time on a 2-core CI machine is what keeps
// it to one).
// Thread-safety: stateless; each call queues one kernel on `stream`.
#pragma once

#include <cstdint>

namespace kolo::nccl {

// The element types the kernels know: kolo::DataType's, restated because this header is
// compiled by nvcc in C++17 and kolo/types.h is C++20 (scale_type() in nccl_backend.cc maps).
enum class ScaleType { kUInt8, kInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64 };

// dst[i] = src[i] * mul / div for n elements of type, queued on `stream` (a cudaStream_t);
// dst == src is in place. The arithmetic is ops::scale's and ops::divide's on the host (one
// map, ops/reduce.cc), so that the GPU path's results are the CPU backends' bit for bit: float
// and float64 in their own precision, float16 and bfloat16 widened to float and rounded once
// (to nearest even), integers in double and truncated toward zero. A scale is div = 1, a
// division mul = 1. Returns the cudaError_t of the launch (0 on success).
int map_on_stream(void* dst, const void* src, int64_t n, ScaleType type, double mul, double div,
                  void* stream);

}  // namespace kolo::nccl

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/nccl/nccl_kernels.h"

namespace kolo::nccl {

namespace {

// x * mul / div as ops' native_map and half_map compute it.
template <typename T>
struct Map {
  __device__ static T apply(T x, double mul, double div) {
    return static_cast<T>(static_cast<double>(x) * mul / div);  // integers: truncated
  }
};
template <>
struct Map<float> {
  __device__ static float apply(float x, double mul, double div) {
    return x * static_cast<float>(mul) / static_cast<float>(div);
  }
};
template <>
struct Map<double> {
  __device__ static double apply(double x, double mul, double div) { return x * mul / div; }
};
template <>
struct Map<__half> {
  __device__ static __half apply(__half x, double mul, double div) {
    return __float2half_rn(__half2float(x) * static_cast<float>(mul) / static_cast<float>(div));
  }
};
template <>
struct Map<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, double mul, double div) {
    return __float2bfloat16_rn(__bfloat162float(x) * static_cast<float>(mul) /
                               static_cast<float>(div));
  }
};

template <typename T>
__global__ void map_kernel(T* dst, const T* src, int64_t n, double mul, double div) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = Map<T>::apply(src[i], mul, div);
}

template <typename T>
int launch(void* dst, const void* src, int64_t n, double mul, double div, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Grid-stride loop: enough blocks to fill an H100 several times over, no more.
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 4096);
  map_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), n, mul, div);
  return static_cast<int>(cudaGetLastError());
}

// The kernel's parameters: up to kBatchedCopyMax segments by value (1.5 KiB, well inside
// the 4 KiB that every CUDA version accepts).
struct CopyBatch {
  const char* src[kBatchedCopyMax];
  char* dst[kBatchedCopyMax];
  int64_t bytes[kBatchedCopyMax];
};

template <typename Word>
__device__ void copy_words(const char* src, char* dst, int64_t bytes) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(Word));
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const Word* s = reinterpret_cast<const Word*>(src);
  Word* d = reinterpret_cast<Word*>(dst);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    d[i] = s[i];
}

// blockIdx.y is the segment; the blocks along x share it in a grid-stride loop.
__global__ void batched_copy_kernel(CopyBatch batch) {
  const int k = static_cast<int>(blockIdx.y);
  const char* src = batch.src[k];
  char* dst = batch.dst[k];
  const int64_t bytes = batch.bytes[k];
  const auto bits = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                    static_cast<uintptr_t>(bytes);
  if (bits % sizeof(uint4) == 0) {
    copy_words<uint4>(src, dst, bytes);
  } else if (bits % sizeof(uint32_t) == 0) {
    copy_words<uint32_t>(src, dst, bytes);
  } else {
    copy_words<char>(src, dst, bytes);
  }
}

}  // namespace

int batched_copy_on_stream(const CopySegment* segments, int64_t n, void* stream) {
  constexpr int kThreads = 256;
  auto s = static_cast<cudaStream_t>(stream);
  for (int64_t first = 0; first < n; first += kBatchedCopyMax) {
    const int count = static_cast<int>(std::min<int64_t>(kBatchedCopyMax, n - first));
    CopyBatch batch{};
    int64_t largest = 0;
    for (int k = 0; k < count; ++k) {
      const CopySegment& seg = segments[first + k];
      batch.src[k] = static_cast<const char*>(seg.src);
      batch.dst[k] = static_cast<char*>(seg.dst);
      batch.bytes[k] = seg.bytes;
      largest = std::max(largest, seg.bytes);
    }
    if (largest == 0) continue;
    // Enough blocks per segment for its largest member at 16 bytes a thread, at most 64: the
    // y dimension already multiplies them by the segment count.
    const int64_t per_thread = static_cast<int64_t>(sizeof(uint4)) * kThreads;
    const auto blocks = static_cast<unsigned>(
        std::min<int64_t>((largest + per_thread - 1) / per_thread, 64));
    batched_copy_kernel<<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0, s>>>(batch);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  return 0;
}

int map_on_stream(void* dst, const void* src, int64_t n, ScaleType type, double mul, double div,
                  void* stream) {
  if (n <= 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case ScaleType::kUInt8:
      return launch<uint8_t>(dst, src, n, mul, div, s);
    case ScaleType::kInt8:
      return launch<int8_t>(dst, src, n, mul, div, s);
    case ScaleType::kInt32:
      return launch<int32_t>(dst, src, n, mul, div, s);
    case ScaleType::kInt64:
      return launch<int64_t>(dst, src, n, mul, div, s);
    case ScaleType::kFloat16:
      return launch<__half>(dst, src, n, mul, div, s);
    case ScaleType::kBFloat16:
      return launch<__nv_bfloat16>(dst, src, n, mul, div, s);
    case ScaleType::kFloat32:
      return launch<float>(dst, src, n, mul, div, s);
    case ScaleType::kFloat64:
      return launch<double>(dst, src, n, mul, div, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace kolo::nccl

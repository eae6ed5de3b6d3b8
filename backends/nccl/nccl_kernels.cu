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
    // Integers: truncated; out of range, saturated (cvt.rzi), where the host wraps (unspecified:
    // nccl_kernels.h).
    return static_cast<T>(static_cast<double>(x) * mul / div);
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

// The kernel's parameters: up to kBatchedCopyMax segments by value (2 KiB, inside the 4 KiB
// that every CUDA version accepts), each cut into chunks of kCopyChunk bytes: segment k owns
// chunks [first_chunk[k], first_chunk[k + 1]).
constexpr int kCopyThreads = 256;
constexpr int64_t kCopyChunk = 4 * kCopyThreads * 16;  // four 16-byte words a thread: one round
struct CopyBatch {
  const char* src[kBatchedCopyMax];
  char* dst[kBatchedCopyMax];
  int64_t bytes[kBatchedCopyMax];
  int64_t first_chunk[kBatchedCopyMax + 1];
  int count;
};

// The block's threads copy len / sizeof(Word) words; returns the bytes copied. Four loads in
// flight per thread before their stores (a full chunk of 16-byte words is one such round):
// one load at a time would leave the copy latency-bound. Segments never overlap (restrict).
template <typename Word>
__device__ int64_t copy_words(const char* src, char* dst, int64_t len) {
  constexpr int kInFlight = 4;
  const int64_t n = len / static_cast<int64_t>(sizeof(Word));
  const Word* __restrict__ s = reinterpret_cast<const Word*>(src);
  Word* __restrict__ d = reinterpret_cast<Word*>(dst);
  const int64_t step = blockDim.x;
  int64_t i = threadIdx.x;
  for (; i + (kInFlight - 1) * step < n; i += kInFlight * step) {
    Word v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) v[j] = s[i + j * step];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) d[i + j * step] = v[j];
  }
  for (; i < n; i += step) d[i] = s[i];
  return n * static_cast<int64_t>(sizeof(Word));
}

// One chunk: the widest word both addresses allow (the size does not matter: the tail that
// does not fill a word is copied byte by byte), so that an fp16 tensor of an odd count still
// moves 16 bytes a load.
__device__ void copy_chunk(const char* src, char* dst, int64_t len) {
  const auto addr = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  int64_t done = 0;
  if (addr % sizeof(uint4) == 0)
    done = copy_words<uint4>(src, dst, len);
  else if (addr % sizeof(uint32_t) == 0)
    done = copy_words<uint32_t>(src, dst, len);
  else if (addr % sizeof(uint16_t) == 0)
    done = copy_words<uint16_t>(src, dst, len);
  for (int64_t i = done + threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
}

// A grid-stride loop over the batch's chunks: every block copies whole chunks, so a large
// segment gets as many blocks as its size asks for, however many small ones share the launch.
__global__ void batched_copy_kernel(CopyBatch batch) {
  const int64_t chunks = batch.first_chunk[batch.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    // The segment of chunk c: the last k with first_chunk[k] <= c (never an empty one: its
    // successor starts at the same chunk).
    int lo = 0, hi = batch.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (batch.first_chunk[mid] <= c)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t begin = (c - batch.first_chunk[lo]) * kCopyChunk;
    const int64_t len = batch.bytes[lo] - begin < kCopyChunk ? batch.bytes[lo] - begin : kCopyChunk;
    copy_chunk(batch.src[lo] + begin, batch.dst[lo] + begin, len);
  }
}

}  // namespace

int batched_copy_on_stream(const CopySegment* segments, int64_t n, void* stream,
                           int multiprocessors) {
  // Blocks of 256 threads, 8 per SM: a full SM on every GPU since Volta; more only queue.
  constexpr int kBlocksPerMultiprocessor = 8;
  auto s = static_cast<cudaStream_t>(stream);
  for (int64_t first = 0; first < n; first += kBatchedCopyMax) {
    CopyBatch batch{};
    batch.count = static_cast<int>(std::min<int64_t>(kBatchedCopyMax, n - first));
    int64_t chunks = 0;
    for (int k = 0; k < batch.count; ++k) {
      const CopySegment& seg = segments[first + k];
      batch.src[k] = static_cast<const char*>(seg.src);
      batch.dst[k] = static_cast<char*>(seg.dst);
      batch.bytes[k] = seg.bytes;
      batch.first_chunk[k] = chunks;
      chunks += (std::max<int64_t>(seg.bytes, 0) + kCopyChunk - 1) / kCopyChunk;
    }
    batch.first_chunk[batch.count] = chunks;
    if (chunks == 0) continue;
    const int64_t most =
        static_cast<int64_t>(std::max(multiprocessors, 1)) * kBlocksPerMultiprocessor;
    const auto blocks = static_cast<unsigned>(std::min(chunks, most));
    batched_copy_kernel<<<blocks, kCopyThreads, 0, s>>>(batch);
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

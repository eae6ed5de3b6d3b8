#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/nccl/nccl_kernels.h"

namespace kolo::nccl {

namespace {

template <typename T>
struct Scale {
  __device__ static T apply(T x, double f) { return static_cast<T>(static_cast<double>(x) * f); }
};
template <>
struct Scale<float> {
  __device__ static float apply(float x, double f) { return x * static_cast<float>(f); }
};
template <>
struct Scale<__half> {
  __device__ static __half apply(__half x, double f) {
    return __float2half(__half2float(x) * static_cast<float>(f));
  }
};
template <>
struct Scale<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, double f) {
    return __float2bfloat16(__bfloat162float(x) * static_cast<float>(f));
  }
};

template <typename T>
__global__ void scale_kernel(T* dst, const T* src, int64_t n, double factor) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = Scale<T>::apply(src[i], factor);
}

template <typename T>
int launch(void* dst, const void* src, int64_t n, double factor, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Grid-stride loop: enough blocks to fill an H100 several times over, no more.
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 4096);
  scale_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), n, factor);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int scale_on_stream(void* dst, const void* src, int64_t n, ScaleType type, double factor,
                    void* stream) {
  if (n <= 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case ScaleType::kUInt8:
      return launch<uint8_t>(dst, src, n, factor, s);
    case ScaleType::kInt8:
      return launch<int8_t>(dst, src, n, factor, s);
    case ScaleType::kInt32:
      return launch<int32_t>(dst, src, n, factor, s);
    case ScaleType::kInt64:
      return launch<int64_t>(dst, src, n, factor, s);
    case ScaleType::kFloat16:
      return launch<__half>(dst, src, n, factor, s);
    case ScaleType::kBFloat16:
      return launch<__nv_bfloat16>(dst, src, n, factor, s);
    case ScaleType::kFloat32:
      return launch<float>(dst, src, n, factor, s);
    case ScaleType::kFloat64:
      return launch<double>(dst, src, n, factor, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace kolo::nccl

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

}  // namespace

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

// nccl_support.h for builds without NCCL: no backend takes CUDA tensors.
#include "bench/nccl_support.h"

namespace kolo::bench {

Result<DeviceBuffer> device_ones(size_t, int, int) {
  return Status::Unsupported("kolo-bench: this build has no NCCL, so no GPU buffers");
}

Result<std::unique_ptr<GpuBench>> make_gpu_bench(const BackendContext&, size_t) {
  return Status::Unsupported("kolo-bench: this build has no NCCL, so no GPU buffers");
}

}  // namespace kolo::bench

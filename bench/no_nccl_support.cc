// nccl_support.h for builds without NCCL: no backend takes CUDA tensors.
#include "bench/nccl_support.h"

namespace kolo::bench {

Result<std::shared_ptr<void>> device_ones(size_t, int) {
  return Status::Unsupported("kolo-bench: this build has no NCCL, so no GPU buffers");
}

Result<std::unique_ptr<GpuBench>> make_gpu_bench(const BackendContext&, size_t) {
  return Status::Unsupported("kolo-bench: this build has no NCCL, so no GPU buffers");
}

}  // namespace kolo::bench

// The benchmark on GPU buffers (backends that take CUDA tensors: nccl): device memory for the
// case, and raw NCCL on the same buffers as the reference each Kolo row is compared with, the
// way mpi_support.h compares with raw MPI. A build without NCCL swaps in no_nccl_support.cc.
#pragma once

#include <cstddef>
#include <memory>

#include "backends/registry.h"
#include "bench/bench_case.h"
#include "kolo/status.h"

namespace kolo::bench {

class GpuBench {
 public:
  virtual ~GpuBench() = default;
  // Device buffers of the size given to make_gpu_bench, on GPU local_rank.
  virtual void* input() = 0;
  virtual void* output() = 0;
  virtual Status upload(const void* host_input, size_t bytes) = 0;
  virtual Status download(void* host_output, size_t bytes) = 0;
  // One raw NCCL call of the case on its own communicator, waited for (as Backend's blocking
  // calls are): ncclAllReduce, ncclAllGather, ncclBroadcast, grouped ncclSend/ncclRecv,
  // ncclReduceScatter.
  virtual Status run_raw(const BenchCase& c) = 0;
  virtual Status barrier() = 0;
  // Over every rank, through the raw communicator (the Kolo backend takes no host memory).
  virtual Result<double> max_over_ranks(double value) = 0;
  virtual Result<int64_t> sum_over_ranks(int64_t value) = 0;
};

// `bytes` of device memory filled with float 1.0 on the GPU the nccl backend uses for local
// rank `local_rank` of `local_size` (gpu_of_local_rank: the one visible GPU, or the local
// rank's), freed when the last copy of `data` goes (kolo-bench fusion --device cuda).
// Unsupported in a build without NCCL.
struct DeviceBuffer {
  std::shared_ptr<void> data;
  int device = 0;  // the CUDA ordinal, for the tensors' Device
};
Result<DeviceBuffer> device_ones(size_t bytes, int local_rank, int local_size);

// Buffers of `bytes` each and a raw communicator (unique id through the store under
// "<ctx.store_prefix>/raw-nccl"). Unsupported in a build without NCCL.
Result<std::unique_ptr<GpuBench>> make_gpu_bench(const BackendContext& ctx, size_t bytes);

}  // namespace kolo::bench

// nccl_support.h with CUDA and NCCL.
#include "bench/nccl_support.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/nccl/nccl_backend.h"
#include "backends/nccl/nccl_errors.h"

namespace kolo::bench {

namespace {

using nccl::cuda_status;
using nccl::nccl_status;

class NcclGpuBench final : public GpuBench {
 public:
  ~NcclGpuBench() override {
    if (comm_) ncclCommDestroy(comm_);
    if (scalar_) cudaFree(scalar_);
    if (input_) cudaFree(input_);
    if (output_) cudaFree(output_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init(const BackendContext& ctx, size_t bytes) {
    device_ = ctx.local_rank;
    KOLO_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "kolo-bench: cudaSetDevice"));
    KOLO_RETURN_IF_ERROR(cuda_status(cudaStreamCreate(&stream_), "kolo-bench: stream"));
    KOLO_RETURN_IF_ERROR(cuda_status(cudaMalloc(&input_, bytes), "kolo-bench: input buffer"));
    KOLO_RETURN_IF_ERROR(cuda_status(cudaMalloc(&output_, bytes), "kolo-bench: output buffer"));
    KOLO_RETURN_IF_ERROR(cuda_status(cudaMalloc(&scalar_, 16), "kolo-bench: scalar"));
    KOLO_RETURN_IF_ERROR(cuda_status(cudaMemset(input_, 0, bytes), "kolo-bench: memset"));
    KOLO_RETURN_IF_ERROR(cuda_status(cudaMemset(output_, 0, bytes), "kolo-bench: memset"));
    ncclUniqueId id;
    const std::string key = ctx.store_prefix + "/raw-nccl/id";
    if (ctx.rank == 0) {
      KOLO_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "kolo-bench: ncclGetUniqueId"));
      if (ctx.size > 1)
        KOLO_RETURN_IF_ERROR(ctx.store->set(key, std::string(id.internal, sizeof(id.internal))));
    } else {
      KOLO_ASSIGN_OR_RETURN(std::string v, ctx.store->get(key, ctx.connect_timeout));
      if (v.size() != sizeof(id.internal))
        return Status::InvalidArgument("kolo-bench: bad raw NCCL id in the store");
      std::memcpy(id.internal, v.data(), sizeof(id.internal));
    }
    size_ = ctx.size;
    rank_ = ctx.rank;
    // Blocking init: this is the reference, as plain as NCCL gets.
    return nccl_status(ncclCommInitRank(&comm_, ctx.size, id, ctx.rank),
                       "kolo-bench: ncclCommInitRank");
  }

  void* input() override { return input_; }
  void* output() override { return output_; }
  Status upload(const void* host, size_t bytes) override {
    return cuda_status(cudaMemcpy(input_, host, bytes, cudaMemcpyHostToDevice), "upload");
  }
  Status download(void* host, size_t bytes) override {
    return cuda_status(cudaMemcpy(host, output_, bytes, cudaMemcpyDeviceToHost), "download");
  }

  Status run_raw(const BenchCase& c) override {
    const auto dt = static_cast<ncclDataType_t>(nccl::nccl_dtype(c.dtype));
    const auto op = static_cast<ncclRedOp_t>(nccl::nccl_op(c.op));
    const size_t esize = dtype_size(c.dtype);
    ncclResult_t r = ncclSuccess;
    switch (c.collective) {
      case Collective::kAllreduce:
        r = ncclAllReduce(c.input, c.output, c.count, dt, op, comm_, stream_);
        break;
      case Collective::kAllgather:
        r = ncclAllGather(c.input, c.output, c.block, dt, comm_, stream_);
        break;
      case Collective::kBroadcast:
        r = ncclBroadcast(c.output, c.output, c.count, dt, 0, comm_, stream_);
        break;
      case Collective::kAlltoall:
        ncclGroupStart();
        for (int j = 0; j < size_; ++j) {
          ncclSend(static_cast<const char*>(c.input) + j * c.block * esize, c.block, dt, j, comm_,
                   stream_);
          ncclRecv(static_cast<char*>(c.output) + j * c.block * esize, c.block, dt, j, comm_,
                   stream_);
        }
        r = ncclGroupEnd();
        break;
      case Collective::kReducescatter:
        r = ncclReduceScatter(c.input, c.output, c.block, dt, op, comm_, stream_);
        break;
    }
    KOLO_RETURN_IF_ERROR(nccl_status(r, "kolo-bench: raw NCCL"));
    return cuda_status(cudaStreamSynchronize(stream_), "kolo-bench: raw NCCL");
  }

  Status barrier() override {
    KOLO_RETURN_IF_ERROR(nccl_status(
        ncclAllReduce(scalar_, scalar_, 1, ncclInt32, ncclSum, comm_, stream_), "barrier"));
    return cuda_status(cudaStreamSynchronize(stream_), "barrier");
  }

  Result<double> max_over_ranks(double value) override {
    KOLO_RETURN_IF_ERROR(scalar_reduce(&value, ncclFloat64, ncclMax));
    return value;
  }
  Result<int64_t> sum_over_ranks(int64_t value) override {
    KOLO_RETURN_IF_ERROR(scalar_reduce(&value, ncclInt64, ncclSum));
    return value;
  }

 private:
  Status scalar_reduce(void* value, ncclDataType_t dt, ncclRedOp_t op) {
    KOLO_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(scalar_, value, 8, cudaMemcpyHostToDevice), "scalar"));
    KOLO_RETURN_IF_ERROR(
        nccl_status(ncclAllReduce(scalar_, scalar_, 1, dt, op, comm_, stream_), "scalar"));
    KOLO_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "scalar"));
    return cuda_status(cudaMemcpy(value, scalar_, 8, cudaMemcpyDeviceToHost), "scalar");
  }

  int device_ = 0, rank_ = 0, size_ = 1;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  void* input_ = nullptr;
  void* output_ = nullptr;
  void* scalar_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<GpuBench>> make_gpu_bench(const BackendContext& ctx, size_t bytes) {
  auto b = std::make_unique<NcclGpuBench>();
  KOLO_RETURN_IF_ERROR(b->init(ctx, bytes));
  return std::unique_ptr<GpuBench>(std::move(b));
}

Result<DeviceBuffer> device_ones(size_t bytes, int local_rank, int local_size) {
  int visible = 0;
  KOLO_RETURN_IF_ERROR(cuda_status(cudaGetDeviceCount(&visible), "kolo-bench: cudaGetDeviceCount"));
  KOLO_ASSIGN_OR_RETURN(const int device, gpu_of_local_rank(local_rank, local_size, visible));
  KOLO_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "kolo-bench: cudaSetDevice"));
  void* data = nullptr;
  KOLO_RETURN_IF_ERROR(cuda_status(cudaMalloc(&data, bytes), "kolo-bench: device buffer"));
  std::shared_ptr<void> owned(data, [](void* p) { cudaFree(p); });
  std::vector<float> ones(bytes / sizeof(float), 1.0f);
  KOLO_RETURN_IF_ERROR(cuda_status(
      cudaMemcpy(data, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice),
      "kolo-bench: filling the device buffer"));
  return DeviceBuffer{std::move(owned), device};
}

}  // namespace kolo::bench

// NcclBackend's device memory (nccl_backend_impl.h): the scratch buffer, the stand-in output
// and the device fusion buffer. Stream-ordered (cudaMallocAsync, cudaFreeAsync: no host wait)
// where the job's GPUs have memory pools; plain cudaMalloc elsewhere, the outgrown buffers
// kept until the destructor has seen the stream idle (cudaFree would wait for the whole GPU).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "backends/nccl/nccl_backend_impl.h"
#include "common/logging.h"

namespace kolo::nccl {

Status NcclBackend::agree_on_pools(const std::string& me) {
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device_) != cudaSuccess) {
    (void)cudaGetLastError();  // an old driver that does not know the attribute: no pools
    supported = 0;
  }
  pools_ = supported != 0;
  if (size_ > 1) {
    // has_allreduce_pieces() follows pools_, and the executor's ranks must all take the same
    // branch for a batch: pools only when every rank has them (the minimum over the ranks).
    int32_t* flag = nullptr;
    KOLO_RETURN_IF_ERROR(cuda(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int32_t)),
                              me + ": allocating the memory-pool flag"));
    int32_t value = pools_ ? 1 : 0;
    Status st = cuda(cudaMemcpy(flag, &value, sizeof(value), cudaMemcpyHostToDevice),
                     me + ": the memory-pool flag");
    if (st.ok()) st = do_allreduce(flag, flag, 1, DataType::kInt32, {ReduceOp::kMin, 1.0, 1.0});
    if (st.ok())
      st = cuda(cudaMemcpy(&value, flag, sizeof(value), cudaMemcpyDeviceToHost),
                me + ": the memory-pool flag");
    if (cudaFree(flag) != cudaSuccess) (void)cudaGetLastError();
    KOLO_RETURN_IF_ERROR(st.with_context(me + ": agreeing on memory pools"));
    if (pools_ && value == 0)
      KOLO_LOG_WARNING(me << ": a peer's GPU has no memory pools, so neither does this rank");
    pools_ = value != 0;
  }
  if (!supported)
    KOLO_LOG_WARNING(me << ": no memory pools (cudaDevAttrMemoryPoolsSupported is 0): a fused "
                           "batch of CUDA tensors is one NCCL call per tensor");
  return Status::Ok();
}

Result<void*> NcclBackend::grow(void*& buffer, size_t& capacity, size_t bytes,
                                const std::string& what) {
  if (bytes <= capacity && buffer) return buffer;
  // Stream-ordered, after its last use; inside an open group that use is not queued yet, so
  // the free waits until close_group() launched the group.
  if (buffer) {
    if (group_open_)
      retired_.push_back(buffer);
    else
      release(buffer, "an outgrown buffer");
  }
  buffer = nullptr;
  capacity = 0;
  const size_t want = std::max<size_t>(bytes, 4096);
  KOLO_RETURN_IF_ERROR(
      cuda(pools_ ? cudaMallocAsync(&buffer, want, stream_) : cudaMalloc(&buffer, want),
           what + ": allocating " + std::to_string(want) +
               " bytes of device memory on cuda:" + std::to_string(device_)));
  // Zeroed once: the fusion buffer's padding between pieces is reduced with them and should
  // hold numbers, never whatever the allocation had (a memory checker's reports, NaN payloads).
  if (Status zeroed = cuda(cudaMemsetAsync(buffer, 0, want, stream_), what + ": zeroing it");
      !zeroed.ok()) {
    release(buffer, "a buffer that could not be zeroed");
    buffer = nullptr;
    return zeroed;
  }
  capacity = want;
  return buffer;
}

void NcclBackend::release(void* buffer, const char* what) {
  if (!pools_) {
    kept_.push_back(buffer);
    return;
  }
  const cudaError_t err = cudaFreeAsync(buffer, stream_);
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  KOLO_LOG_WARNING("nccl: freeing " << what << " on cuda:" << device_ << " failed ("
                                    << cudaGetErrorName(err) << ": " << cudaGetErrorString(err)
                                    << "); it is left to the driver");
}

void NcclBackend::free_kept() {
  for (void* b : kept_) {
    const cudaError_t err = cudaFree(b);
    if (err == cudaSuccess) continue;
    (void)cudaGetLastError();
    KOLO_LOG_WARNING("nccl: freeing a buffer on cuda:" << device_ << " failed ("
                                                       << cudaGetErrorName(err) << ")");
  }
  kept_.clear();
}

void NcclBackend::free_retired() {
  for (void* b : retired_) release(b, "an outgrown buffer");
  retired_.clear();
}

Result<void*> NcclBackend::scratch(size_t bytes) {
  return grow(scratch_, scratch_bytes_, bytes, "nccl scratch");
}

Result<void*> NcclBackend::stand_in(size_t bytes, const std::string& what) {
  return grow(stand_in_, stand_in_bytes_, bytes, what + ": a stand-in output");
}

}  // namespace kolo::nccl

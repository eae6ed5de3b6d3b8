// CudaStaging with the CUDA runtime (builds with KOLO_HAVE_CUDA).
#include "coordinator/cuda_staging.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "common/cuda_device_guard.h"

namespace kolo::coord {

namespace {

Status cuda_error(cudaError_t err, const std::string& what) {
  return Status::Internal(what + ": CUDA error " + cudaGetErrorName(err) + ": " +
                          cudaGetErrorString(err));
}

}  // namespace

bool cuda_built() { return true; }

int cuda_device_count() {
  // The driver reads CUDA_VISIBLE_DEVICES once, so the count never changes in a process.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: not sticky, clear it
      n = 0;
    }
    return n;
  }();
  return count;
}

Status check_device(const std::string& what, const std::string& name, const Device& device) {
  if (device.is_cpu()) return Status::Ok();
  const int count = cuda_device_count();
  if (device.index < 0 || device.index >= count)
    return Status::InvalidArgument(what + ": tensor '" + name + "' is on " + device.to_string() +
                                   " but this process sees " + std::to_string(count) +
                                   " CUDA device(s) (valid ordinals: [0, " + std::to_string(count) +
                                   "))");
  return Status::Ok();
}

CudaStaging::~CudaStaging() {
  for (auto& [device, s] : streams_) {
    CudaDeviceGuard guard(device);  // the thread that shuts Kolo down is the user's
    cudaStreamSynchronize(static_cast<cudaStream_t>(s.stream));
    cudaStreamDestroy(static_cast<cudaStream_t>(s.stream));
    if (s.mark) cudaEventDestroy(static_cast<cudaEvent_t>(s.mark));
  }
  for (auto& b : buffers_)
    if (b.data) cudaFreeHost(b.data);
}

Result<void*> CudaStaging::host_buffer(Slot slot, size_t bytes) {
  Buffer& b = buffers_[static_cast<size_t>(slot)];
  if (bytes <= b.capacity && b.data) return b.data;
  // Copies into the old buffer may still be in flight only if the caller skipped
  // synchronize(); staying safe costs nothing on this (rare) growth path.
  KOLO_RETURN_IF_ERROR(synchronize());
  if (b.data) {
    cudaFreeHost(b.data);
    b.data = nullptr;
    b.capacity = 0;
  }
  // Grow geometrically so a slowly growing batch does not re-pin every step.
  size_t capacity = std::max<size_t>({bytes, b.capacity * 2, size_t{4096}});
  void* p = nullptr;
  // Portable: the buffer is pinned for every device, whichever one the tensor lives on.
  cudaError_t err = cudaHostAlloc(&p, capacity, cudaHostAllocPortable);
  if (err != cudaSuccess)
    return cuda_error(
        err, "cudaHostAlloc of " + std::to_string(capacity) + " bytes of pinned staging memory");
  b.data = p;
  b.capacity = capacity;
  return p;
}

Result<void*> CudaStaging::stream_after(int device, void* ready_event, const std::string& what) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return cuda_error(err, "cudaSetDevice(" + std::to_string(device) + ")");
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    // Non-blocking: a blocking stream would make the legacy default stream (the framework's
    // compute) wait for every staging copy, and the copies for all of it. The legacy stream's
    // work is waited for explicitly, through the mark, where there is no ready event.
    Stream created;
    cudaStream_t s = nullptr;
    err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (err != cudaSuccess)
      return cuda_error(err, "cudaStreamCreate on cuda:" + std::to_string(device));
    created.stream = s;
    cudaEvent_t mark = nullptr;
    err = cudaEventCreateWithFlags(&mark, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      cudaStreamDestroy(s);
      return cuda_error(err, "cudaEventCreate on cuda:" + std::to_string(device));
    }
    created.mark = mark;
    it = streams_.emplace(device, created).first;
  }
  auto s = static_cast<cudaStream_t>(it->second.stream);
  auto event = static_cast<cudaEvent_t>(ready_event);
  if (!event) {
    event = static_cast<cudaEvent_t>(it->second.mark);
    err = cudaEventRecord(event, cudaStreamLegacy);
    if (err != cudaSuccess) return cuda_error(err, what + " (ordering after the default stream)");
  }
  err = cudaStreamWaitEvent(s, event, 0);
  if (err != cudaSuccess)
    return cuda_error(err, what + (ready_event ? " (waiting for its ready event)"
                                               : " (ordering after the default stream)"));
  return static_cast<void*>(s);
}

Status CudaStaging::copy_to_host(void* dst, const TensorView& src, size_t bytes,
                                 const std::string& name) {
  if (bytes == 0) return Status::Ok();
  const std::string what = "staging tensor '" + name + "' from " + src.device.to_string();
  KOLO_ASSIGN_OR_RETURN(void* sp, stream_after(src.device.index, src.ready_event, what));
  cudaError_t err =
      cudaMemcpyAsync(dst, src.data, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(sp));
  if (err != cudaSuccess) return cuda_error(err, what);
  return Status::Ok();
}

Status CudaStaging::copy_to_device(const TensorView& dst, const void* src, size_t bytes,
                                   const std::string& name) {
  if (bytes == 0) return Status::Ok();
  const std::string what = "copying the result of '" + name + "' to " + dst.device.to_string();
  KOLO_ASSIGN_OR_RETURN(void* sp, stream_after(dst.device.index, dst.ready_event, what));
  cudaError_t err =
      cudaMemcpyAsync(dst.data, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(sp));
  if (err != cudaSuccess) return cuda_error(err, what);
  return Status::Ok();
}

Status CudaStaging::synchronize() {
  for (auto& [device, s] : streams_) {
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) err = cudaStreamSynchronize(static_cast<cudaStream_t>(s.stream));
    if (err != cudaSuccess)
      return cuda_error(err, "waiting for staging copies on cuda:" + std::to_string(device));
  }
  return Status::Ok();
}

}  // namespace kolo::coord

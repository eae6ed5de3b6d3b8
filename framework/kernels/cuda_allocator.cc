#include "framework/kernels/cuda_allocator.h"

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

#include "common/cuda_device_guard.h"
#include "common/thread_annotations.h"
#include "kolo/status.h"

namespace kolo::fw::cuda_alloc {
namespace {

struct State {
  Mutex mu;
  // (device, rounded size) -> free blocks of exactly that rounded size.
  std::map<std::pair<int, size_t>, std::vector<void*>> free_lists KOLO_GUARDED_BY(mu);
  Stats stats KOLO_GUARDED_BY(mu);
};
State& state() {
  static State* s = new State;  // leaked on purpose: Storage may be freed during static teardown
  return *s;
}

void free_all_locked(State& s) KOLO_REQUIRES(s.mu) {
  for (auto& [key, blocks] : s.free_lists) {
    cudaSetDevice(key.first);
    for (void* p : blocks) cudaFree(p);
  }
  s.free_lists.clear();
  s.stats.bytes_cached = 0;
}

}  // namespace

size_t round_size(size_t nbytes) {
  if (nbytes == 0) return 512;
  if (nbytes <= (1u << 20)) return (nbytes + 511) / 512 * 512;
  size_t r = 1u << 20;
  while (r < nbytes) r <<= 1;
  return r;
}

void* allocate(size_t nbytes, int device) {
  const size_t size = round_size(nbytes);
  State& s = state();
  MutexLock lock(s.mu);
  auto it = s.free_lists.find({device, size});
  if (it != s.free_lists.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    s.stats.cache_hits++;
    s.stats.bytes_cached -= size;
    return p;
  }
  cudaError_t err = cudaSetDevice(device);
  void* p = nullptr;
  if (err == cudaSuccess) err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error before retrying
    free_all_locked(s);
    cudaSetDevice(device);
    err = cudaMalloc(&p, size);
  }
  if (err != cudaSuccess) {
    throw Error(Status::IoError("cuda allocator: cudaMalloc of " + std::to_string(nbytes) +
                                " bytes on cuda:" + std::to_string(device) +
                                " failed: " + cudaGetErrorString(err)));
  }
  s.stats.cuda_mallocs++;
  return p;
}

void release(void* ptr, size_t nbytes, int device) {
  if (ptr == nullptr) return;
  const size_t size = round_size(nbytes);
  State& s = state();
  MutexLock lock(s.mu);
  s.free_lists[{device, size}].push_back(ptr);
  s.stats.bytes_cached += size;
}

void empty_cache() {
  State& s = state();
  MutexLock lock(s.mu);
  free_all_locked(s);
}

Stats stats() {
  State& s = state();
  MutexLock lock(s.mu);
  return s.stats;
}

std::shared_ptr<void> record_event(int device) {
  cudaEvent_t event = nullptr;
  CudaDeviceGuard guard(device);  // the caller's thread: its current device is left as it was
  cudaError_t err = guard.status();
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(event, nullptr);  // the legacy default stream
  if (err != cudaSuccess) {
    if (event) cudaEventDestroy(event);
    throw Error(Status::IoError(std::string("recording a ready event on cuda:") +
                                std::to_string(device) + ": " + cudaGetErrorString(err)));
  }
  return std::shared_ptr<void>(event,
                               [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

}  // namespace kolo::fw::cuda_alloc

#include "framework/kernels/cuda_allocator.h"

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <tuple>
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
  // Graph-private pools (the header): the open capture's pool (0: none) and device, each pool
  // block's pool and size, and each pool's free blocks by (pool, device, rounded size).
  uint64_t capturing KOLO_GUARDED_BY(mu) = 0;
  int capturing_device KOLO_GUARDED_BY(mu) = -1;
  uint64_t next_pool KOLO_GUARDED_BY(mu) = 1;
  std::map<void*, std::pair<uint64_t, size_t>> pool_blocks KOLO_GUARDED_BY(mu);
  std::map<std::tuple<uint64_t, int, size_t>, std::vector<void*>> pool_free KOLO_GUARDED_BY(mu);
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

// The last block of lists[key], removed; null when there is none. Counts a cache hit.
template <typename Lists, typename Key>
void* pop_block(State& s, Lists& lists, const Key& key) KOLO_REQUIRES(s.mu) {
  auto it = lists.find(key);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  s.stats.cache_hits++;
  return p;
}

// A block of the open capture's pool for (device, size), from its free list; null on a miss.
void* take_from_pool(State& s, int device, size_t size) KOLO_REQUIRES(s.mu) {
  return pop_block(s, s.pool_free, std::make_tuple(s.capturing, device, size));
}

// A general free block for (device, size); null on a miss.
void* take_from_cache(State& s, int device, size_t size) KOLO_REQUIRES(s.mu) {
  void* p = pop_block(s, s.free_lists, std::make_pair(device, size));
  if (p) s.stats.bytes_cached -= size;
  return p;
}

// cudaMalloc of a new block (`nbytes` asked, `size` rounded); on running out of memory, with
// `may_free`, the general cache goes back to the driver and it tries once more.
void* malloc_locked(State& s, size_t nbytes, size_t size, int device, bool may_free)
    KOLO_REQUIRES(s.mu) {
  cudaError_t err = cudaSetDevice(device);
  void* p = nullptr;
  if (err == cudaSuccess) err = cudaMalloc(&p, size);
  // Freeing the cache synchronises the device, which a capture must not do.
  if (err == cudaErrorMemoryAllocation && may_free) {
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
  const bool in_capture = s.capturing != 0 && device == s.capturing_device;
  void* p = in_capture ? take_from_pool(s, device, size) : nullptr;
  if (p) return p;
  p = take_from_cache(s, device, size);
  if (!p) p = malloc_locked(s, nbytes, size, device, /*may_free=*/!in_capture);
  // A block a capture takes is the graph's from now on (one stream orders everything, so a
  // general free block is as good as a new one).
  if (in_capture) s.pool_blocks[p] = {s.capturing, size};
  return p;
}

void release(void* ptr, size_t nbytes, int device) {
  if (ptr == nullptr) return;
  const size_t size = round_size(nbytes);
  State& s = state();
  MutexLock lock(s.mu);
  auto owned = s.pool_blocks.find(ptr);
  // Released during a capture, a block the graph may have used joins its pool (the header).
  if (owned == s.pool_blocks.end() && s.capturing != 0 && device == s.capturing_device)
    owned = s.pool_blocks.emplace(ptr, std::make_pair(s.capturing, size)).first;
  if (owned != s.pool_blocks.end()) {
    s.pool_free[{owned->second.first, device, size}].push_back(ptr);
    return;
  }
  s.free_lists[{device, size}].push_back(ptr);
  s.stats.bytes_cached += size;
}

uint64_t begin_graph_pool(int device) {
  State& s = state();
  MutexLock lock(s.mu);
  if (s.capturing != 0)
    throw Error(Status::PreconditionFailed(
        "cuda allocator: a CUDA graph capture is already open (one at a time)"));
  s.capturing = s.next_pool++;
  s.capturing_device = device;
  return s.capturing;
}

void end_graph_pool() {
  State& s = state();
  MutexLock lock(s.mu);
  s.capturing = 0;
  s.capturing_device = -1;
}

void release_graph_pool(uint64_t pool) {
  State& s = state();
  MutexLock lock(s.mu);
  for (auto it = s.pool_free.begin(); it != s.pool_free.end();) {
    const auto& [owner, device, size] = it->first;
    if (owner != pool) {
      ++it;
      continue;
    }
    for (void* p : it->second) {
      s.pool_blocks.erase(p);
      s.free_lists[{device, size}].push_back(p);
      s.stats.bytes_cached += size;
    }
    it = s.pool_free.erase(it);
  }
  // Blocks still in use are general blocks from now on: release() puts them on the free lists.
  for (auto it = s.pool_blocks.begin(); it != s.pool_blocks.end();)
    it = it->second.first == pool ? s.pool_blocks.erase(it) : std::next(it);
}

size_t graph_pool_bytes(uint64_t pool) {
  State& s = state();
  MutexLock lock(s.mu);
  size_t total = 0;
  for (const auto& [ptr, owner] : s.pool_blocks)
    if (owner.first == pool) total += owner.second;
  return total;
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

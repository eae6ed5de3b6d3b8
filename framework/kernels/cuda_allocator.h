// Caching CUDA allocator: device memory for kolo::fw::Storage.
//
// cudaMalloc/cudaFree synchronise the device and cost tens of microseconds, and a training step
// frees and reallocates the same activation sizes every iteration. So freed blocks are kept on
// per-device free lists bucketed by rounded size (multiples of 512 bytes up to 1 MiB, then powers
// of two) and handed out again; cudaMalloc is called only on a miss. empty_cache() returns all
// cached blocks to the driver (also tried once when cudaMalloc fails).
// Only built with KOLO_HAVE_CUDA. Thread-safety: all functions are thread-safe (one mutex).
// Errors: allocate throws kolo::Error(kIoError) naming the size and device when CUDA fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kolo::fw::cuda_alloc {

void* allocate(size_t nbytes, int device);
void release(void* ptr, size_t nbytes, int device);
void empty_cache();

struct Stats {
  uint64_t cuda_mallocs = 0;  // misses that reached cudaMalloc
  uint64_t cache_hits = 0;    // allocations served from a free list
  uint64_t bytes_cached = 0;  // bytes currently sitting in free lists
};
Stats stats();

// A cudaEvent_t (as void*) recorded now on `device`'s legacy default stream, where the
// framework's kernels run: what a kolo::TensorView's ready_event wants for a tensor the
// framework just wrote. Destroyed when the last pointer goes (CUDA defers that until the event
// completed). The calling thread's current device is restored. Throws kolo::Error(kIoError)
// when CUDA fails.
std::shared_ptr<void> record_event(int device);

// ---- graph-private pools (framework/cuda_graph.h) ----
// A captured CUDA graph replays its kernels on the addresses they had during the capture, so
// every block the capture touched must stay the graph's until the graph is destroyed, like
// PyTorch's graph-private memory pool. Between begin_graph_pool and end_graph_pool (one capture
// at a time, process-wide; other threads must not allocate on that device meanwhile):
// allocations on `device` come from the pool's own free list, else the general free lists,
// else cudaMalloc (the capture runs in relaxed mode, where cudaMalloc is allowed), and a block
// released then (the capture's temporaries, and blocks allocated before it and freed in it) joins
// the pool. A pool block released at any later time goes back to its pool's free list, where only
// the same graph's replays use it. release_graph_pool (after the graph's last replay finished)
// hands the pool's free blocks to the general lists; its blocks still in use go there when
// released. begin_graph_pool throws kolo::Error(kPreconditionFailed) while a capture is open.
uint64_t begin_graph_pool(int device);
void end_graph_pool();
void release_graph_pool(uint64_t pool);
size_t graph_pool_bytes(uint64_t pool);  // bytes the pool holds, in use or free (for tests)

// Rounded size class used for bucketing (exposed for tests).
size_t round_size(size_t nbytes);

}  // namespace kolo::fw::cuda_alloc

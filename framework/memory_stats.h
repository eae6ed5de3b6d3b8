// What the training stack's tensors hold, by category: the allocator's own count.
//
// Every Storage (tensor.h) is counted, from its allocation to its release, under one category:
// the calling thread's MemoryCategoryScope when it is allocated (kOther without one), and
// whatever the code that gives the memory its role sets later with Tensor::set_memory_category
// (a tensor registered as a module's parameter becomes kParameters; a buffer that autograd or
// set_grad makes a parameter's gradient, kGradients; ...). Each category keeps its current
// bytes and the largest value they reached (the peak), per device kind; the peak of the sum
// (every category at once) is kept too, since it is not the sum of the peaks.
//
// Bytes are those the tensors asked for (Storage::nbytes), not the allocator's rounding or
// cache (the CUDA caching allocator may hold more), and only the training stack's: the
// coordinator's fusion buffers and the backends' staging are not Storage and are not counted.
//
// Thread-safety: every function may be called from any thread; the counters are atomics, so a
// reading taken while other threads allocate is a consistent value of each counter, not a
// snapshot of all of them at one instant.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "kolo/types.h"

namespace kolo::fw {

enum class MemoryCategory : uint8_t {
  kOther,           // activations, temporaries, anything not given a role
  kParameters,      // a module's parameters (and a flat buffer that holds them)
  kGradients,       // parameters' gradients (and a sharded optimizer's reduced shards)
  kOptimizerState,  // moments, momentum buffers, a sharded optimizer's state slices
  kCommunication,   // buffers that exist to travel: compressed copies, gradient buckets in flight
};
inline constexpr int kNumMemoryCategories = 5;

// "other", "parameters", "gradients", "optimizer state", "communication".
std::string_view memory_category_name(MemoryCategory category);

struct MemoryStats {
  std::array<int64_t, kNumMemoryCategories> current{};  // indexed by MemoryCategory
  std::array<int64_t, kNumMemoryCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;  // of the sum, at any one time
  int64_t current_of(MemoryCategory c) const { return current[static_cast<size_t>(c)]; }
  int64_t peak_of(MemoryCategory c) const { return peak[static_cast<size_t>(c)]; }
};

// The counts for storages on devices of `kind` (every CUDA device together for kCuda).
MemoryStats memory_stats(DeviceKind kind = DeviceKind::kCpu);
// Sets every peak of `kind` to its current value (e.g. after set-up, to see a step's peak).
void reset_memory_peaks(DeviceKind kind = DeviceKind::kCpu);

// While alive, storages this thread allocates are counted under `category`. Scopes nest; the
// innermost wins. Not movable: it restores the previous category when it ends.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

namespace memory_stats_detail {
// For Storage only: the category new storages of this thread take, and the counters' moves.
MemoryCategory current_category();
void add(DeviceKind kind, MemoryCategory category, int64_t bytes);
void move(DeviceKind kind, MemoryCategory from, MemoryCategory to, int64_t bytes);
}  // namespace memory_stats_detail

}  // namespace kolo::fw

// Which pooling windows hold a given input position: the index arithmetic of the gather-form
// pooling backward passes (cuda_kernels.cu), shared with the CPU so that a test can check it
// here (cpu_kernels_test.cc) where no GPU runs it.
//
// A pooling with window k and stride s (no padding) has outputs o = 0 .. out-1 along an axis,
// and output o reads inputs [o s, o s + k). Input i is in the windows o with
// o s <= i <= o s + k - 1, i.e. ceil((i - k + 1) / s) <= o <= floor(i / s), clipped to
// [0, out). Gathering over them, in increasing o, gives each input gradient as a sum in a fixed
// order: no atomics, the same bits in every run, and no zero-fill before the pass.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KOLO_HOST_DEVICE __host__ __device__
#else
#define KOLO_HOST_DEVICE
#endif

namespace kolo::fw::kernels {

// The windows [first, last] that contain input position `i` (empty when first > last).
struct WindowRange {
  int64_t first, last;
};

KOLO_HOST_DEVICE inline WindowRange windows_containing(int64_t i, int64_t k, int64_t stride,
                                                       int64_t out) {
  const int64_t lo = i - k + 1;
  const int64_t first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  const int64_t last = i / stride < out - 1 ? i / stride : out - 1;
  return {first, last};
}

}  // namespace kolo::fw::kernels

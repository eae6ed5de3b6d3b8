// The nccl backend's device kernels on a real GPU (skipped without one): the batched copy.
#include "backends/nccl/nccl_kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace kolo::nccl {
namespace {

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

// Segments of every alignment class (16, 4 and 1 bytes), empty ones, and more than two
// launches' worth (kBatchedCopyMax each), copied from one device buffer into another at
// offsets that differ from their source's: every byte lands where it belongs, and the gaps
// between destinations keep their old contents.
TEST(BatchedCopyTest, CopiesEverySegmentExactlyAndNothingElse) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: the batched copy kernel needs one";
  const std::vector<int64_t> sizes = {0, 1, 3, 4, 15, 16, 17, 64, 4096 + 5, 1 << 20, 12, 8};
  const int64_t n = 2 * kBatchedCopyMax + 7;
  std::vector<CopySegment> segments;
  int64_t src_end = 0, dst_end = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t bytes = sizes[static_cast<size_t>(k) % sizes.size()];
    // Sources packed back to back (odd offsets too); destinations one byte of gap apart.
    segments.push_back(
        {reinterpret_cast<const void*>(src_end), reinterpret_cast<void*>(dst_end + 1), bytes});
    src_end += bytes;
    dst_end += bytes + 1;
  }
  std::vector<unsigned char> host_src(static_cast<size_t>(src_end));
  for (size_t i = 0; i < host_src.size(); ++i) host_src[i] = static_cast<unsigned char>(i * 7 + 1);
  void *src = nullptr, *dst = nullptr;
  ASSERT_EQ(cudaMalloc(&src, host_src.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, static_cast<size_t>(dst_end) + 1), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src, host_src.data(), host_src.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0xEE, static_cast<size_t>(dst_end) + 1), cudaSuccess);
  for (auto& s : segments) {
    s.src = static_cast<const char*>(src) + reinterpret_cast<intptr_t>(s.src);
    s.dst = static_cast<char*>(dst) + reinterpret_cast<intptr_t>(s.dst);
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(batched_copy_on_stream(segments.data(), n, stream), 0);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<unsigned char> got(static_cast<size_t>(dst_end) + 1);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<unsigned char> want(got.size(), 0xEE);
  int64_t s_off = 0, d_off = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t bytes = segments[static_cast<size_t>(k)].bytes;
    for (int64_t i = 0; i < bytes; ++i)
      want[static_cast<size_t>(d_off + 1 + i)] = host_src[static_cast<size_t>(s_off + i)];
    s_off += bytes;
    d_off += bytes + 1;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaFree(src), cudaSuccess);
  EXPECT_EQ(cudaFree(dst), cudaSuccess);
}

// No segments, and segments that are all empty: nothing is launched, nothing fails.
TEST(BatchedCopyTest, NothingToCopyIsNotAnError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: the batched copy kernel needs one";
  std::vector<CopySegment> empty(3);
  EXPECT_EQ(batched_copy_on_stream(nullptr, 0, nullptr), 0);
  EXPECT_EQ(batched_copy_on_stream(empty.data(), 3, nullptr), 0);
}

}  // namespace
}  // namespace kolo::nccl

// The nccl backend's device kernels on a real GPU (skipped without one): the batched copy.
#include "backends/nccl/nccl_kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
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

int multiprocessors() {
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  return sms;
}

// Copies segments of `sizes` (cycled, n of them) from one device buffer into another: each
// source starts `src_align` bytes past a multiple of `src_align` beyond the previous one's end
// (1: packed back to back), each destination one byte of gap after the previous one. Every
// byte must land where it belongs, and the gaps keep their old contents.
void check_batched_copy(const std::vector<int64_t>& sizes, int64_t n, int64_t src_align,
                        int multiprocessors) {
  std::vector<CopySegment> segments;
  int64_t src_end = 0, dst_end = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t bytes = sizes[static_cast<size_t>(k) % sizes.size()];
    src_end = (src_end + src_align - 1) / src_align * src_align;
    segments.push_back(
        {reinterpret_cast<const void*>(src_end), reinterpret_cast<void*>(dst_end + 1), bytes});
    src_end += bytes;
    dst_end += bytes + 1;
  }
  std::vector<unsigned char> host_src(static_cast<size_t>(src_end));
  for (size_t i = 0; i < host_src.size(); ++i) host_src[i] = static_cast<unsigned char>(i * 7 + 1);
  void *src = nullptr, *dst = nullptr;
  ASSERT_EQ(cudaMalloc(&src, std::max<size_t>(host_src.size(), 1)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, static_cast<size_t>(dst_end) + 1), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src, host_src.data(), host_src.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0xEE, static_cast<size_t>(dst_end) + 1), cudaSuccess);
  for (auto& s : segments) {
    s.src = static_cast<const char*>(src) + reinterpret_cast<intptr_t>(s.src);
    s.dst = static_cast<char*>(dst) + reinterpret_cast<intptr_t>(s.dst);
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(batched_copy_on_stream(segments.data(), n, stream, multiprocessors), 0);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<unsigned char> got(static_cast<size_t>(dst_end) + 1);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<unsigned char> want(got.size(), 0xEE);
  for (const CopySegment& s : segments) {
    const auto from = static_cast<const char*>(s.src) - static_cast<const char*>(src);
    const auto to = static_cast<char*>(s.dst) - static_cast<char*>(dst);
    for (int64_t i = 0; i < s.bytes; ++i)
      want[static_cast<size_t>(to + i)] = host_src[static_cast<size_t>(from + i)];
  }
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
  EXPECT_EQ(differ, 0u) << "src_align " << src_align << ", " << multiprocessors << " SMs";
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaFree(src), cudaSuccess);
  EXPECT_EQ(cudaFree(dst), cudaSuccess);
}

// Segments of every alignment class (16, 4, 2 and 1 bytes), empty ones, ones of several 16 KiB
// chunks and a tail, and more than two launches' worth (kBatchedCopyMax each); on a grid of the
// whole GPU and on one of a single SM's blocks (every block then copies many chunks).
TEST(BatchedCopyTest, CopiesEverySegmentExactlyAndNothingElse) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: the batched copy kernel needs one";
  const std::vector<int64_t> sizes = {
      0, 1, 3, 4, 15, 16, 17, 64, 4096 + 5, 1 << 20, 12, 8, 3 * 16384 + 14, 2, 6};
  for (int sms : {multiprocessors(), 1}) check_batched_copy(sizes, 2 * kBatchedCopyMax + 7, 1, sms);
}

// The device fusion buffer's layout: pieces 16-byte aligned (nccl pads them), float16 tensors
// of odd counts (their byte sizes are not multiples of 4 or 16: the body moves 16-byte words,
// the tail bytes), with sources also aligned 2 and 4 bytes (views at an offset).
TEST(BatchedCopyTest, AlignedPiecesOfOddFloat16CountsCopyExactly) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: the batched copy kernel needs one";
  std::vector<int64_t> sizes;
  for (int64_t count : {1, 3, 7, 1001, 8191, 8193, 65537, 262145}) sizes.push_back(2 * count);
  for (int64_t align : {16, 4, 2})
    check_batched_copy(sizes, kBatchedCopyMax + 9, align, multiprocessors());
}

// No segments, and segments that are all empty: nothing is launched, nothing fails.
TEST(BatchedCopyTest, NothingToCopyIsNotAnError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: the batched copy kernel needs one";
  std::vector<CopySegment> empty(3);
  EXPECT_EQ(batched_copy_on_stream(nullptr, 0, nullptr, 1), 0);
  EXPECT_EQ(batched_copy_on_stream(empty.data(), 3, nullptr, 1), 0);
}

}  // namespace
}  // namespace kolo::nccl

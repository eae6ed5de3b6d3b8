#include "ops/stream_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kolo::ops {
namespace {

// Every length from 0 to 300 bytes at every alignment of source and destination within a
// 16-byte line (the head, the 64-byte body and the tail each take every size), and one large
// copy: the bytes written are exactly the source's, and the bytes around them are untouched.
TEST(StreamCopy, CopiesExactlyTheBytesAtEveryAlignmentAndLength) {
  std::vector<uint8_t> src(400), dst(400);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t s_off = 0; s_off < 16; ++s_off) {
    for (size_t d_off = 0; d_off < 16; ++d_off) {
      for (size_t n = 0; n <= 300; ++n) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        stream_copy(dst.data() + d_off + 16, src.data() + s_off, n);
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= d_off + 16 && i < d_off + 16 + n;
          const uint8_t want = inside ? src[i - d_off - 16 + s_off] : uint8_t{0xEE};
          ASSERT_EQ(dst[i], want) << "source offset " << s_off << ", destination offset " << d_off
                                  << ", " << n << " bytes, byte " << i;
        }
      }
    }
  }
  std::vector<float> big(1 << 20), out(big.size() + 3, -1.0f);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  stream_copy(out.data() + 1, big.data(), big.size() * sizeof(float));
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[out.size() - 2], -1.0f);
  for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(out[i + 1], big[i]) << "element " << i;
}

}  // namespace
}  // namespace kolo::ops

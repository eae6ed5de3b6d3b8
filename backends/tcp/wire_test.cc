#include "backends/tcp/wire.h"

#include <gtest/gtest.h>

#include <vector>

#include "backends/tcp/tcp_knobs.h"

namespace kolo::tcp {
namespace {

// The bound a job runs with unless KOLO_TCP_MAX_FRAME says otherwise.
const uint64_t kDefaultMaxFrameBytes = KnobSet::defaults().size(tcp_knobs::kMaxFrame);

TEST(WireTest, RoundTripsLengths) {
  for (uint64_t len : {uint64_t{1}, uint64_t{4096}, kDefaultMaxFrameBytes}) {
    const FrameHeader h = encode_frame_header(len);
    Result<uint64_t> got = decode_frame_header(h, kDefaultMaxFrameBytes);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, len);
  }
}

TEST(WireTest, HeaderIsLittleEndianWithMagicFirst) {
  const FrameHeader h = encode_frame_header(0x0102030405060708ULL);
  EXPECT_EQ(h[0], 'K');
  EXPECT_EQ(h[1], 'L');
  EXPECT_EQ(h[2], 'F');
  EXPECT_EQ(h[3], '1');
  for (int i = 4; i < 8; ++i) EXPECT_EQ(h[i], 0);
  EXPECT_EQ(h[8], 0x08);
  EXPECT_EQ(h[15], 0x01);
}

TEST(WireTest, RejectsBadMagic) {
  FrameHeader h = encode_frame_header(8);
  h[0] = 'X';
  Result<uint64_t> got = decode_frame_header(h, kDefaultMaxFrameBytes);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kIoError);
  EXPECT_NE(got.status().message().find("magic"), std::string::npos) << got.status().message();
}

TEST(WireTest, RejectsUnknownFlags) {
  FrameHeader h = encode_frame_header(8);
  h[5] = 1;
  Result<uint64_t> got = decode_frame_header(h, kDefaultMaxFrameBytes);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("flags are 0x00000100"), std::string::npos)
      << got.status().message();
}

// KOLO_TCP_INTEGRITY on one side only, or a tag stripped on the way, is named, never ignored.
TEST(WireTest, TaggedFlagMustMatchWhatThisSideExpects) {
  const FrameHeader tagged = encode_frame_header(8, kFrameTagged);
  EXPECT_EQ(decode_frame_header(tagged, kDefaultMaxFrameBytes, kFrameTagged).value(), 8u);
  Result<uint64_t> untagged_here = decode_frame_header(tagged, kDefaultMaxFrameBytes, 0);
  ASSERT_FALSE(untagged_here.ok());
  EXPECT_NE(untagged_here.status().message().find("KOLO_TCP_INTEGRITY must match"),
            std::string::npos)
      << untagged_here.status().message();
  Result<uint64_t> stripped =
      decode_frame_header(encode_frame_header(8), kDefaultMaxFrameBytes, kFrameTagged);
  ASSERT_FALSE(stripped.ok());
  EXPECT_NE(stripped.status().message().find("integrity check failed"), std::string::npos)
      << stripped.status().message();
}

TEST(WireTest, RejectsTruncatedHeader) {
  const FrameHeader h = encode_frame_header(8);
  Result<uint64_t> got = decode_frame_header(std::span<const uint8_t>(h.data(), 15), 1 << 20);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kIoError);
  EXPECT_NE(got.status().message().find("truncated"), std::string::npos);
  EXPECT_NE(got.status().message().find("15 of 16"), std::string::npos);
}

TEST(WireTest, RejectsOversizedLength) {
  // A garbage length far above the bound must be named as oversized, not allocated or trusted.
  const FrameHeader h = encode_frame_header(~uint64_t{0});
  Result<uint64_t> got = decode_frame_header(h, 1 << 20);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("oversized"), std::string::npos);
  EXPECT_NE(got.status().message().find("1048576"), std::string::npos);
}

TEST(WireTest, RejectsEmptyFrames) {
  const FrameHeader h = encode_frame_header(0);
  Result<uint64_t> got = decode_frame_header(h, 1 << 20);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("length 0"), std::string::npos);
}

TEST(WireTest, AcceptsExactlyTheBound) {
  Result<uint64_t> got = decode_frame_header(encode_frame_header(1000), 1000);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(decode_frame_header(encode_frame_header(1001), 1000).ok());
}

TEST(WireTest, SplitsLongMessagesIntoBoundedFrames) {
  EXPECT_EQ(frame_length(25, 0, 10), 10u);
  EXPECT_EQ(frame_length(25, 10, 10), 10u);
  EXPECT_EQ(frame_length(25, 20, 10), 5u);
  EXPECT_EQ(frame_length(10, 0, 10), 10u);
}

}  // namespace
}  // namespace kolo::tcp

#include "kolo/types.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kolo/float16.h"
#include "kolo/status.h"

namespace kolo {
namespace {

TEST(DataType, NamesRoundTripAndSizes) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto d = static_cast<DataType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(dtype_size(DataType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DataType::kInt64), 8u);
  EXPECT_EQ(parse_dtype("f32"), DataType::kFloat32);
  EXPECT_EQ(parse_dtype("complex64"), std::nullopt);
  EXPECT_EQ(dtype_size(DataType::kInt16), 2u);
  EXPECT_EQ(parse_dtype("int16"), DataType::kInt16);
  EXPECT_EQ(parse_dtype("i16"), DataType::kInt16);
  // Appended: the wire values of the older dtypes did not move.
  EXPECT_EQ(static_cast<int>(DataType::kFloat64), 7);
  EXPECT_EQ(static_cast<int>(DataType::kInt16), 8);
  EXPECT_TRUE(is_valid_dtype(8));
  EXPECT_FALSE(is_valid_dtype(9));
  EXPECT_FALSE(is_valid_dtype(-1));
}

TEST(ReduceOp, Names) {
  EXPECT_EQ(parse_reduce_op("avg"), ReduceOp::kAverage);
  EXPECT_EQ(reduce_op_name(ReduceOp::kProduct), "product");
  EXPECT_EQ(parse_reduce_op("xor"), std::nullopt);
}

TEST(Float16, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(half_to_float(float_to_half(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(70000.0f))));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to even gives 1.
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
}

TEST(Float16, AllHalvesRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), h) << std::hex << h;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f)), 1.0f);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f + 0x1p-8f)), 1.0f);  // tie -> even
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(NAN))));
}

TEST(Status, CodesMessagesAndContext) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.to_string(), "OK");
  Status e = Status::InvalidArgument("count must be >= 0, got -1").with_context("allreduce 'w'");
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.to_string(), "InvalidArgument: allreduce 'w': count must be >= 0, got -1");
  Result<int> r = Status::Timeout("late");
  EXPECT_FALSE(r.ok());
  Result<int> v = 3;
  EXPECT_EQ(*v, 3);
}

}  // namespace
}  // namespace kolo

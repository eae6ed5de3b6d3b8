#include "ops/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kolo/float16.h"

namespace kolo::ops {
namespace {

constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};

float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return a + b;
    case ReduceOp::kMin:
      return b < a ? b : a;
    case ReduceOp::kMax:
      return a < b ? b : a;
    case ReduceOp::kProduct:
      return a * b;
  }
  return 0;
}

// Every 16-bit result must be the single correct rounding of the exact float combination
// of the widened inputs (no double rounding, no accumulated error), checked on random bit
// patterns over the whole range (NaN inputs excluded: their payloads are not specified).
template <typename ToF, typename FromF>
void check_one_rounding(DataType dtype, ToF to_float, FromF from_float, uint16_t nan_mask) {
  std::mt19937 rng(42);
  const int64_t n = 4099;  // not a multiple of the SIMD width or the block size
  std::vector<uint16_t> a(n), b(n), out(n);
  for (ReduceOp op : kAllOps) {
    for (int64_t i = 0; i < n; ++i) {
      do a[i] = static_cast<uint16_t>(rng());
      while ((a[i] & nan_mask) == nan_mask);
      do b[i] = static_cast<uint16_t>(rng());
      while ((b[i] & nan_mask) == nan_mask);
    }
    reduce_to(dtype, op, out.data(), a.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = from_float(combine(op, to_float(a[i]), to_float(b[i])));
      if (std::isnan(to_float(want))) {
        ASSERT_TRUE(std::isnan(to_float(out[i]))) << i;
      } else {
        ASSERT_EQ(out[i], want) << "op " << reduce_op_name(op) << " i " << i << " a " << a[i]
                                << " b " << b[i];
      }
    }
    std::vector<uint16_t> inplace = a;
    reduce_into(dtype, op, inplace.data(), b.data(), n);
    ASSERT_EQ(inplace, out);
  }
}

TEST(ReduceTest, Float16RoundsOncePerStep) {
  check_one_rounding(DataType::kFloat16, half_to_float, float_to_half, 0x7c00);
}

TEST(ReduceTest, BFloat16RoundsOncePerStep) {
  check_one_rounding(DataType::kBFloat16, bfloat16_to_float, float_to_bfloat16, 0x7f80);
}

TEST(ReduceTest, Float16SumChainRoundsEachStep) {
  // 2048 + 1 is not representable in half (spacing 2 there): each step rounds to even, so
  // adding 1 repeatedly stays at 2048 instead of reaching 2048 + k.
  std::vector<uint16_t> acc(3, float_to_half(2048.0f)), one(3, float_to_half(1.0f));
  for (int k = 0; k < 5; ++k)
    reduce_into(DataType::kFloat16, ReduceOp::kSum, acc.data(), one.data(), 3);
  EXPECT_EQ(half_to_float(acc[0]), 2048.0f);
}

TEST(ReduceTest, IntegersWrapAndCombine) {
  std::vector<int8_t> a = {100, -128, 5, 7}, b = {100, -1, -6, 3};
  std::vector<int8_t> s = a;
  reduce_into(DataType::kInt8, ReduceOp::kSum, s.data(), b.data(), 4);
  EXPECT_EQ(s, (std::vector<int8_t>{-56, 127, -1, 10}));
  std::vector<int8_t> mn(4), mx(4), pr(4);
  reduce_to(DataType::kInt8, ReduceOp::kMin, mn.data(), a.data(), b.data(), 4);
  reduce_to(DataType::kInt8, ReduceOp::kMax, mx.data(), a.data(), b.data(), 4);
  reduce_to(DataType::kInt8, ReduceOp::kProduct, pr.data(), a.data(), b.data(), 4);
  EXPECT_EQ(mn, (std::vector<int8_t>{100, -128, -6, 3}));
  EXPECT_EQ(mx, (std::vector<int8_t>{100, -1, 5, 7}));
  EXPECT_EQ(pr, (std::vector<int8_t>{16, -128, -30, 21}));  // 10000 mod 256 = 16

  std::vector<uint8_t> u = {250, 3}, v = {10, 4};
  reduce_into(DataType::kUInt8, ReduceOp::kSum, u.data(), v.data(), 2);
  EXPECT_EQ(u, (std::vector<uint8_t>{4, 7}));

  std::vector<int64_t> x = {INT64_MAX, -5}, y = {1, 9};
  reduce_into(DataType::kInt64, ReduceOp::kSum, x.data(), y.data(), 2);
  EXPECT_EQ(x[0], INT64_MIN);
  EXPECT_EQ(x[1], 4);
  std::vector<int32_t> p = {-3, 1 << 20}, q = {7, 1 << 12};
  reduce_into(DataType::kInt32, ReduceOp::kProduct, p.data(), q.data(), 2);
  EXPECT_EQ(p[0], -21);
  EXPECT_EQ(p[1], 0);  // 2^32 wraps to 0
}

TEST(ReduceTest, Int16WrapsLikeTheOtherIntegers) {
  std::vector<int16_t> a = {32767, -32768, 300, -7}, b = {1, -1, 300, 5};
  std::vector<int16_t> s = a;
  reduce_into(DataType::kInt16, ReduceOp::kSum, s.data(), b.data(), 4);
  EXPECT_EQ(s, (std::vector<int16_t>{-32768, 32767, 600, -2}));
  std::vector<int16_t> mn(4), mx(4), pr(4);
  reduce_to(DataType::kInt16, ReduceOp::kMin, mn.data(), a.data(), b.data(), 4);
  reduce_to(DataType::kInt16, ReduceOp::kMax, mx.data(), a.data(), b.data(), 4);
  reduce_to(DataType::kInt16, ReduceOp::kProduct, pr.data(), a.data(), b.data(), 4);
  EXPECT_EQ(mn, (std::vector<int16_t>{1, -32768, 300, -7}));
  EXPECT_EQ(mx, (std::vector<int16_t>{32767, -1, 300, 5}));
  EXPECT_EQ(pr, (std::vector<int16_t>{32767, -32768, 24464, -35}));  // 90000 mod 65536 = 24464
  // -1 * -1 as unsigned 16-bit values is 65535 * 65535, past int: computed without overflow.
  std::vector<int16_t> m = {-1, -32768}, n = {-1, -32768};
  reduce_into(DataType::kInt16, ReduceOp::kProduct, m.data(), n.data(), 2);
  EXPECT_EQ(m, (std::vector<int16_t>{1, 0}));  // 2^30 wraps to 0
}

TEST(ReduceTest, FloatsLongBuffersAllOps) {
  const int64_t n = 10007;
  std::vector<double> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<double>(i % 13) - 6;
    b[i] = static_cast<double>(i % 7) - 3;
  }
  for (ReduceOp op : kAllOps) {
    std::vector<float> fa(a.begin(), a.end()), fb(b.begin(), b.end());
    std::vector<double> da = a;
    reduce_into(DataType::kFloat32, op, fa.data(), fb.data(), n);
    reduce_into(DataType::kFloat64, op, da.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = combine(op, static_cast<float>(a[i]), static_cast<float>(b[i]));
      ASSERT_EQ(fa[i], want) << i;
      ASSERT_EQ(da[i], static_cast<double>(want)) << i;
    }
  }
}

TEST(ReduceTest, SelfAliasing) {
  std::vector<float> a = {1, 2, 3};
  reduce_to(DataType::kFloat32, ReduceOp::kSum, a.data(), a.data(), a.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{2, 4, 6}));
  std::vector<float> b = {5, 5, 5};
  reduce_to(DataType::kFloat32, ReduceOp::kMin, a.data(), b.data(), a.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{2, 4, 5}));
}

TEST(ReduceTest, ScaleDivideAndScaleCopy) {
  std::vector<int32_t> i = {7, -7, 100};
  scale(DataType::kInt32, i.data(), 3, 0.5);
  EXPECT_EQ(i, (std::vector<int32_t>{3, -3, 50}));  // truncated toward zero
  divide(DataType::kInt32, i.data(), 3, 3.0);
  EXPECT_EQ(i, (std::vector<int32_t>{1, -1, 16}));

  std::vector<uint16_t> h = {float_to_half(3.0f), float_to_half(-1.5f)};
  scale(DataType::kFloat16, h.data(), 2, 2.0);
  EXPECT_EQ(half_to_float(h[0]), 6.0f);
  EXPECT_EQ(half_to_float(h[1]), -3.0f);
  std::vector<uint16_t> bf = {float_to_bfloat16(9.0f)};
  divide(DataType::kBFloat16, bf.data(), 1, 3.0);
  EXPECT_EQ(bfloat16_to_float(bf[0]), 3.0f);

  std::vector<double> src = {1, 2, 3}, dst(3);
  scale_copy(DataType::kFloat64, dst.data(), src.data(), 3, 1.0);
  EXPECT_EQ(dst, src);
  scale_copy(DataType::kFloat64, dst.data(), src.data(), 3, -2.0);
  EXPECT_EQ(dst, (std::vector<double>{-2, -4, -6}));
  std::vector<float> f = {1.5f};
  scale(DataType::kFloat32, f.data(), 0, 3.0);  // count 0: untouched
  scale(DataType::kFloat32, f.data(), 1, 1.0);
  EXPECT_EQ(f[0], 1.5f);
}

// kolo::Reduction's rule: divide by the contributors, then the postscale (issue 15: 81 / 3 * 13
// = 351 exactly, where 81 * (13 / 3.0) truncates to 350). Other ops only scale.
TEST(ReduceTest, FinishReductionDividesThenScales) {
  std::vector<int32_t> i = {81, 27, -27};
  finish_reduction(DataType::kInt32, {ReduceOp::kAverage, 1.0, 13.0}, i.data(), 3, 3);
  EXPECT_EQ(i, (std::vector<int32_t>{351, 117, -117}));
  std::vector<int32_t> s = {81};
  finish_reduction(DataType::kInt32, {ReduceOp::kSum, 5.0, 0.5}, s.data(), 1, 3);
  EXPECT_EQ(s[0], 40);  // the prescale is the caller's; 40.5 truncates toward zero
  std::vector<double> d = {1.0};
  finish_reduction(DataType::kFloat64, {ReduceOp::kAverage, 1.0, 3.0}, d.data(), 1, 3);
  EXPECT_EQ(d[0], 1.0);
}

}  // namespace
}  // namespace kolo::ops

// The superaccumulator of KOLO_REDUCTION=exact (ops/exact.h) against independent references:
// Shewchuk's exact expansions (the algorithm of Python's math.fsum) decide whether a result is
// the nearest value of its format to the exact sum (ties to even), and give the correctly
// rounded float64 sum itself.
#include "ops/exact.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kolo/float16.h"

namespace kolo::ops {
namespace {

// The exact sum of `terms` as non-overlapping partials, smallest first (Shewchuk).
std::vector<double> expansion(const std::vector<double>& terms) {
  std::vector<double> partials;
  for (double x : terms) {
    size_t i = 0;
    for (size_t j = 0; j < partials.size(); ++j) {
      double y = partials[j];
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      const double hi = x + y;
      const double lo = y - (hi - x);
      if (lo != 0.0) partials[i++] = lo;
      x = hi;
    }
    partials.resize(i);
    partials.push_back(x);
  }
  return partials;
}

// The sign of the exact sum: that of its largest partial.
int exact_sign(const std::vector<double>& terms) {
  const std::vector<double> p = expansion(terms);
  for (auto it = p.rbegin(); it != p.rend(); ++it)
    if (*it != 0.0) return *it > 0 ? 1 : -1;
  return 0;
}

// math.fsum: the exact sum rounded once to double.
double fsum(const std::vector<double>& terms) {
  std::vector<double> p = expansion(terms);
  size_t n = p.size();
  if (n == 0) return 0.0;
  double hi = p[--n], lo = 0.0;
  while (n > 0) {
    const double x = hi, y = p[--n];
    hi = x + y;
    lo = y - (hi - x);
    if (lo != 0.0) break;
  }
  if (n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0))) {
    const double y = lo * 2.0, x = hi + y;
    if (y == x - hi) hi = x;
  }
  return hi;
}

// A 16- or 32-bit format's values as doubles (exactly), by their bits.
struct Small {
  DataType dtype;
  int bits;
  double value(uint32_t b) const {
    if (dtype == DataType::kFloat32) return bits_to_float(b);
    return dtype == DataType::kFloat16 ? half_to_float(static_cast<uint16_t>(b))
                                       : bfloat16_to_float(static_cast<uint16_t>(b));
  }
  uint32_t sign_bit() const { return uint32_t{1} << (bits - 1); }
  uint32_t inf() const {
    return dtype == DataType::kFloat16    ? 0x7c00
           : dtype == DataType::kBFloat16 ? 0x7f80
                                          : 0x7f800000;
  }
  // The value of magnitude bits m (>= 0), with the largest finite value's successor (the
  // virtual 2^(emax+1)) for Inf's bits.
  double magnitude(uint32_t m) const {
    if (m < inf()) return value(m);
    return 2 * value(inf() - 1) - value(inf() - 2);
  }
};

// Whether r (bits) is the nearest value of the format to sum(terms) / divisor, ties to even:
// the exact sum lies between the midpoints to r's neighbours (on a midpoint only if r's
// significand is even), decided exactly with expansions.
bool is_nearest(const Small& f, const std::vector<double>& terms, int divisor, uint32_t r) {
  const bool neg = (r & f.sign_bit()) != 0;
  const uint32_t m = r & ~f.sign_bit();
  const double s = neg ? -1 : 1;
  const double v = f.magnitude(m);
  // Midpoints towards zero and away from it, in the magnitude's direction.
  const double toward = m == 0 ? 0.0 : (f.magnitude(m - 1) + v) / 2;
  const double away = (v + f.magnitude(m + 1)) / 2;
  auto side = [&](double mid) {  // sign of |sum/divisor| - mid, in r's sign's direction
    std::vector<double> t;
    for (double x : terms) t.push_back(s * x);
    t.push_back(-mid * divisor);
    return exact_sign(t);
  };
  const bool even = (m & 1) == 0;
  const int a = side(away);
  if (m == f.inf()) return side(toward) >= 0;  // at or past the overflow threshold
  if (a > 0 || (a == 0 && !even)) return false;
  if (m == 0) return true;  // |sum| <= half the smallest subnormal: the sign is checked apart
  const int t = side(toward);
  return t > 0 || (t == 0 && even);
}

std::vector<int64_t> encode_all(DataType dtype, const void* values, int n) {
  const int l = exact_limbs(dtype);
  std::vector<int64_t> acc(static_cast<size_t>(l), 0);
  const size_t es = dtype_size(dtype);
  for (int i = 0; i < n; ++i)
    exact_accumulate(dtype, static_cast<const char*>(values) + es * i, 1, acc.data());
  return acc;
}

template <typename U>
U round_acc(DataType dtype, const std::vector<int64_t>& acc, int divisor = 1) {
  U out;
  exact_round(dtype, acc.data(), 1, divisor, &out);
  return out;
}

// Random bits of a finite value of `f` whose exponent field lies in [lo, hi).
uint32_t random_finite(const Small& f, std::mt19937_64& rng, uint32_t lo, uint32_t hi) {
  const int p = f.dtype == DataType::kFloat32 ? 24 : f.dtype == DataType::kFloat16 ? 11 : 8;
  const uint32_t e = lo + static_cast<uint32_t>(rng() % (hi - lo));
  const uint32_t frac = static_cast<uint32_t>(rng()) & ((1u << (p - 1)) - 1);
  return (rng() % 2 ? f.sign_bit() : 0) | (e << (p - 1)) | frac;
}

TEST(ExactTest, LimbsPerDtype) {
  EXPECT_EQ(exact_limbs(DataType::kFloat32), 7);
  EXPECT_EQ(exact_limbs(DataType::kFloat16), 2);
  EXPECT_EQ(exact_limbs(DataType::kBFloat16), 7);
  EXPECT_EQ(exact_limbs(DataType::kFloat64), 45);
  EXPECT_EQ(exact_limbs(DataType::kInt32), 0);
  EXPECT_TRUE(exact_supported(DataType::kFloat32, kExactMaxTerms).ok());
  const Status big = exact_supported(DataType::kFloat32, kExactMaxTerms + 1);
  EXPECT_NE(big.message().find("32768 ranks, at most 32767"), std::string::npos) << big.message();
  const Status i8 = exact_supported(DataType::kInt8, 2);
  EXPECT_NE(i8.message().find("KOLO_REDUCTION=exact: dtype int8"), std::string::npos)
      << i8.message();
}

uint32_t f32(float x) { return float_to_bits(x); }
float sum32(std::vector<float> xs, int divisor = 1) {
  return bits_to_float(round_acc<uint32_t>(
      DataType::kFloat32, encode_all(DataType::kFloat32, xs.data(), static_cast<int>(xs.size())),
      divisor));
}

TEST(ExactTest, Float32EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  const float max = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(sum32({1e8f, 1, -1e8f, 1}), 2.0f);         // 0 or 1 in left-to-right float arithmetic
  EXPECT_EQ(sum32({1, std::ldexp(1.0f, -24)}), 1.0f);  // a tie: to even (down)
  EXPECT_EQ(sum32({1, std::ldexp(1.0f, -24), tiny}), std::nextafter(1.0f, 2.0f));  // past it
  EXPECT_EQ(sum32({std::nextafter(1.0f, 2.0f), std::ldexp(1.0f, -24)}),
            std::nextafter(std::nextafter(1.0f, 2.0f), 2.0f));  // a tie: to even (up)
  EXPECT_EQ(sum32({tiny, tiny, tiny}), 3 * tiny);
  EXPECT_EQ(sum32({max, -max, tiny}), tiny);
  EXPECT_EQ(sum32({max, max, -max}), max);  // no intermediate overflow
  EXPECT_EQ(sum32({max, max}), inf);
  EXPECT_EQ(sum32({-max, -max}), -inf);
  EXPECT_EQ(sum32({max, std::ldexp(1.0f, 103)}), inf);  // exactly half an ulp past: to even
  EXPECT_EQ(sum32({max, std::ldexp(1.0f, 102)}), max);
  EXPECT_EQ(sum32({inf, 1, max}), inf);
  EXPECT_EQ(sum32({-inf, 1}), -inf);
  EXPECT_TRUE(std::isnan(sum32({inf, -inf})));
  EXPECT_TRUE(std::isnan(sum32({1, std::nanf("7"), 2})));
  EXPECT_EQ(f32(sum32({1, -std::nanf("7")})), 0x7fc00000u);  // the default NaN
  EXPECT_EQ(f32(sum32({-0.0f, -0.0f})), f32(-0.0f));
  EXPECT_EQ(f32(sum32({-0.0f, 0.0f})), f32(0.0f));
  EXPECT_EQ(f32(sum32({1, -1})), f32(0.0f));
  EXPECT_EQ(f32(sum32({-1, 1, -0.0f})), f32(0.0f));
  // Averages: round(sum / 3) once, not round(round(sum) / 3).
  EXPECT_EQ(sum32({1, 1, 1}, 3), 1.0f);
  EXPECT_EQ(sum32({1e8f, 1, -1e8f}, 3), 1.0f / 3);
  EXPECT_EQ(sum32({max, max}, 2), max);               // the sum overflows, the average does not
  EXPECT_EQ(f32(sum32({-tiny}, 3)), f32(-0.0f));      // a third of the smallest: -0
  EXPECT_EQ(sum32({tiny, tiny}, 3), tiny);            // two thirds: up
  EXPECT_EQ(sum32({tiny}, 2), 0.0f);                  // a half: to even (0)
  EXPECT_EQ(sum32({tiny, tiny, tiny}, 2), 2 * tiny);  // 1.5: to even (2)
}

// Random float32, float16 and bfloat16 terms over the whole exponent range (subnormals
// included), in random order and signs: each result is the nearest value to the exact sum,
// and every permutation gives the same accumulator.
TEST(ExactTest, SmallFormatsAreCorrectlyRounded) {
  const Small formats[] = {
      {DataType::kFloat32, 32}, {DataType::kFloat16, 16}, {DataType::kBFloat16, 16}};
  std::mt19937_64 rng(7);
  for (const Small& f : formats) {
    const uint32_t emax = f.dtype == DataType::kFloat16 ? 31 : 255;
    for (int trial = 0; trial < 3000; ++trial) {
      const int n = 1 + static_cast<int>(rng() % 12);
      // Narrow windows make cancellations and ties likely; full ones cover the range.
      const uint32_t lo = static_cast<uint32_t>(rng() % emax);
      const uint32_t hi =
          trial % 2 ? emax : std::min(emax, lo + 1 + static_cast<uint32_t>(rng() % 4));
      std::vector<uint32_t> bits;
      std::vector<double> terms;
      for (int i = 0; i < n; ++i) {
        uint32_t b = random_finite(f, rng, lo, hi);
        if (i > 0 && rng() % 4 == 0) b = bits[rng() % bits.size()] ^ f.sign_bit();  // cancel
        bits.push_back(b);
        terms.push_back(f.value(b));
      }
      const int divisor = trial % 3 == 0 ? 1 + static_cast<int>(rng() % 5) : 1;
      std::vector<uint16_t> b16(bits.begin(), bits.end());
      const void* data = f.bits == 32 ? static_cast<const void*>(bits.data()) : b16.data();
      const std::vector<int64_t> acc = encode_all(f.dtype, data, n);
      const uint32_t r = f.bits == 32 ? round_acc<uint32_t>(f.dtype, acc, divisor)
                                      : round_acc<uint16_t>(f.dtype, acc, divisor);
      ASSERT_TRUE(is_nearest(f, terms, divisor, r))
          << dtype_name(f.dtype) << " trial " << trial << " n " << n << " divisor " << divisor
          << " got " << f.value(r) << " fsum " << fsum(terms) / divisor;
      std::shuffle(bits.begin(), bits.end(), rng);
      b16.assign(bits.begin(), bits.end());
      ASSERT_EQ(encode_all(f.dtype, data, n), acc) << dtype_name(f.dtype) << " trial " << trial;
    }
  }
}

TEST(ExactTest, Float64EqualsFsum) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 16);
    const int lo = -1074 + static_cast<int>(rng() % 1900);
    const int width = trial % 2 ? 60 : 1 + static_cast<int>(rng() % 1975);
    std::vector<double> xs;
    for (int i = 0; i < n; ++i) {
      // Below 2^953: sums of 16 stay finite (fsum would overflow on the way).
      const int e = std::min(900, lo + static_cast<int>(rng() % width));
      double x = std::ldexp(static_cast<double>(rng() >> 11), e);
      if (rng() % 2) x = -x;
      if (i > 0 && rng() % 4 == 0) x = -xs[rng() % xs.size()];
      xs.push_back(x);
    }
    const std::vector<int64_t> acc = encode_all(DataType::kFloat64, xs.data(), n);
    const double got = std::bit_cast<double>(round_acc<uint64_t>(DataType::kFloat64, acc));
    const double want = fsum(xs);
    ASSERT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want == 0 ? 0.0 : want))
        << "trial " << trial << " got " << got << " want " << want;
  }
  const double tiny = std::numeric_limits<double>::denorm_min();
  const double max = std::numeric_limits<double>::max();
  const std::vector<double> edge = {max, tiny, -max, 1e300, -1e300, tiny};
  EXPECT_EQ(std::bit_cast<double>(round_acc<uint64_t>(
                DataType::kFloat64, encode_all(DataType::kFloat64, edge.data(), 6))),
            2 * tiny);
}

// Many terms: the digits carry only at the rounding; 2^15 - 1 copies of the largest float32
// value and of the smallest, with every limb at its widest.
TEST(ExactTest, CarriesAtTheLimit) {
  const float max = std::numeric_limits<float>::max();
  std::vector<float> xs(kExactMaxTerms, -max);
  EXPECT_EQ(sum32(xs), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(sum32(xs, kExactMaxTerms), -max);
  xs.assign(kExactMaxTerms, std::nextafter(1.0f, 2.0f));  // every digit below the top non-zero
  EXPECT_EQ(sum32(xs, kExactMaxTerms), std::nextafter(1.0f, 2.0f));
  xs.assign(kExactMaxTerms, std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(sum32(xs), kExactMaxTerms * std::numeric_limits<float>::denorm_min());
  xs.assign(kExactMaxTerms, -0.0f);
  EXPECT_EQ(f32(sum32(xs)), f32(-0.0f));
}

}  // namespace
}  // namespace kolo::ops

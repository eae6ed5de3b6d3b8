// Note [Exact reduction]
// KOLO_REDUCTION=exact promises that a sum (and an average) over the ranks is the correctly
// rounded value of the exact mathematical sum of the ranks' (prescaled) inputs: independent of
// the rank count's grouping, of any order, of the backend and its algorithm. So the result for
// a multiset of values does not depend on which rank holds which, nor on how many ranks hold
// zeros beside them.
//
// The superaccumulator. Every finite value of a binary format with p significand bits is an
// integer multiple of its smallest subnormal, 2^emin (float32: 2^-149), and below 2^(emax+1)
// (2^128): an integer of `span` bits (float32 277, bfloat16 261, float16 40, float64 2098). We
// write it as signed digits of 48 bits, d[0] + d[1] 2^48 + ..., each stored in an int64 limb
// (ceil(span / 48) limbs: float32 6, float64 44, float16 1), every digit carrying the value's
// sign. Summing such limbs limb by limb is integer addition: exact, associative and
// commutative, so any backend and any algorithm (ring, tree, shm, mpi, nccl, with or without
// fusion) gives the same limbs. A digit is below 2^48 in magnitude, so 2^15 - 1 terms fit an
// int64 limb without carrying (kExactMaxTerms); carries are propagated once, at the rounding.
// One more limb, in front, counts per element the terms that are not -0, the +Inf, the -Inf and
// the NaNs, in 16-bit fields (at most kExactMaxTerms each, so no field spills into the next).
// Why not fewer limbs: 32-bit digits (9 limbs for float32) would allow 2^31 ranks at 1.5x the
// bytes; 56-bit digits (5) only 127 ranks. 48 bits with 2^15 ranks is the middle: 7 limbs, 56
// bytes per float32 element, 14x its 4 bytes on the wire (float16 8x, bfloat16 28x, float64
// 45x). A two-pass scheme (allreduce the largest exponent, then a fixed-point sum at that
// scale) sends less but is exact only when the values' range fits its guard bits; this is
// exact always, in one allreduce.
//
// The rounding. Propagate the carries (arithmetic shifts), take the sign from the top digit,
// negate to a magnitude if negative, and round its bits to p significant bits (or to the
// subnormal grid) to nearest, ties to even, with a guard bit and a sticky bit: exact, since
// the magnitude is known to the last bit. An average divides the exact sum by the divisor (the
// contributing ranks) as an integer with one extra bit and a sticky remainder, so the quotient
// too is rounded once: y = round(sum / P), not round(round(sum) / P).
//
// Special values, as IEEE addition would give them in any order: any NaN, or +Inf beside -Inf,
// gives NaN; else an infinity gives itself; a finite sum past the largest value rounds to
// +-Inf. The NaN is the default quiet NaN (payloads are not kept: which one would survive
// depends on an order). An exact zero is +0 unless every term was -0 (IEEE: x + -x = +0 in
// round-to-nearest, -0 + -0 = -0).
//
// What exact does not cover: the prescale rounds each input to its dtype before the sum, and
// the postscale multiplies the rounded result (one more rounding unless it is a power of two or
// 1), as in every mode (docs/determinism.md). min and max are exact already (the result is an
// input); product is not made exact: it runs as without the knob.
#include "ops/exact.h"

#include <algorithm>
#include <cstring>

#include "common/enforce.h"

namespace kolo::ops {

namespace {

constexpr int kDigitBits = 48;
constexpr int64_t kDigitMask = (int64_t{1} << kDigitBits) - 1;
constexpr int kMaxDigits = 44;  // float64: ceil(2098 / 48)
constexpr int kMaxWords = (kDigitBits * (kMaxDigits + 1)) / 64 + 2;

// A binary interchange format: width, significand bits p (with the hidden one), bias, exponent
// bits.
struct Format {
  int bits, p, bias, ebits;
  constexpr int emin() const { return 1 - bias - (p - 1); }                    // smallest ulp
  constexpr int max_ulp() const { return (1 << ebits) - 2 - bias - (p - 1); }  // largest ulp
  constexpr int span() const { return max_ulp() + p - emin(); }
  constexpr int digits() const { return (span() + kDigitBits - 1) / kDigitBits; }
  constexpr uint64_t hidden() const { return uint64_t{1} << (p - 1); }
  constexpr uint64_t exp_ones() const { return (uint64_t{1} << ebits) - 1; }
};
constexpr Format kF16{16, 11, 15, 5}, kBF16{16, 8, 127, 8}, kF32{32, 24, 127, 8},
    kF64{64, 53, 1023, 11};
static_assert(kF32.span() == 277 && kF64.span() == 2098 && kF16.span() == 40);
static_assert(kF64.digits() == kMaxDigits);

const Format* format_of(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return &kF16;
    case DataType::kBFloat16:
      return &kBF16;
    case DataType::kFloat32:
      return &kF32;
    case DataType::kFloat64:
      return &kF64;
    default:
      return nullptr;
  }
}

// The counters of the first limb.
constexpr int kNotNegZeroShift = 0, kPosInfShift = 16, kNegInfShift = 32, kNanShift = 48;
int64_t counter(int64_t limb, int shift) { return (limb >> shift) & 0xffff; }

// F is a template argument so that the limb count and the shifts are constants: the loops unroll.
template <typename U, const Format& f>
void accumulate_as(const U* in, int64_t count, int64_t* acc) {
  constexpr int limbs = f.digits() + 1;
  for (int64_t i = 0; i < count; ++i, acc += limbs) {
    const uint64_t u = in[i];
    const bool negative = (u >> (f.bits - 1)) & 1;
    const uint64_t bexp = (u >> (f.p - 1)) & f.exp_ones();
    const uint64_t frac = u & (f.hidden() - 1);
    if (bexp == f.exp_ones()) {
      acc[0] += int64_t{1} << (frac ? kNanShift : negative ? kNegInfShift : kPosInfShift);
      continue;
    }
    if (!negative || bexp != 0 || frac != 0) acc[0] += int64_t{1} << kNotNegZeroShift;
    // value = m * 2^(emin + t): an integer m at bit t of the fixed-point grid.
    const uint64_t m = bexp ? frac | f.hidden() : frac;
    const int t = bexp ? static_cast<int>(bexp) - 1 : 0;
    unsigned __int128 v = static_cast<unsigned __int128>(m) << (t % kDigitBits);
    for (int k = 1 + t / kDigitBits; v != 0; ++k, v >>= kDigitBits) {
      const auto d = static_cast<int64_t>(static_cast<uint64_t>(v) & kDigitMask);
      acc[k] += negative ? -d : d;
    }
  }
}

// Carries propagated: d[0..n-1] in [0, 2^48), d[n] (the spill) signed.
void propagate(int64_t* d, int n) {
  for (int i = 0; i < n; ++i) {
    const int64_t carry = d[i] >> kDigitBits;  // floor division (arithmetic shift)
    d[i] -= carry * (int64_t{1} << kDigitBits);
    d[i + 1] += carry;
  }
}

// The `len` (<= 64) bits of w from bit lo.
uint64_t bits_at(const uint64_t* w, int nw, int lo, int len) {
  const int k = lo / 64, off = lo % 64;
  uint64_t v = k < nw ? w[k] >> off : 0;
  if (off != 0 && k + 1 < nw) v |= w[k + 1] << (64 - off);
  return len >= 64 ? v : v & ((uint64_t{1} << len) - 1);
}

// Whether any of bits [0, pos) of w is set.
bool any_below(const uint64_t* w, int pos) {
  for (int k = 0; k < pos / 64; ++k)
    if (w[k] != 0) return true;
  const int r = pos % 64;
  return r != 0 && (w[pos / 64] & ((uint64_t{1} << r) - 1)) != 0;
}

// The magnitude w * 2^e0 (plus a sticky fraction below it) rounded to nearest even in f: the
// format's bits without the sign.
uint64_t round_magnitude(const Format& f, const uint64_t* w, int nw, int e0, bool sticky) {
  int top = nw - 1;
  while (top >= 0 && w[top] == 0) --top;
  if (top < 0) return 0;  // below half the smallest subnormal (a quotient): zero
  const int h = 64 * top + 63 - __builtin_clzll(w[top]);
  int ulp = std::max(h + e0 - (f.p - 1), f.emin());
  const int s = ulp - e0;  // >= 0: w's grid is at least as fine as f's
  uint64_t m = bits_at(w, nw, s, f.p);
  const bool guard = s >= 1 && bits_at(w, nw, s - 1, 1) != 0;
  sticky = sticky || (s >= 2 && any_below(w, s - 1));
  if (guard && (sticky || (m & 1))) ++m;
  if (m == (uint64_t{1} << f.p)) {
    m >>= 1;
    ++ulp;
  }
  if (ulp > f.max_ulp()) return f.exp_ones() << (f.p - 1);  // Inf
  if (m < f.hidden()) return m;                             // subnormal (ulp == emin)
  return (static_cast<uint64_t>(ulp - f.emin() + 1) << (f.p - 1)) | (m & (f.hidden() - 1));
}

// Packs digits d[0..n] (each in [0, 2^48)) into 64-bit words; returns their number.
int pack(const int64_t* d, int n, uint64_t* w) {
  const int nw = (kDigitBits * (n + 1)) / 64 + 2;
  std::memset(w, 0, sizeof(uint64_t) * static_cast<size_t>(nw));
  for (int i = 0; i <= n; ++i) {
    const auto v = static_cast<uint64_t>(d[i]);
    const int k = kDigitBits * i / 64, off = kDigitBits * i % 64;
    w[k] |= v << off;
    if (off > 64 - kDigitBits) w[k + 1] |= v >> (64 - off);
  }
  return nw;
}

// Divides w by divisor in place; whether a remainder was left.
bool divide_words(uint64_t* w, int nw, uint64_t divisor) {
  unsigned __int128 rem = 0;
  for (int k = nw - 1; k >= 0; --k) {
    const unsigned __int128 cur = (rem << 64) | w[k];
    w[k] = static_cast<uint64_t>(cur / divisor);
    rem = cur % divisor;
  }
  return rem != 0;
}

template <const Format& f>
uint64_t round_one(const int64_t* acc, int64_t divisor) {
  const uint64_t sign_bit = uint64_t{1} << (f.bits - 1);
  const uint64_t inf = f.exp_ones() << (f.p - 1);
  const int64_t c = acc[0];
  const bool pos_inf = counter(c, kPosInfShift) != 0, neg_inf = counter(c, kNegInfShift) != 0;
  if (counter(c, kNanShift) != 0 || (pos_inf && neg_inf)) return inf | (f.hidden() >> 1);
  if (pos_inf || neg_inf) return neg_inf ? inf | sign_bit : inf;

  constexpr int n = f.digits();
  int64_t d[n + 1];
  std::memcpy(d, acc + 1, sizeof(int64_t) * static_cast<size_t>(n));
  d[n] = 0;
  propagate(d, n);
  const bool negative = d[n] < 0;  // the digits below are >= 0
  if (negative) {
    for (int i = 0; i <= n; ++i) d[i] = -d[i];
    propagate(d, n);
  }
  // An exact zero is -0 only if every term was.
  if (std::all_of(d, d + n + 1, [](int64_t x) { return x == 0; }))
    return counter(c, kNotNegZeroShift) == 0 ? sign_bit : 0;
  uint64_t w[kMaxWords + 1];  // pack() writes (48 (n + 1)) / 64 + 2 words
  int nw = pack(d, n, w);
  int e0 = f.emin();
  bool sticky = false;
  if (divisor > 1) {
    for (int k = nw - 1; k > 0; --k) w[k] = (w[k] << 1) | (w[k - 1] >> 63);  // a guard bit
    w[0] <<= 1;
    --e0;
    sticky = divide_words(w, nw, static_cast<uint64_t>(divisor));
  }
  const uint64_t magnitude = round_magnitude(f, w, nw, e0, sticky);
  // A nonzero quotient that rounds to 0 keeps its sign.
  return negative ? magnitude | sign_bit : magnitude;
}

template <typename U, const Format& f>
void round_as(const int64_t* acc, int64_t count, int64_t divisor, U* out) {
  constexpr int limbs = f.digits() + 1;
  for (int64_t i = 0; i < count; ++i)
    out[i] = static_cast<U>(round_one<f>(acc + i * limbs, divisor));
}

}  // namespace

bool exact_dtype(DataType dtype) { return format_of(dtype) != nullptr; }

int exact_limbs(DataType dtype) {
  const Format* f = format_of(dtype);
  return f ? f->digits() + 1 : 0;
}

Status exact_supported(DataType dtype, int ranks) {
  if (!exact_dtype(dtype))
    return Status::InvalidArgument(
        "KOLO_REDUCTION=exact: dtype " + std::string(dtype_name(dtype)) +
        " has no exact sum here (float16, bfloat16, float32, float64 have; integers are exact "
        "already) (docs/determinism.md)");
  if (ranks > kExactMaxTerms)
    return Status::InvalidArgument("KOLO_REDUCTION=exact: " + std::to_string(ranks) +
                                   " ranks, at most " + std::to_string(kExactMaxTerms) +
                                   " fit its accumulator (docs/determinism.md)");
  return Status::Ok();
}

void exact_encode(DataType dtype, const void* in, int64_t count, int64_t* acc) {
  std::memset(acc, 0, sizeof(int64_t) * static_cast<size_t>(count * exact_limbs(dtype)));
  exact_accumulate(dtype, in, count, acc);
}

void exact_accumulate(DataType dtype, const void* in, int64_t count, int64_t* acc) {
  switch (dtype) {
    case DataType::kFloat16:
      return accumulate_as<uint16_t, kF16>(static_cast<const uint16_t*>(in), count, acc);
    case DataType::kBFloat16:
      return accumulate_as<uint16_t, kBF16>(static_cast<const uint16_t*>(in), count, acc);
    case DataType::kFloat32:
      return accumulate_as<uint32_t, kF32>(static_cast<const uint32_t*>(in), count, acc);
    case DataType::kFloat64:
      return accumulate_as<uint64_t, kF64>(static_cast<const uint64_t*>(in), count, acc);
    default:
      KOLO_ENFORCE(false, "exact_accumulate of " << dtype_name(dtype));
  }
}

void exact_round(DataType dtype, const int64_t* acc, int64_t count, int64_t divisor, void* out) {
  KOLO_ENFORCE(divisor >= 1, "exact_round: divisor " << divisor);
  switch (dtype) {
    case DataType::kFloat16:
      return round_as<uint16_t, kF16>(acc, count, divisor, static_cast<uint16_t*>(out));
    case DataType::kBFloat16:
      return round_as<uint16_t, kBF16>(acc, count, divisor, static_cast<uint16_t*>(out));
    case DataType::kFloat32:
      return round_as<uint32_t, kF32>(acc, count, divisor, static_cast<uint32_t*>(out));
    case DataType::kFloat64:
      return round_as<uint64_t, kF64>(acc, count, divisor, static_cast<uint64_t*>(out));
    default:
      KOLO_ENFORCE(false, "exact_round of " << dtype_name(dtype));
  }
}

}  // namespace kolo::ops

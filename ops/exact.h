// The superaccumulator of KOLO_REDUCTION=exact (Note [Exact reduction] in exact.cc): each
// floating-point element as a fixed-point integer over its format's whole exponent range, in
// int64 limbs that any backend can sum (integer addition is exact and associative), and the
// one correct rounding of such a sum back to the format.
//
// Contracts. Pure functions on caller-owned buffers, no allocation but a few words on the stack;
// thread-safe. The accumulator of element i is limbs(dtype) consecutive int64 at acc + i *
// limbs(dtype). An accumulator holds the sum of at most kMaxTerms elements; more may overflow
// its limbs (undefined results, never a crash): callers check the rank count (exact_supported).
#pragma once

#include <cstdint>
#include <string>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::ops {

// Terms one accumulator can hold: the 16-bit counters of its first limb, and 2^15 digits of
// 48 bits each fit an int64 limb.
inline constexpr int kExactMaxTerms = 32767;

// Whether `dtype` has an exact form: float16, bfloat16, float32, float64.
bool exact_dtype(DataType dtype);
// int64 limbs per element: float16 2, bfloat16 and float32 7, float64 45; 0 for the others.
int exact_limbs(DataType dtype);

// OK, or InvalidArgument naming KOLO_REDUCTION=exact and what is wrong: a dtype without an
// exact form, or more than kExactMaxTerms ranks.
Status exact_supported(DataType dtype, int ranks);

// acc[i] = the accumulator of in[i], for i in [0, count). Every value is taken as it is:
// finite values exactly, +-Inf and NaN counted (NaN payloads are not kept).
void exact_encode(DataType dtype, const void* in, int64_t count, int64_t* acc);
// acc[i] += the accumulator of in[i]: a local sum of several inputs (piggy-back), exact too.
void exact_accumulate(DataType dtype, const void* in, int64_t count, int64_t* acc);
// out[i] = the sum held by acc[i] divided by `divisor` (>= 1), rounded once to nearest, ties to
// even (IEEE round-to-nearest; beyond the largest finite value: +-Inf). Any NaN, or both
// infinities, give the default quiet NaN (positive, payload 0x...8...); else any infinity gives
// it. An exact zero is -0 only when every term was -0. acc is not modified.
void exact_round(DataType dtype, const int64_t* acc, int64_t count, int64_t divisor, void* out);

}  // namespace kolo::ops

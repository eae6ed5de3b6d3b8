// Element-wise reduction and scaling kernels on CPU buffers, one per (dtype, op). The loops are
// written so that GCC vectorises them at -O3. float16 and bfloat16 are converted to float,
// combined, and rounded back once per call, so a chain of reductions rounds once per step.
#pragma once

#include <cstdint>
#include <span>

#include "kolo/types.h"

namespace kolo::ops {

// dst[i] = dst[i] (op) src[i] for i in [0, count). kAverage combines as a sum. Integer sums and
// products wrap modulo 2^bits (two's complement); min/max of floats follow `a < b ? a : b`.
// dst and src may be equal but must not partially overlap.
void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* src, int64_t count);

// out[i] = a[i] (op) b[i]; out may equal a or b.
void reduce_to(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, int64_t count);

// out[i] = ((sources[0][i] (op) sources[1][i]) (op) sources[2][i]) ... : a left fold in the
// order of `sources`, so the result's bits depend on the sources' values and order only (Note
// [Deterministic reduction] in ops/deterministic.cc). `acc` is scratch of `count` elements for
// the partial results (unused for fewer than three sources); it may be sources[0], which is then
// overwritten, or `out`, but must not overlap sources[1..]. `out` may be any source. One source:
// a copy.
void reduce_in_order(DataType dtype, ReduceOp op, void* out, std::span<const void* const> sources,
                     void* acc, int64_t count);

// data[i] *= factor. A factor of exactly 1 returns at once. Integers multiply in double and
// truncate toward zero (a result outside the type's range is unspecified: kolo/types.h);
// float16/bfloat16 multiply in float and round once.
void scale(DataType dtype, void* data, int64_t count, double factor);

// data[i] /= divisor (for kAverage: a true division, so that an integer or float average of
// values whose sum divides evenly is exact). Integers divide in double and truncate toward zero.
void divide(DataType dtype, void* data, int64_t count, double divisor);

// Completes a reduction that `contributors` ranks took part in, by kolo::Reduction's rule
// (the one implementation of it): kAverage divides by contributors, then every op multiplies
// by reduction.postscale. The prescale and the combining are the caller's.
void finish_reduction(DataType dtype, const Reduction& reduction, void* data, int64_t count,
                      int contributors);

// Copies count elements from src to dst multiplying by factor on the way (a fused copy+scale
// for fusion buffers). factor 1 is a plain memcpy.
void scale_copy(DataType dtype, void* dst, const void* src, int64_t count, double factor);

}  // namespace kolo::ops

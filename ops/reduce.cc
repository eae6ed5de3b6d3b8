// Reduction kernels. Each (dtype, op) pair instantiates one simple loop over __restrict
// pointers so that GCC -O3 -march=native turns it into SIMD code. float16 and bfloat16 are
// processed in blocks: widen a block of each operand to float, combine in float, narrow once.
// Because the float result of one combine of two 16-bit values is exact for min/max and
// correctly rounded once for sum/product, a chain of reductions rounds exactly once per step.
#include "ops/reduce.h"

#include <cstring>
#include <type_traits>

#include "common/enforce.h"
#include "kolo/float16.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kolo::ops {
namespace {

// Integer sums and products wrap (computed in an unsigned type, where overflow is defined). Types
// narrower than int compute in unsigned int: their unsigned type would promote to (signed) int,
// where a uint16 product such as 65535 * 65535 overflows.
template <typename T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
template <typename T>
struct WideOf<T, true> {
  using type =
      std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <typename T>
using Wide = typename WideOf<T>::type;

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
  }
};
struct Product {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <typename Op, typename T>
void native_into(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], src[i]);
}
template <typename Op, typename T>
void native_self(T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], dst[i]);
}
template <typename Op, typename T>
void native_to(T* __restrict out, const T* __restrict a, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

// ---- 16-bit float formats -------------------------------------------------------------------

enum class Half16 { kFloat16, kBFloat16 };

// Elements per block: two float blocks of this size (8 KiB) stay in L1.
constexpr int64_t kBlock = 1024;

template <Half16 F>
void widen(const uint16_t* __restrict in, float* __restrict out, int64_t n) {
  int64_t i = 0;
  if constexpr (F == Half16::kFloat16) {
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
    for (; i < n; ++i) out[i] = half_to_float(in[i]);
  } else {
    for (; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
  }
}

template <Half16 F>
void narrow(const float* __restrict in, uint16_t* __restrict out, int64_t n) {
  int64_t i = 0;
  if constexpr (F == Half16::kFloat16) {
#if defined(__F16C__)
    // vcvtps2ph with round-to-nearest-even is the same correctly rounded conversion as
    // float_to_half (reduce_test checks the two agree).
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; ++i) out[i] = float_to_half(in[i]);
  } else {
    for (; i < n; ++i) out[i] = float_to_bfloat16(in[i]);
  }
}

// out may equal a or b: each block is widened completely before anything is written.
template <Half16 F, typename Op>
void half_to(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = n - i < kBlock ? n - i : kBlock;
    widen<F>(a + i, fa, m);
    widen<F>(b + i, fb, m);
    native_into<Op, float>(fa, fb, m);
    narrow<F>(fa, out + i, m);
  }
}

template <Half16 F>
void half_map(uint16_t* out, const uint16_t* in, int64_t n, float mul, float div) {
  alignas(64) float f[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = n - i < kBlock ? n - i : kBlock;
    widen<F>(in + i, f, m);
    for (int64_t j = 0; j < m; ++j) f[j] = f[j] * mul / div;
    narrow<F>(f, out + i, m);
  }
}

// ---- dispatch -------------------------------------------------------------------------------

template <typename Op, typename T>
void native_reduce(void* out, const void* a, const void* b, int64_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  // Every op is commutative, so an output that aliases one operand becomes the destination of
  // an in-place combine; only then may the loops promise the compiler no aliasing.
  if (o == x && o == y) {
    native_self<Op, T>(o, n);
  } else if (o == x) {
    native_into<Op, T>(o, y, n);
  } else if (o == y) {
    native_into<Op, T>(o, x, n);
  } else {
    native_to<Op, T>(o, x, y, n);
  }
}

template <typename Op>
void reduce_typed(DataType dtype, void* out, const void* a, const void* b, int64_t n) {
  switch (dtype) {
    case DataType::kUInt8:
      return native_reduce<Op, uint8_t>(out, a, b, n);
    case DataType::kInt8:
      return native_reduce<Op, int8_t>(out, a, b, n);
    case DataType::kInt16:
      return native_reduce<Op, int16_t>(out, a, b, n);
    case DataType::kInt32:
      return native_reduce<Op, int32_t>(out, a, b, n);
    case DataType::kInt64:
      return native_reduce<Op, int64_t>(out, a, b, n);
    case DataType::kFloat32:
      return native_reduce<Op, float>(out, a, b, n);
    case DataType::kFloat64:
      return native_reduce<Op, double>(out, a, b, n);
    case DataType::kFloat16:
      return half_to<Half16::kFloat16, Op>(static_cast<uint16_t*>(out),
                                           static_cast<const uint16_t*>(a),
                                           static_cast<const uint16_t*>(b), n);
    case DataType::kBFloat16:
      return half_to<Half16::kBFloat16, Op>(static_cast<uint16_t*>(out),
                                            static_cast<const uint16_t*>(a),
                                            static_cast<const uint16_t*>(b), n);
  }
}

// out[i] = in[i] * mul / div. Floats compute in their own precision (float for the 16-bit
// formats); integers in double, truncated toward zero.
template <typename T>
void native_map(void* out, const void* in, int64_t n, double mul, double div) {
  T* __restrict o = static_cast<T*>(out);
  const T* __restrict x = static_cast<const T*>(in);
  if constexpr (std::is_integral_v<T>) {
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(static_cast<double>(x[i]) * mul / div);
  } else {
    const T m = static_cast<T>(mul);
    const T d = static_cast<T>(div);
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * m / d;
  }
}

template <typename T>
void native_map_inplace(void* data, int64_t n, double mul, double div) {
  T* o = static_cast<T*>(data);
  if constexpr (std::is_integral_v<T>) {
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(static_cast<double>(o[i]) * mul / div);
  } else {
    const T m = static_cast<T>(mul);
    const T d = static_cast<T>(div);
    for (int64_t i = 0; i < n; ++i) o[i] = o[i] * m / d;
  }
}

void map(DataType dtype, void* out, const void* in, int64_t n, double mul, double div) {
  const bool inplace = out == in;
  switch (dtype) {
    case DataType::kUInt8:
      return inplace ? native_map_inplace<uint8_t>(out, n, mul, div)
                     : native_map<uint8_t>(out, in, n, mul, div);
    case DataType::kInt8:
      return inplace ? native_map_inplace<int8_t>(out, n, mul, div)
                     : native_map<int8_t>(out, in, n, mul, div);
    case DataType::kInt16:
      return inplace ? native_map_inplace<int16_t>(out, n, mul, div)
                     : native_map<int16_t>(out, in, n, mul, div);
    case DataType::kInt32:
      return inplace ? native_map_inplace<int32_t>(out, n, mul, div)
                     : native_map<int32_t>(out, in, n, mul, div);
    case DataType::kInt64:
      return inplace ? native_map_inplace<int64_t>(out, n, mul, div)
                     : native_map<int64_t>(out, in, n, mul, div);
    case DataType::kFloat32:
      return inplace ? native_map_inplace<float>(out, n, mul, div)
                     : native_map<float>(out, in, n, mul, div);
    case DataType::kFloat64:
      return inplace ? native_map_inplace<double>(out, n, mul, div)
                     : native_map<double>(out, in, n, mul, div);
    case DataType::kFloat16:
      return half_map<Half16::kFloat16>(static_cast<uint16_t*>(out),
                                        static_cast<const uint16_t*>(in), n,
                                        static_cast<float>(mul), static_cast<float>(div));
    case DataType::kBFloat16:
      return half_map<Half16::kBFloat16>(static_cast<uint16_t*>(out),
                                         static_cast<const uint16_t*>(in), n,
                                         static_cast<float>(mul), static_cast<float>(div));
  }
}

}  // namespace

void reduce_to(DataType dtype, ReduceOp op, void* out, const void* a, const void* b,
               int64_t count) {
  if (count <= 0) return;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return reduce_typed<Sum>(dtype, out, a, b, count);
    case ReduceOp::kMin:
      return reduce_typed<Min>(dtype, out, a, b, count);
    case ReduceOp::kMax:
      return reduce_typed<Max>(dtype, out, a, b, count);
    case ReduceOp::kProduct:
      return reduce_typed<Product>(dtype, out, a, b, count);
  }
}

void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* src, int64_t count) {
  reduce_to(dtype, op, dst, dst, src, count);
}

void reduce_in_order(DataType dtype, ReduceOp op, void* out, std::span<const void* const> sources,
                     void* acc, int64_t count) {
  const size_t n = sources.size();
  KOLO_ENFORCE(n >= 1);
  if (count <= 0) return;
  if (n == 1) {
    if (out != sources[0])
      std::memcpy(out, sources[0], static_cast<size_t>(count) * dtype_size(dtype));
    return;
  }
  const void* partial = sources[0];
  for (size_t q = 1; q < n; ++q) {
    // The last step writes the result; earlier ones keep it in `acc`, since `out` may be a
    // source that is still to be read.
    void* to = q + 1 == n ? out : acc;
    reduce_to(dtype, op, to, partial, sources[q], count);
    partial = to;
  }
}

void scale(DataType dtype, void* data, int64_t count, double factor) {
  if (count <= 0 || factor == 1.0) return;
  map(dtype, data, data, count, factor, 1.0);
}

void divide(DataType dtype, void* data, int64_t count, double divisor) {
  if (count <= 0 || divisor == 1.0) return;
  map(dtype, data, data, count, 1.0, divisor);
}

void finish_reduction(DataType dtype, const Reduction& reduction, void* data, int64_t count,
                      int contributors) {
  if (reduction.op == ReduceOp::kAverage) divide(dtype, data, count, contributors);
  scale(dtype, data, count, reduction.postscale);
}

void scale_copy(DataType dtype, void* dst, const void* src, int64_t count, double factor) {
  if (count <= 0) return;
  if (factor == 1.0) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(dtype));
    return;
  }
  map(dtype, dst, src, count, factor, 1.0);
}

}  // namespace kolo::ops

#include "framework/kernels/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kolo/float16.h"

namespace kolo::fw::kernels::cpu {

void fill(int64_t n, float value, float* y) { std::fill(y, y + n, value); }
void axpby(int64_t n, float a, const float* x, float b, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + b * y[i];
}
void scale(int64_t n, float a, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}
void mul(int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
void add(int64_t n, const float* a, float alpha, const float* b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + alpha * b[i];
}
void addcmul(int64_t n, float* y, const float* a, const float* b, float v) {
  for (int64_t i = 0; i < n; ++i) y[i] += v * a[i] * b[i];
}
void addcdiv_sqrt(int64_t n, float* y, const float* a, const float* b, float v, float eps) {
  for (int64_t i = 0; i < n; ++i) y[i] += v * a[i] / (std::sqrt(b[i]) + eps);
}
void relu_fwd(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
void relu_bwd(int64_t n, const float* x, const float* gy, float* gx) {
  for (int64_t i = 0; i < n; ++i) gx[i] = x[i] > 0.f ? gy[i] : 0.f;
}
void sigmoid_fwd(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + std::exp(-x[i]));
}
void sigmoid_bwd(int64_t n, const float* y, const float* gy, float* gx) {
  for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] * y[i] * (1.f - y[i]);
}
void tanh_fwd(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
void tanh_bwd(int64_t n, const float* y, const float* gy, float* gx) {
  for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] * (1.f - y[i] * y[i]);
}
float sum(int64_t n, const float* x) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return static_cast<float>(s);
}
float sq_sum(int64_t n, const float* x) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(s);
}
void f32_to_f16(int64_t n, const float* x, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_half(x[i]);
}
void f16_to_f32(int64_t n, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = half_to_float(x[i]);
}
void f32_to_bf16(int64_t n, const float* x, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bfloat16(x[i]);
}
void bf16_to_f32(int64_t n, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = bfloat16_to_float(x[i]);
}

const char* blas_core_name() { return openblas_get_corename(); }
void set_blas_threads(int n) { openblas_set_num_threads(n); }
int blas_threads() { return openblas_get_num_threads(); }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  const int lda = static_cast<int>(trans_a ? m : k);
  const int ldb = static_cast<int>(trans_b ? k : n);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, static_cast<int>(n));
}
void add_row_bias(int64_t rows, int64_t cols, const float* bias, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
  }
}
void col_sum(int64_t rows, int64_t cols, const float* x, float beta, float* out) {
  for (int64_t j = 0; j < cols; ++j) out[j] *= beta;
  if (beta == 0.f) std::fill(out, out + cols, 0.f);  // beta 0 must also clear NaN garbage
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] += row[j];
  }
}
void add_channel_bias(int64_t n, int64_t c, int64_t hw, const float* bias, float* y) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      float* p = y + (i * c + ch) * hw;
      const float b = bias[ch];
      for (int64_t j = 0; j < hw; ++j) p[j] += b;
    }
}
namespace {
// Sum of one contiguous run, in 16 float lanes that the compiler keeps in vector registers (a
// single double accumulator serialises on the add latency). Runs here are one feature-map plane
// (at most a few thousand values), short enough for float partial sums; callers add the planes
// in double.
float run_sum(int64_t n, const float* p) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += p[j + l];
  float s = 0.f;
  for (; j < n; ++j) s += p[j];
  for (int l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}
}  // namespace

void channel_sum(int64_t n, int64_t c, int64_t hw, const float* x, float beta, float* out) {
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += run_sum(hw, x + (i * c + ch) * hw);
    out[ch] = static_cast<float>(s) + (beta == 0.f ? 0.f : beta * out[ch]);
  }
}

namespace {

// Output columns [x0, x1) of one im2col row read inside the input row; the rest hit padding.
// Tap kj reads input column ix = x * stride - pad + kj, so 0 <= ix < w gives the bounds below.
struct ColRange {
  int64_t x0, x1;
};
ColRange valid_cols(const ConvGeom& g, int64_t ow, int64_t kj) {
  const int64_t lo = g.pad - kj;            // ix >= 0  <=>  x * stride >= lo
  const int64_t hi = g.w - 1 + g.pad - kj;  // ix < w   <=>  x * stride <= hi
  const int64_t x0 = lo <= 0 ? 0 : std::min(ow, (lo + g.stride - 1) / g.stride);
  const int64_t x1 = hi < 0 ? 0 : std::min(ow, hi / g.stride + 1);
  return {x0, std::max(x0, x1)};
}

}  // namespace

// Row (ci, ki, kj) of col holds, for every output pixel, the input pixel that kernel tap
// multiplies, or 0 in the padding. The valid part of each output row is one contiguous range
// (computed once per tap), so stride-1 layers copy it with memcpy and only the padded edges are
// filled: 1.4x faster than a bounds test per pixel on the 14x14 planes of the example CNN.
void im2col(const ConvGeom& g, const float* img, float* col) {
  const int64_t oh = g.oh(), ow = g.ow();
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        float* out = col + ((ci * g.kh + ki) * g.kw + kj) * oh * ow;
        const auto [x0, x1] = valid_cols(g, ow, kj);
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t iy = y * g.stride - g.pad + ki;
          float* orow = out + y * ow;
          if (iy < 0 || iy >= g.h) {
            std::fill(orow, orow + ow, 0.f);
            continue;
          }
          // src[k * stride] is the tap for output column x0 + k.
          const float* src = img + (ci * g.h + iy) * g.w + (x0 * g.stride - g.pad + kj);
          std::fill(orow, orow + x0, 0.f);
          if (g.stride == 1) {
            std::memcpy(orow + x0, src, static_cast<size_t>(x1 - x0) * sizeof(float));
          } else {
            for (int64_t x = x0; x < x1; ++x) orow[x] = src[(x - x0) * g.stride];
          }
          std::fill(orow + x1, orow + ow, 0.f);
        }
      }
}
void col2im(const ConvGeom& g, const float* col, float* img) {
  const int64_t oh = g.oh(), ow = g.ow();
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const float* in = col + ((ci * g.kh + ki) * g.kw + kj) * oh * ow;
        const auto [x0, x1] = valid_cols(g, ow, kj);
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t iy = y * g.stride - g.pad + ki;
          if (iy < 0 || iy >= g.h) continue;
          float* __restrict dst = img + (ci * g.h + iy) * g.w + (x0 * g.stride - g.pad + kj);
          const float* __restrict src = in + y * ow + x0;
          const int64_t len = x1 - x0;
          if (g.stride == 1) {
            for (int64_t k = 0; k < len; ++k) dst[k] += src[k];
          } else {
            for (int64_t k = 0; k < len; ++k) dst[k * g.stride] += src[k];
          }
        }
      }
}

// Note [CPU convolution]
// Each image goes through im2col into a scratch buffer of [C*KH*KW, OH*OW] floats, then one sgemm
// writes its [OC, OH*OW] output in place (no transpose), and the bias is added while that output
// is still in cache. Why per image and not one sgemm over the batch (or chunks of it): the
// per-image operands stay in L2 (225 KiB of im2col for a 32->64 3x3 layer on 14x14), and on one
// core 128 per-image sgemms measured as fast as, or faster than, one batched sgemm of the same
// work; batching would only add an im2col buffer of 29 MiB per layer at batch 128, whose
// allocation and page faults cost more than redoing the cheap (memcpy) im2col in backward.
// Backward walks the images once: bias gradient summed while gy is in cache, weight gradient
// accumulated by sgemm (beta 0 for the first image, so nothing needs zeroing), input gradient by
// sgemm into a second scratch and col2im into the image's slot.
// A 1x1, stride-1, unpadded kernel needs no im2col: the image already is the [C, H*W] matrix.
namespace {
bool im2col_is_identity(const ConvGeom& g) {
  return g.kh == 1 && g.kw == 1 && g.stride == 1 && g.pad == 0;
}
}  // namespace

void conv2d_fwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w,
                const float* bias, float* y) {
  const int64_t ohw = g.oh() * g.ow(), ckk = g.c * g.kh * g.kw, in_img = g.c * g.h * g.w;
  const bool direct = im2col_is_identity(g);
  std::vector<float> col(direct ? 0 : static_cast<size_t>(ckk * ohw));
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * in_img;
    if (!direct) im2col(g, xi, col.data());
    float* yi = y + i * oc * ohw;
    gemm(false, false, oc, ohw, ckk, 1.f, w, direct ? xi : col.data(), 0.f, yi);
    if (bias) add_channel_bias(1, oc, ohw, bias, yi);
  }
}

void conv2d_bwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w,
                const float* gy, float* gx, float* gw, float* gb) {
  const int64_t ohw = g.oh() * g.ow(), ckk = g.c * g.kh * g.kw, in_img = g.c * g.h * g.w;
  const bool direct = im2col_is_identity(g);
  std::vector<float> col(gw && !direct ? static_cast<size_t>(ckk * ohw) : 0);
  std::vector<float> gcol(gx && !direct ? static_cast<size_t>(ckk * ohw) : 0);
  if (gw && n == 0) fill(oc * ckk, 0.f, gw);
  if (gb) fill(oc, 0.f, gb);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * in_img;
    const float* gyi = gy + i * oc * ohw;
    if (gb) channel_sum(1, oc, ohw, gyi, 1.f, gb);
    if (gw) {
      if (!direct) im2col(g, xi, col.data());
      gemm(false, true, oc, ckk, ohw, 1.f, gyi, direct ? xi : col.data(), i == 0 ? 0.f : 1.f, gw);
    }
    if (!gx) continue;
    float* gxi = gx + i * in_img;
    if (direct) {
      gemm(true, false, ckk, ohw, oc, 1.f, w, gyi, 0.f, gxi);
      continue;
    }
    gemm(true, false, ckk, ohw, oc, 1.f, w, gyi, 0.f, gcol.data());
    fill(in_img, 0.f, gxi);
    col2im(g, gcol.data(), gxi);
  }
}

namespace {

// The 2x2 stride-2 window of every CNN here gets fixed taps and a select-only body that GCC
// vectorises: the winning tap is random on real activations, and the branchy generic loop cost
// as much as the sgemm of the next layer. Ties go to the first tap in scan order, like the generic
// loop and the CUDA kernel (they differ only for NaN, which this path propagates).
void maxpool2x2_fwd(const PoolGeom& g, const float* x, float* y, int32_t* argmax) {
  const int64_t oh = g.oh(), ow = g.ow(), w = g.w;
  const auto w32 = static_cast<int32_t>(w);
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * g.h * w;
    for (int64_t i = 0; i < oh; ++i) {
      const float* __restrict r0 = in + 2 * i * w;
      const float* __restrict r1 = r0 + w;
      float* __restrict yo = y + (p * oh + i) * ow;
      int32_t* __restrict ao = argmax + (p * oh + i) * ow;
      const auto base = static_cast<int32_t>(2 * i * w);
      for (int64_t j = 0; j < ow; ++j) {
        const float a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
        // Comparisons become 0/1 integers and the maxima std::max, so nothing here is a branch
        // (GCC turned the equivalent ?: selects into mispredicted jumps).
        const int32_t right_top = b > a, right_bottom = d > c;
        const float top = std::max(a, b), bottom = std::max(c, d);
        const int32_t pick_bottom = bottom > top;
        const int32_t top_at = right_top, bottom_at = w32 + right_bottom;
        yo[j] = std::max(top, bottom);
        ao[j] = base + static_cast<int32_t>(2 * j) + top_at + pick_bottom * (bottom_at - top_at);
      }
    }
  }
}

}  // namespace

void maxpool_fwd(const PoolGeom& g, const float* x, float* y, int32_t* argmax) {
  if (g.k == 2 && g.stride == 2) return maxpool2x2_fwd(g, x, y, argmax);
  const int64_t oh = g.oh(), ow = g.ow();
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * g.h * g.w;
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t where = 0;
        for (int64_t a = 0; a < g.k; ++a) {
          const int64_t row = (i * g.stride + a) * g.w + j * g.stride;
          for (int64_t b = 0; b < g.k; ++b)
            if (in[row + b] > best) {
              best = in[row + b];
              where = static_cast<int32_t>(row + b);
            }
        }
        y[(p * oh + i) * ow + j] = best;
        argmax[(p * oh + i) * ow + j] = where;
      }
  }
}
void maxpool_bwd(const PoolGeom& g, const float* gy, const int32_t* argmax, float* gx) {
  const int64_t per = g.oh() * g.ow();
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t o = 0; o < per; ++o) gx[p * g.h * g.w + argmax[p * per + o]] += gy[p * per + o];
}
void maxpool_bwd_overwrite(const PoolGeom& g, const float* gy, const int32_t* argmax, float* gx) {
  if (g.k != 2 || g.stride != 2 || g.h % 2 != 0 || g.w % 2 != 0) {
    fill(g.planes * g.h * g.w, 0.f, gx);
    return maxpool_bwd(g, gy, argmax, gx);
  }
  // Each 2x2 window owns its four inputs: write the gradient at the recorded tap, 0 elsewhere.
  const int64_t oh = g.oh(), ow = g.ow(), w = g.w;
  const auto w32 = static_cast<int32_t>(w);
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t i = 0; i < oh; ++i) {
      float* __restrict r0 = gx + p * g.h * w + 2 * i * w;
      float* __restrict r1 = r0 + w;
      const float* __restrict go = gy + (p * oh + i) * ow;
      const int32_t* __restrict ao = argmax + (p * oh + i) * ow;
      const auto base = static_cast<int32_t>(2 * i * w);
      for (int64_t j = 0; j < ow; ++j) {
        const int32_t tap = ao[j] - base - static_cast<int32_t>(2 * j);  // 0, 1, w or w+1
        const float v = go[j];
        r0[2 * j] = tap == 0 ? v : 0.f;
        r0[2 * j + 1] = tap == 1 ? v : 0.f;
        r1[2 * j] = tap == w32 ? v : 0.f;
        r1[2 * j + 1] = tap == w32 + 1 ? v : 0.f;
      }
    }
}
void avgpool_fwd(const PoolGeom& g, const float* x, float* y) {
  const int64_t oh = g.oh(), ow = g.ow();
  const float inv = 1.f / static_cast<float>(g.k * g.k);
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * g.h * g.w;
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        float s = 0.f;
        for (int64_t a = 0; a < g.k; ++a)
          for (int64_t b = 0; b < g.k; ++b) s += in[(i * g.stride + a) * g.w + j * g.stride + b];
        y[(p * oh + i) * ow + j] = s * inv;
      }
  }
}
void avgpool_bwd(const PoolGeom& g, const float* gy, float* gx) {
  const int64_t oh = g.oh(), ow = g.ow();
  const float inv = 1.f / static_cast<float>(g.k * g.k);
  for (int64_t p = 0; p < g.planes; ++p) {
    float* out = gx + p * g.h * g.w;
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const float v = gy[(p * oh + i) * ow + j] * inv;
        for (int64_t a = 0; a < g.k; ++a)
          for (int64_t b = 0; b < g.k; ++b) out[(i * g.stride + a) * g.w + j * g.stride + b] += v;
      }
  }
}

void channel_sums(int64_t n, int64_t c, int64_t hw, const float* x, float* sum, float* sum_sq) {
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x + (i * c + ch) * hw;
      for (int64_t j = 0; j < hw; ++j) {
        s += p[j];
        s2 += static_cast<double>(p[j]) * p[j];
      }
    }
    sum[ch] = static_cast<float>(s);
    sum_sq[ch] = static_cast<float>(s2);
  }
}
void channel_dot_sums(int64_t n, int64_t c, int64_t hw, const float* gy, const float* xhat,
                      float* sum_gy, float* sum_gy_xhat) {
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t base = (i * c + ch) * hw;
      for (int64_t j = 0; j < hw; ++j) {
        s += gy[base + j];
        s2 += static_cast<double>(gy[base + j]) * xhat[base + j];
      }
    }
    sum_gy[ch] = static_cast<float>(s);
    sum_gy_xhat[ch] = static_cast<float>(s2);
  }
}
void bn_finalize(int64_t c, float count, float eps, const float* sum, const float* sum_sq,
                 float* mean, float* var, float* invstd) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const double m = static_cast<double>(sum[ch]) / count;
    const double v = std::max(0.0, static_cast<double>(sum_sq[ch]) / count - m * m);
    mean[ch] = static_cast<float>(m);
    var[ch] = static_cast<float>(v);
    invstd[ch] = static_cast<float>(1.0 / std::sqrt(v + eps));
  }
}
void batchnorm_apply(int64_t n, int64_t c, int64_t hw, const float* x, const float* mean,
                     const float* invstd, const float* gamma, const float* beta, float* y,
                     float* xhat) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t base = (i * c + ch) * hw;
      const float m = mean[ch], is = invstd[ch], ga = gamma[ch], be = beta[ch];
      for (int64_t j = 0; j < hw; ++j) {
        const float h = (x[base + j] - m) * is;
        if (xhat) xhat[base + j] = h;
        y[base + j] = ga * h + be;
      }
    }
}
void batchnorm_bwd_input(int64_t n, int64_t c, int64_t hw, const float* gy, const float* xhat,
                         const float* invstd, const float* gamma, const float* sum_gy,
                         const float* sum_gy_xhat, float count, float* gx) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const float k = gamma[ch] * invstd[ch] / count;
    const float sg = sum_gy[ch], sgx = sum_gy_xhat[ch];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t base = (i * c + ch) * hw;
      for (int64_t j = 0; j < hw; ++j)
        gx[base + j] = k * (count * gy[base + j] - sg - xhat[base + j] * sgx);
    }
  }
}

void log_softmax(int64_t m, int64_t n, const float* x, float* y) {
  for (int64_t r = 0; r < m; ++r) {
    const float* in = x + r * n;
    float* out = y + r * n;
    const float mx = *std::max_element(in, in + n);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(in[j] - mx);
    const float lse = mx + static_cast<float>(std::log(s));
    for (int64_t j = 0; j < n; ++j) out[j] = in[j] - lse;
  }
}
void log_softmax_bwd(int64_t m, int64_t n, const float* y, const float* gy, float* gx) {
  for (int64_t r = 0; r < m; ++r) {
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += gy[r * n + j];
    const float sf = static_cast<float>(s);
    for (int64_t j = 0; j < n; ++j) gx[r * n + j] = gy[r * n + j] - std::exp(y[r * n + j]) * sf;
  }
}
float nll_mean(int64_t m, int64_t n, const float* logp, const int64_t* labels) {
  if (m == 0) return 0.f;
  double s = 0;
  for (int64_t r = 0; r < m; ++r) s -= logp[r * n + labels[r]];
  return static_cast<float>(s / static_cast<double>(m));
}
void softmax_xent_bwd(int64_t m, int64_t n, const float* logp, const int64_t* labels, float g,
                      float* gx) {
  const float k = m == 0 ? 0.f : g / static_cast<float>(m);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) gx[r * n + j] = std::exp(logp[r * n + j]) * k;
    gx[r * n + labels[r]] -= k;
  }
}

}  // namespace kolo::fw::kernels::cpu

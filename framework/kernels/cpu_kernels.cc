#include "framework/kernels/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/float16.h"

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
void channel_sum(int64_t n, int64_t c, int64_t hw, const float* x, float beta, float* out) {
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x + (i * c + ch) * hw;
      for (int64_t j = 0; j < hw; ++j) s += p[j];
    }
    out[ch] = static_cast<float>(s) + (beta == 0.f ? 0.f : beta * out[ch]);
  }
}

// Row (ci, ki, kj) of col holds, for every output pixel, the input pixel that kernel tap
// multiplies, or 0 in the padding. Inner loop runs over output columns so stride-1 convolutions
// read the input contiguously.
void im2col(const ConvGeom& g, const float* img, float* col) {
  const int64_t oh = g.oh(), ow = g.ow();
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        float* out = col + ((ci * g.kh + ki) * g.kw + kj) * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t iy = y * g.stride - g.pad + ki;
          float* orow = out + y * ow;
          if (iy < 0 || iy >= g.h) {
            std::fill(orow, orow + ow, 0.f);
            continue;
          }
          const float* irow = img + (ci * g.h + iy) * g.w;
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t ix = x * g.stride - g.pad + kj;
            orow[x] = (ix >= 0 && ix < g.w) ? irow[ix] : 0.f;
          }
        }
      }
}
void col2im(const ConvGeom& g, const float* col, float* img) {
  const int64_t oh = g.oh(), ow = g.ow();
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const float* in = col + ((ci * g.kh + ki) * g.kw + kj) * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t iy = y * g.stride - g.pad + ki;
          if (iy < 0 || iy >= g.h) continue;
          float* irow = img + (ci * g.h + iy) * g.w;
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t ix = x * g.stride - g.pad + kj;
            if (ix >= 0 && ix < g.w) irow[ix] += in[y * ow + x];
          }
        }
      }
}

void maxpool_fwd(const PoolGeom& g, const float* x, float* y, int32_t* argmax) {
  const int64_t oh = g.oh(), ow = g.ow();
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * g.h * g.w;
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t where = 0;
        for (int64_t a = 0; a < g.k; ++a)
          for (int64_t b = 0; b < g.k; ++b) {
            const int64_t idx = (i * g.stride + a) * g.w + j * g.stride + b;
            if (in[idx] > best) {
              best = in[idx];
              where = static_cast<int32_t>(idx);
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

// The fast CPU convolution and pooling paths against direct definitions: a naive 7-loop
// convolution and a scan over each pooling window. Geometries cover padding wider than the
// kernel overhang, strides that skip columns, 1x1 kernels (no im2col), odd plane sizes and n = 0.
#include "framework/kernels/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "framework/kernels/pool_windows.h"

namespace kolo::fw::kernels::cpu {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

// Input pixel that output (y, x) reads through tap (ki, kj), or -1 in the padding.
int64_t tap_index(const ConvGeom& g, int64_t ci, int64_t y, int64_t x, int64_t ki, int64_t kj) {
  const int64_t iy = y * g.stride - g.pad + ki, ix = x * g.stride - g.pad + kj;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return -1;
  return (ci * g.h + iy) * g.w + ix;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << what << " at " << i;
}

TEST(CpuConv, MatchesDirectDefinition) {
  int checked = 0;
  for (int64_t n : {0, 2})
    for (int64_t k : {1, 2, 3})
      for (int64_t stride : {1, 2})
        for (int64_t pad : {0, 1, 2}) {
          const ConvGeom g{2, 5, 6, k, k, stride, pad};
          const int64_t oc = 3, oh = g.oh(), ow = g.ow(), img = g.c * g.h * g.w;
          const int64_t ckk = g.c * k * k;
          auto x = random_vector(n * img, 1), w = random_vector(oc * ckk, 2);
          auto b = random_vector(oc, 3), gy = random_vector(n * oc * oh * ow, 4);
          std::vector<float> y_ref(n * oc * oh * ow), gx_ref(n * img, 0.f), gw_ref(oc * ckk, 0.f);
          std::vector<float> gb_ref(oc, 0.f);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t o = 0; o < oc; ++o)
              for (int64_t y = 0; y < oh; ++y)
                for (int64_t xo = 0; xo < ow; ++xo) {
                  const int64_t out = ((i * oc + o) * oh + y) * ow + xo;
                  double acc = b[o];
                  gb_ref[o] += gy[out];
                  for (int64_t ci = 0; ci < g.c; ++ci)
                    for (int64_t ki = 0; ki < k; ++ki)
                      for (int64_t kj = 0; kj < k; ++kj) {
                        const int64_t at = tap_index(g, ci, y, xo, ki, kj);
                        if (at < 0) continue;
                        const int64_t wi = ((o * g.c + ci) * k + ki) * k + kj;
                        acc += static_cast<double>(w[wi]) * x[i * img + at];
                        gx_ref[i * img + at] += w[wi] * gy[out];
                        gw_ref[wi] += x[i * img + at] * gy[out];
                      }
                  y_ref[out] = static_cast<float>(acc);
                }
          // Outputs start as garbage: the kernels promise to overwrite them.
          std::vector<float> y(y_ref.size(), 7.f), gx(gx_ref.size(), 7.f), gw(gw_ref.size(), 7.f);
          std::vector<float> gb(oc, 7.f);
          conv2d_fwd(n, g, oc, x.data(), w.data(), b.data(), y.data());
          conv2d_bwd(n, g, oc, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data());
          expect_near_all(y, y_ref, "y");
          expect_near_all(gx, gx_ref, "gx");
          expect_near_all(gw, gw_ref, "gw");
          expect_near_all(gb, gb_ref, "gb");
          // Gradients that are not wanted are not written.
          std::vector<float> gx_only(gx_ref.size(), 7.f);
          conv2d_bwd(n, g, oc, x.data(), w.data(), gy.data(), gx_only.data(), nullptr, nullptr);
          expect_near_all(gx_only, gx_ref, "gx alone");
          ++checked;
        }
  EXPECT_EQ(checked, 36);
}

TEST(CpuPool, MaxPoolMatchesWindowScan) {
  for (int64_t h : {4, 5})
    for (int64_t k : {2, 3})
      for (int64_t stride : {1, 2}) {
        const PoolGeom g{3, h, h + 1, k, stride};
        const int64_t per = g.oh() * g.ow();
        // Values on a coarse grid so that windows contain ties: the first maximum must win.
        auto x = random_vector(g.planes * g.h * g.w, 5);
        for (float& v : x) v = std::round(v * 2.f);
        std::vector<float> y(g.planes * per);
        std::vector<int32_t> am(y.size());
        maxpool_fwd(g, x.data(), y.data(), am.data());
        for (int64_t p = 0; p < g.planes; ++p)
          for (int64_t i = 0; i < g.oh(); ++i)
            for (int64_t j = 0; j < g.ow(); ++j) {
              int64_t best = (i * stride) * g.w + j * stride;
              for (int64_t a = 0; a < k; ++a)
                for (int64_t b = 0; b < k; ++b) {
                  const int64_t at = (i * stride + a) * g.w + j * stride + b;
                  if (x[p * g.h * g.w + at] > x[p * g.h * g.w + best]) best = at;
                }
              const int64_t o = p * per + i * g.ow() + j;
              ASSERT_EQ(am[o], best) << "h " << h << " k " << k << " stride " << stride;
              ASSERT_EQ(y[o], x[p * g.h * g.w + best]);
            }
        // The overwriting backward equals zero fill + scatter.
        auto gy = random_vector(y.size(), 6);
        std::vector<float> scatter(x.size(), 0.f), overwrite(x.size(), 7.f);
        maxpool_bwd(g, gy.data(), am.data(), scatter.data());
        maxpool_bwd_overwrite(g, gy.data(), am.data(), overwrite.data());
        EXPECT_EQ(overwrite, scatter) << "h " << h << " k " << k << " stride " << stride;
      }
}

// windows_containing (pool_windows.h), the index arithmetic of the GPU's gather-form pooling
// backward passes, against a scan of every window: exactly the windows that hold each input.
TEST(PoolWindows, EveryWindowHoldingAnInputAndNoOther) {
  for (int64_t n : {1, 2, 5, 8, 9})
    for (int64_t k = 1; k <= 4 && k <= n; ++k)
      for (int64_t stride = 1; stride <= 4; ++stride) {
        const int64_t out = (n - k) / stride + 1;
        for (int64_t i = 0; i < n; ++i) {
          const WindowRange r = windows_containing(i, k, stride, out);
          for (int64_t o = 0; o < out; ++o) {
            const bool holds = o * stride <= i && i < o * stride + k;
            EXPECT_EQ(holds, r.first <= o && o <= r.last)
                << "n " << n << " k " << k << " stride " << stride << " input " << i << " window "
                << o;
          }
        }
      }
}

// The GPU's gather (one input element at a time, windows in increasing order) written on the
// CPU with the same arithmetic: equal to the scatter of the CPU kernels, overlapping windows too.
// Both add an element's terms in increasing window order, so max pooling's sums (additions only)
// are bit-equal; average pooling's multiply-adds may be fused into FMAs by one build and not the
// other (the sanitizer build differs from Release), so they are equal to float rounding.
TEST(PoolWindows, GatherBackwardEqualsScatter) {
  for (int64_t k : {2, 3})
    for (int64_t stride : {1, 2, 3}) {
      const PoolGeom g{2, 7, 6, k, stride};
      const int64_t oh = g.oh(), ow = g.ow();
      auto x = random_vector(g.planes * g.h * g.w, 8);
      std::vector<float> y(g.planes * oh * ow), gy = random_vector(y.size(), 9);
      std::vector<int32_t> am(y.size());
      maxpool_fwd(g, x.data(), y.data(), am.data());
      std::vector<float> max_scatter(x.size(), 0.f), avg_scatter(x.size(), 0.f);
      maxpool_bwd(g, gy.data(), am.data(), max_scatter.data());
      avgpool_bwd(g, gy.data(), avg_scatter.data());
      for (int64_t idx = 0; idx < g.planes * g.h * g.w; ++idx) {
        const int64_t p = idx / (g.h * g.w), at = idx % (g.h * g.w);
        const WindowRange rows = windows_containing(at / g.w, k, stride, oh);
        const WindowRange cols = windows_containing(at % g.w, k, stride, ow);
        float max_sum = 0.f, avg_sum = 0.f;
        for (int64_t i = rows.first; i <= rows.last; ++i)
          for (int64_t j = cols.first; j <= cols.last; ++j) {
            const int64_t o = (p * oh + i) * ow + j;
            if (am[o] == at) max_sum += gy[o];
            avg_sum += gy[o] * (1.f / static_cast<float>(k * k));
          }
        EXPECT_EQ(max_sum, max_scatter[idx]) << "k " << k << " stride " << stride;
        EXPECT_NEAR(avg_sum, avg_scatter[idx], 1e-6f) << "k " << k << " stride " << stride;
      }
    }
}

}  // namespace
}  // namespace kolo::fw::kernels::cpu

TEST(CpuBlas, ThreadCountIsSetAndRead) {
  const int before = kolo::fw::kernels::cpu::blas_threads();
  kolo::fw::kernels::cpu::set_blas_threads(1);
  EXPECT_EQ(kolo::fw::kernels::cpu::blas_threads(), 1);
  kolo::fw::kernels::cpu::set_blas_threads(before);
  EXPECT_EQ(kolo::fw::kernels::cpu::blas_threads(), before);
}

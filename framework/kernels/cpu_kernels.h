// CPU kernels of the training stack: plain loops over contiguous float32 arrays (written so that
// GCC vectorises them at -O3 -march=native) and OpenBLAS sgemm for matrix products.
// The CUDA twins with identical signatures are in cuda_kernels.h (pointers there are device
// pointers); the few functions marked "CPU only" have none. Callers (functional.cc, tensor.cc) have
// checked shapes; these do no validation. Thread-safety: pure functions of their arguments (scratch
// buffers are local to each call).
#pragma once

#include <cstdint>

namespace kolo::fw::kernels::cpu {

// ---- elementwise (n elements) ----
void fill(int64_t n, float value, float* y);
void axpby(int64_t n, float a, const float* x, float b, float* y);             // y = a*x + b*y
void scale(int64_t n, float a, float* y);                                      // y *= a
void mul(int64_t n, const float* a, const float* b, float* out);               // out = a*b
void add(int64_t n, const float* a, float alpha, const float* b, float* out);  // a + alpha*b
void addcmul(int64_t n, float* y, const float* a, const float* b, float v);    // y += v*a*b
void addcdiv_sqrt(int64_t n, float* y, const float* a, const float* b, float v, float eps);
void relu_fwd(int64_t n, const float* x, float* y);
void relu_bwd(int64_t n, const float* x, const float* gy, float* gx);
void sigmoid_fwd(int64_t n, const float* x, float* y);
void sigmoid_bwd(int64_t n, const float* y, const float* gy, float* gx);
void tanh_fwd(int64_t n, const float* x, float* y);
void tanh_bwd(int64_t n, const float* y, const float* gy, float* gx);
float sum(int64_t n, const float* x);     // accumulated in double
float sq_sum(int64_t n, const float* x);  // accumulated in double
void f32_to_f16(int64_t n, const float* x, uint16_t* y);
void f16_to_f32(int64_t n, const uint16_t* x, float* y);
void f32_to_bf16(int64_t n, const float* x, uint16_t* y);
void bf16_to_f32(int64_t n, const uint16_t* x, float* y);

// ---- matrices, row-major ----
// Name of the OpenBLAS kernel set in use (e.g. "Haswell", "SkylakeX"); OpenBLAS picks it when the
// library loads, and OPENBLAS_CORETYPE overrides the choice. CPU only, for benchmark reports.
const char* blas_core_name();
// The number of threads OpenBLAS splits one sgemm over. OpenBLAS's partition of a product is a
// function of its shape and this count, so a fixed count gives the same bits in every run;
// OpenBLAS's default count follows the host's cores (or OPENBLAS_NUM_THREADS), so it is not
// part of any contract. Process-wide; set it before training, not while a gemm runs. CPU only.
void set_blas_threads(int n);
int blas_threads();
// C[M,N] = alpha * op(A) * op(B) + beta * C, op(A) is [M,K], op(B) is [K,N].
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c);
// y[r, c] += bias[c] for an [rows, cols] matrix.
void add_row_bias(int64_t rows, int64_t cols, const float* bias, float* y);
// out[c] = sum_r x[r, c]  (+ beta * out[c]).
void col_sum(int64_t rows, int64_t cols, const float* x, float beta, float* out);
// y[n, c, i] += bias[c] for an [N, C, HW] array.
void add_channel_bias(int64_t n, int64_t c, int64_t hw, const float* bias, float* y);
// out[c] = sum_{n,i} x[n, c, i]  (+ beta * out[c]).
void channel_sum(int64_t n, int64_t c, int64_t hw, const float* x, float beta, float* out);

// ---- convolution helpers (one image [C, H, W]) ----
struct ConvGeom {
  int64_t c, h, w;      // input channels and size
  int64_t kh, kw;       // kernel
  int64_t stride, pad;  // same in both directions
  int64_t oh() const { return (h + 2 * pad - kh) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - kw) / stride + 1; }
};
// col[(c*kh*kw), (oh*ow)] from one image.
void im2col(const ConvGeom& g, const float* img, float* col);
// img += scatter of col (the adjoint of im2col); img must be zeroed by the caller.
void col2im(const ConvGeom& g, const float* col, float* img);

// ---- whole-batch convolution, CPU only (im2col + sgemm per image; see cpu_kernels.cc) ----
// Unlike the CUDA twins these fuse the bias. x [n, C, H, W], w [oc, C, KH, KW], bias [oc] or
// null -> y [n, oc, OH, OW], overwritten.
void conv2d_fwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w,
                const float* bias, float* y);
// From gy [n, oc, OH, OW]: gx [n, C, H, W], gw [oc, C, KH, KW] and gb [oc]; each may be null
// (not wanted) and each wanted one is overwritten, so none needs zeroing.
void conv2d_bwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w,
                const float* gy, float* gx, float* gw, float* gb);

// ---- pooling over [N*C] planes of H x W, window k, stride s, no padding ----
struct PoolGeom {
  int64_t planes, h, w, k, stride;
  int64_t oh() const { return (h - k) / stride + 1; }
  int64_t ow() const { return (w - k) / stride + 1; }
};
void maxpool_fwd(const PoolGeom& g, const float* x, float* y, int32_t* argmax);
void maxpool_bwd(const PoolGeom& g, const float* gy, const int32_t* argmax,
                 float* gx);  // gx zeroed
// CPU only: the same gradient, but gx need not be zeroed (every element is written), which
// saves a pass over the input-sized gradient when 2x2 stride-2 windows tile the plane.
void maxpool_bwd_overwrite(const PoolGeom& g, const float* gy, const int32_t* argmax, float* gx);
void avgpool_fwd(const PoolGeom& g, const float* x, float* y);
void avgpool_bwd(const PoolGeom& g, const float* gy, float* gx);  // gx zeroed by caller

// ---- batch norm over [N, C, HW] (HW = 1 for BatchNorm1d) ----
// Per-channel sum and sum of squares over N*HW values (overwritten).
void channel_sums(int64_t n, int64_t c, int64_t hw, const float* x, float* sum, float* sum_sq);
// Per-channel sum(gy) and sum(gy * xhat) (overwritten).
void channel_dot_sums(int64_t n, int64_t c, int64_t hw, const float* gy, const float* xhat,
                      float* sum_gy, float* sum_gy_xhat);
// From sums over count values: mean, biased var and invstd = 1/sqrt(var + eps).
void bn_finalize(int64_t c, float count, float eps, const float* sum, const float* sum_sq,
                 float* mean, float* var, float* invstd);
// y = gamma * (x - mean) * invstd + beta; xhat (optional, may be null) receives the normalised x.
void batchnorm_apply(int64_t n, int64_t c, int64_t hw, const float* x, const float* mean,
                     const float* invstd, const float* gamma, const float* beta, float* y,
                     float* xhat);
// gx = gamma * invstd / count * (count * gy - sum_gy - xhat * sum_gy_xhat), where the sums and
// count cover the whole (possibly multi-rank) batch.
void batchnorm_bwd_input(int64_t n, int64_t c, int64_t hw, const float* gy, const float* xhat,
                         const float* invstd, const float* gamma, const float* sum_gy,
                         const float* sum_gy_xhat, float count, float* gx);

// ---- softmax family, rows of an [M, N] matrix ----
void log_softmax(int64_t m, int64_t n, const float* x, float* y);
// gx = gy - exp(y) * rowsum(gy), the adjoint of log_softmax given its output y.
void log_softmax_bwd(int64_t m, int64_t n, const float* y, const float* gy, float* gx);
// loss = -mean_r logp[r, label[r]]; returns it. labels must be in [0, n) (checked by caller).
float nll_mean(int64_t m, int64_t n, const float* logp, const int64_t* labels);
// gx = (softmax - onehot) * g / m.
void softmax_xent_bwd(int64_t m, int64_t n, const float* logp, const int64_t* labels, float g,
                      float* gx);

}  // namespace kolo::fw::kernels::cpu

// CUDA twins of cpu_kernels.h: same signatures and semantics, pointers are device pointers of
// the current device. Everything runs on the calling thread's stream: the legacy default stream
// unless a StreamScope says otherwise (a CUDA graph capture, framework/cuda_graph.h). Either way
// one thread's kernels, cuBLAS/cuDNN calls and the caching allocator's reuse of freed blocks are
// ordered without extra events (a StreamScope's stream must be a blocking one, so that it is
// also ordered with the legacy stream's work).
// Scalar results (sum, sq_sum, nll_mean) synchronise to copy one float back; they, and the host
// copies, throw kolo::Error(kPreconditionFailed) while the stream is being captured.
// Only compiled with KOLO_HAVE_CUDA. GEMM uses cuBLAS; conv uses cuDNN; the rest are our own
// kernels in cuda_kernels.cu; per-channel sums use cuDNN's bias-gradient reduction. Errors from
// CUDA/cuBLAS/cuDNN throw kolo::Error(kIoError).
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/kernels/cpu_kernels.h"  // ConvGeom, PoolGeom

namespace kolo::fw::kernels::cuda {

using cpu::ConvGeom;
using cpu::PoolGeom;

int device_count();  // 0 when no device / driver

// Makes `stream` (a cudaStream_t created without cudaStreamNonBlocking; null: the legacy default
// stream) the calling thread's stream until the scope ends, then restores the previous one.
// Not copyable; scopes nest.
class StreamScope {
 public:
  explicit StreamScope(void* stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  void* previous_;
};
void* current_stream();  // the calling thread's stream (null: legacy)
// Whether the calling thread's stream is being captured into a CUDA graph.
bool capturing();
// Deterministic mode. The elementwise kernels, cuBLAS sgemm (one handle per device, default
// stream), cuDNN's bias-gradient reduction (channel_sum, channel_sums, channel_dot_sums) and
// the cuDNN convolution algorithms give the same bits in every run on the same GPU model and
// toolkit: the algorithms are chosen per shape by cuDNN's heuristics (cudnnGet*Algorithm_v7,
// no timing, so the same choice every run), and `on` restricts that choice to the algorithms
// cuDNN reports deterministic. `on` also makes the scalar reductions (sum, sq_sum, nll_mean)
// run as one block instead of adding block partials with atomicAdd. The pooling backward passes
// gather in a fixed order in either mode (pool_windows.h), overlapping windows included.
// Process-wide; takes effect for shapes not yet seen (the algorithm cache is keyed by the mode).
void set_deterministic(bool on);
void set_device(int device);
// cudaMemcpy in the given direction (synchronous w.r.t. the host).
void copy_h2d(void* dst, const void* src, size_t nbytes);
void copy_d2h(void* dst, const void* src, size_t nbytes);
void copy_d2d(void* dst, const void* src, size_t nbytes);

// Whether float convolutions may use TF32 tensor cores (10-bit mantissa products, float
// accumulation), as PyTorch's torch.backends.cudnn.allow_tf32 (on there). Off by default: the
// main job's convolutions (16 and 32 channels) are bound by memory, not arithmetic, and FMA math
// keeps every GPU result within float rounding of the CPU's, which the tests compare. Turn it on
// for wide, compute-bound convolutions. Process-wide, thread-safe; the algorithm cache is keyed
// by it.
void set_allow_tf32(bool on);
// cuDNN convolution over a batch: x [n, c, h, w], w [oc, c, kh, kw], y [n, oc, oh, ow]. The
// algorithms are cuDNN's heuristic first choice per shape that fits the workspace cap (1 GiB,
// at most half the free memory; the workspace comes from the caching allocator), cached per
// (device, shape, deterministic, tf32). Throws kolo::Error(kIoError) naming the cuDNN call that
// failed, kInvalidArgument when a dimension does not fit cuDNN's int.
void conv2d_fwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w, float* y);
// gx and gw (each may be null: not computed) overwritten from gy.
void conv2d_bwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w,
                const float* gy, float* gx, float* gw);
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
// C[M,N] = alpha * op(A) * op(B) + beta * C, op(A) is [M,K], op(B) is [K,N].
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c);
// y = relu(x w^T + b) for row-major x [n, in], w [out, in], b [out], y [n, out]: one cuBLASLt
// matmul (float, no TF32) with the CUBLASLT_EPILOGUE_RELU_BIAS epilogue on the calling thread's
// stream. The algorithm is cuBLASLt's heuristic first choice, cached per (device, shape, pointer
// alignments), its workspace from the caching allocator. Returns false, having done nothing,
// where it does not apply: deterministic mode (the unfused gemm, add_row_bias and relu_fwd are the
// kernels documented deterministic) or no algorithm for the shape; the caller runs those three.
// Throws kolo::Error(kIoError) naming the cuBLASLt call that failed.
bool linear_bias_relu(int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                      const float* b, float* y);
// y[r, c] += bias[c] for an [rows, cols] matrix.
void add_row_bias(int64_t rows, int64_t cols, const float* bias, float* y);
// out[c] = sum_r x[r, c]  (+ beta * out[c]).
void col_sum(int64_t rows, int64_t cols, const float* x, float beta, float* out);
// y[n, c, i] += bias[c] for an [N, C, HW] array.
void add_channel_bias(int64_t n, int64_t c, int64_t hw, const float* bias, float* y);
// out[c] = sum_{n,i} x[n, c, i]  (+ beta * out[c]). cuDNN's bias gradient
// (cudnnConvolutionBackwardBias), float accumulation; also the reduction under channel_sums and
// channel_dot_sums, which multiply into a scratch array first.
void channel_sum(int64_t n, int64_t c, int64_t hw, const float* x, float beta, float* out);

// ---- deprecated (0.2): convolutions run on cuDNN, which nothing here calls these for ----
// col[(c*kh*kw), (oh*ow)] from one image [C, H, W].
[[deprecated("unused since convolutions run on cuDNN; removed after 0.2")]] void im2col(
    const ConvGeom& g, const float* img, float* col);
// img += scatter of col (the adjoint of im2col, with float atomicAdd: not reproducible where
// windows overlap); img must be zeroed by the caller.
[[deprecated("unused since convolutions run on cuDNN; removed after 0.2")]] void col2im(
    const ConvGeom& g, const float* col, float* img);

// ---- pooling over [N*C] planes of H x W, window k, stride s, no padding ----
void maxpool_fwd(const PoolGeom& g, const float* x, float* y, int32_t* argmax);
void maxpool_bwd(const PoolGeom& g, const float* gy, const int32_t* argmax,
                 float* gx);  // gx overwritten (every element written)
void avgpool_fwd(const PoolGeom& g, const float* x, float* y);
void avgpool_bwd(const PoolGeom& g, const float* gy, float* gx);  // gx overwritten

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
// The capturable forms (nothing read back to the host): out[0] = -mean_r logp[r, label[r]] on
// the device, summed in one block in a fixed order (the value nll_mean gives in deterministic
// mode); and softmax_xent_bwd with g read from g[0] on the device.
void nll_mean_to(int64_t m, int64_t n, const float* logp, const int64_t* labels, float* out);
void softmax_xent_bwd_dev(int64_t m, int64_t n, const float* logp, const int64_t* labels,
                          const float* g, float* gx);

}  // namespace kolo::fw::kernels::cuda

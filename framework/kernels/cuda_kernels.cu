// CUDA implementations of cuda_kernels.h. Simple one-thread-per-element kernels with grid-stride
// loops (per plane where the channel is needed); row reductions use one block per row with a
// shared-memory tree in double; per-channel sums are cuDNN's bias-gradient reduction.
// The pooling backward passes gather (pool_windows.h) rather than scatter with atomics.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "framework/kernels/cuda_allocator.h"
#include "framework/kernels/cuda_kernels.h"
#include "framework/kernels/pool_windows.h"
#include "kolo/status.h"

namespace kolo::fw::kernels::cuda {
namespace {

constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(Status::IoError(std::string("CUDA ") + what + ": " + cudaGetErrorString(e)));
}
void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(Status::IoError(std::string("cuBLAS ") + what + " failed with status " +
                                std::to_string(static_cast<int>(s))));
}
void check_dnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw Error(Status::IoError(std::string("cuDNN ") + what + ": " + cudnnGetErrorString(s)));
}
void check_launch(const char* what) { check(cudaGetLastError(), what); }

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

// Deterministic mode (set_deterministic): the scalar reductions run as one block, whose
// thread partition and shared-memory tree are fixed, instead of adding per-block partials in
// whatever order the blocks finish (atomicAdd).
std::atomic<bool> g_deterministic{false};
int reduce_blocks(int64_t n) { return g_deterministic.load() ? 1 : blocks_for(n); }

int current_device() {
  int d = 0;
  cudaGetDevice(&d);
  return d;
}

// The calling thread's stream (StreamScope); null is the legacy default stream.
thread_local cudaStream_t t_stream = nullptr;
cudaStream_t cur() { return t_stream; }

// cuBLAS's workspace, one per device for the process. cublasSetStream resets a handle to
// cuBLAS's own workspace pool, which may allocate while a graph is being captured (and a new
// workspace per capture); a buffer of our own, set after every stream change, cannot. 32 MiB is
// cuBLAS's recommendation for Hopper (more than enough for earlier GPUs). The legacy stream and
// a capture stream never run at once (the capture stream is blocking, see StreamScope), so
// one buffer serves both.
constexpr size_t kBlasWorkspace = size_t{32} << 20;

// One cuBLAS / cuDNN handle per device, created on first use and kept for the process, with
// the stream each was last given: a call sets its handle to the calling thread's stream first.
struct BlasHandle {
  cublasHandle_t h = nullptr;
  void* workspace = nullptr;
  cudaStream_t stream = nullptr;
};
Mutex g_handle_mu;
std::vector<BlasHandle> g_blas KOLO_GUARDED_BY(g_handle_mu);
std::vector<cudnnHandle_t> g_dnn KOLO_GUARDED_BY(g_handle_mu);

cublasHandle_t blas() {
  MutexLock lock(g_handle_mu);
  const int d = current_device();
  if (static_cast<int>(g_blas.size()) <= d) g_blas.resize(d + 1);
  BlasHandle& b = g_blas[d];
  if (!b.h) {
    check(cudaMalloc(&b.workspace, kBlasWorkspace), "cuBLAS workspace");
    check_blas(cublasCreate(&b.h), "create");
    check_blas(cublasSetWorkspace(b.h, b.workspace, kBlasWorkspace), "set workspace");
  }
  if (b.stream != cur()) {
    check_blas(cublasSetStream(b.h, cur()), "set stream");
    check_blas(cublasSetWorkspace(b.h, b.workspace, kBlasWorkspace), "set workspace");
    b.stream = cur();
  }
  return b.h;
}
cudnnHandle_t dnn() {
  MutexLock lock(g_handle_mu);
  const int d = current_device();
  if (static_cast<int>(g_dnn.size()) <= d) g_dnn.resize(d + 1, nullptr);
  if (!g_dnn[d]) check_dnn(cudnnCreate(&g_dnn[d]), "create");
  check_dnn(cudnnSetStream(g_dnn[d], cur()), "set stream");
  return g_dnn[d];
}

// Refuses, naming `what`, an operation that would wait for the device on the host while the
// calling thread's stream is being captured into a CUDA graph (the capture would fail later
// with a less helpful error, or the read would see no value: nothing runs during a capture).
void refuse_during_capture(const char* what) {
  if (!capturing()) return;
  throw Error(Status::PreconditionFailed(
      std::string(what) +
      " reads a value back to the host, which a CUDA graph capture cannot do (read it after "
      "the graph's replay instead)"));
}

#define KOLO_GRID_LOOP(i, n)                                                \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)blockDim.x * gridDim.x)

// Sum of v over the block into element 0 of sh (blockDim.x == kThreads).
__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

__global__ void k_fill(int64_t n, float v, float* y) { KOLO_GRID_LOOP(i, n) y[i] = v; }
__global__ void k_axpby(int64_t n, float a, const float* x, float b, float* y) {
  KOLO_GRID_LOOP(i, n) y[i] = a * x[i] + b * y[i];
}
__global__ void k_scale(int64_t n, float a, float* y) { KOLO_GRID_LOOP(i, n) y[i] *= a; }
__global__ void k_mul(int64_t n, const float* a, const float* b, float* o) {
  KOLO_GRID_LOOP(i, n) o[i] = a[i] * b[i];
}
__global__ void k_add(int64_t n, const float* a, float al, const float* b, float* o) {
  KOLO_GRID_LOOP(i, n) o[i] = a[i] + al * b[i];
}
__global__ void k_addcmul(int64_t n, float* y, const float* a, const float* b, float v) {
  KOLO_GRID_LOOP(i, n) y[i] += v * a[i] * b[i];
}
__global__ void k_addcdiv_sqrt(int64_t n, float* y, const float* a, const float* b, float v,
                               float eps) {
  KOLO_GRID_LOOP(i, n) y[i] += v * a[i] / (sqrtf(b[i]) + eps);
}
__global__ void k_relu_fwd(int64_t n, const float* x, float* y) {
  KOLO_GRID_LOOP(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
__global__ void k_relu_bwd(int64_t n, const float* x, const float* gy, float* gx) {
  KOLO_GRID_LOOP(i, n) gx[i] = x[i] > 0.f ? gy[i] : 0.f;
}
__global__ void k_sigmoid_fwd(int64_t n, const float* x, float* y) {
  KOLO_GRID_LOOP(i, n) y[i] = 1.f / (1.f + expf(-x[i]));
}
__global__ void k_sigmoid_bwd(int64_t n, const float* y, const float* gy, float* gx) {
  KOLO_GRID_LOOP(i, n) gx[i] = gy[i] * y[i] * (1.f - y[i]);
}
__global__ void k_tanh_fwd(int64_t n, const float* x, float* y) {
  KOLO_GRID_LOOP(i, n) y[i] = tanhf(x[i]);
}
__global__ void k_tanh_bwd(int64_t n, const float* y, const float* gy, float* gx) {
  KOLO_GRID_LOOP(i, n) gx[i] = gy[i] * (1.f - y[i] * y[i]);
}
__global__ void k_sum(int64_t n, const float* x, bool squares, double* out) {
  __shared__ double sh[kThreads];
  double s = 0;
  KOLO_GRID_LOOP(i, n) s += squares ? (double)x[i] * x[i] : (double)x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) atomicAdd(out, s);
}
__global__ void k_f32_to_f16(int64_t n, const float* x, uint16_t* y) {
  KOLO_GRID_LOOP(i, n) y[i] = __half_as_ushort(__float2half_rn(x[i]));
}
__global__ void k_f16_to_f32(int64_t n, const uint16_t* x, float* y) {
  KOLO_GRID_LOOP(i, n) y[i] = __half2float(__ushort_as_half(x[i]));
}
__global__ void k_f32_to_bf16(int64_t n, const float* x, uint16_t* y) {
  KOLO_GRID_LOOP(i, n) y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}
__global__ void k_bf16_to_f32(int64_t n, const uint16_t* x, float* y) {
  KOLO_GRID_LOOP(i, n) y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}
__global__ void k_add_row_bias(int64_t rows, int64_t cols, const float* b, float* y) {
  KOLO_GRID_LOOP(i, rows * cols) y[i] += b[i % cols];
}
__global__ void k_col_sum(int64_t rows, int64_t cols, const float* x, float beta, float* out) {
  KOLO_GRID_LOOP(j, cols) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += x[r * cols + j];
    out[j] = (float)s + (beta == 0.f ? 0.f : beta * out[j]);
  }
}
// Elementwise over an [N, C, HW] array where the body needs the channel: f(i, channel). With
// by_plane, blockIdx.y strides over the N*C planes and the x threads over one plane's HW values,
// so the channel costs one 64-bit division per plane instead of two per element (issue 32: the
// bias-add and batch-norm kernels took 26-49 us each at batch 512); small planes (HW under half
// a block, e.g. BatchNorm1d's HW = 1) keep the flat loop, which leaves no thread idle.
template <class F>
__global__ void k_channel_map(int64_t planes, int64_t c, int64_t hw, bool by_plane, F f) {
  if (by_plane) {
    for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
      const int64_t ch = p % c, base = p * hw;
      for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < hw;
           j += (int64_t)blockDim.x * gridDim.x)
        f(base + j, ch);
    }
  } else {
    KOLO_GRID_LOOP(i, planes * hw) f(i, (i / hw) % c);
  }
}
struct AddChannelBias {
  const float* b;
  float* y;
  __device__ void operator()(int64_t i, int64_t ch) const { y[i] += b[ch]; }
};
// Deprecated im2col/col2im (cuda_kernels.h): kept for one release.
__global__ void k_im2col(ConvGeom g, int64_t oh, int64_t ow, const float* img, float* col) {
  KOLO_GRID_LOOP(i, g.c * g.kh * g.kw * oh * ow) {
    const int64_t x = i % ow, y = (i / ow) % oh, r = i / (oh * ow);
    const int64_t kj = r % g.kw, ki = (r / g.kw) % g.kh, ci = r / (g.kw * g.kh);
    const int64_t iy = y * g.stride - g.pad + ki, ix = x * g.stride - g.pad + kj;
    col[i] = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) ? img[(ci * g.h + iy) * g.w + ix] : 0.f;
  }
}
__global__ void k_col2im(ConvGeom g, int64_t oh, int64_t ow, const float* col, float* img) {
  KOLO_GRID_LOOP(i, g.c * g.kh * g.kw * oh * ow) {
    const int64_t x = i % ow, y = (i / ow) % oh, r = i / (oh * ow);
    const int64_t kj = r % g.kw, ki = (r / g.kw) % g.kh, ci = r / (g.kw * g.kh);
    const int64_t iy = y * g.stride - g.pad + ki, ix = x * g.stride - g.pad + kj;
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
      atomicAdd(&img[(ci * g.h + iy) * g.w + ix], col[i]);
  }
}
__global__ void k_maxpool_fwd(PoolGeom g, int64_t oh, int64_t ow, const float* x, float* y,
                              int32_t* am) {
  KOLO_GRID_LOOP(o, g.planes * oh * ow) {
    const int64_t j = o % ow, i = (o / ow) % oh, p = o / (oh * ow);
    const float* in = x + p * g.h * g.w;
    float best = -INFINITY;
    int32_t where = 0;
    for (int64_t a = 0; a < g.k; ++a)
      for (int64_t b = 0; b < g.k; ++b) {
        const int64_t idx = (i * g.stride + a) * g.w + j * g.stride + b;
        if (in[idx] > best) {
          best = in[idx];
          where = (int32_t)idx;
        }
      }
    y[o] = best;
    am[o] = where;
  }
}
// The pooling backward passes gather (pool_windows.h): one thread per input element sums, in
// increasing window order, what the windows holding it send back. No atomics, so the same bits
// in every run even where windows overlap (stride < k), and every element is written.
__global__ void k_maxpool_bwd(PoolGeom g, int64_t oh, int64_t ow, const float* gy,
                              const int32_t* am, float* gx) {
  KOLO_GRID_LOOP(idx, g.planes * g.h * g.w) {
    const int64_t p = idx / (g.h * g.w), at = idx % (g.h * g.w), iy = at / g.w, ix = at % g.w;
    const WindowRange rows = windows_containing(iy, g.k, g.stride, oh);
    const WindowRange cols = windows_containing(ix, g.k, g.stride, ow);
    float s = 0.f;
    for (int64_t i = rows.first; i <= rows.last; ++i)
      for (int64_t j = cols.first; j <= cols.last; ++j) {
        const int64_t o = (p * oh + i) * ow + j;
        if (am[o] == at) s += gy[o];
      }
    gx[idx] = s;
  }
}
__global__ void k_avgpool_bwd(PoolGeom g, int64_t oh, int64_t ow, const float* gy, float* gx) {
  const float inv = 1.f / (float)(g.k * g.k);
  KOLO_GRID_LOOP(idx, g.planes * g.h * g.w) {
    const int64_t p = idx / (g.h * g.w), at = idx % (g.h * g.w), iy = at / g.w, ix = at % g.w;
    const WindowRange rows = windows_containing(iy, g.k, g.stride, oh);
    const WindowRange cols = windows_containing(ix, g.k, g.stride, ow);
    float s = 0.f;
    for (int64_t i = rows.first; i <= rows.last; ++i)
      for (int64_t j = cols.first; j <= cols.last; ++j) s += gy[(p * oh + i) * ow + j] * inv;
    gx[idx] = s;
  }
}
__global__ void k_avgpool_fwd(PoolGeom g, int64_t oh, int64_t ow, const float* x, float* y) {
  const float inv = 1.f / (float)(g.k * g.k);
  KOLO_GRID_LOOP(o, g.planes * oh * ow) {
    const int64_t j = o % ow, i = (o / ow) % oh, p = o / (oh * ow);
    float s = 0.f;
    for (int64_t a = 0; a < g.k; ++a)
      for (int64_t b = 0; b < g.k; ++b)
        s += x[p * g.h * g.w + (i * g.stride + a) * g.w + j * g.stride + b];
    y[o] = s * inv;
  }
}
__global__ void k_bn_finalize(int64_t c, float count, float eps, const float* s, const float* s2,
                              float* mean, float* var, float* invstd) {
  KOLO_GRID_LOOP(ch, c) {
    const double m = (double)s[ch] / count;
    double v = (double)s2[ch] / count - m * m;
    v = v < 0 ? 0 : v;
    mean[ch] = (float)m;
    var[ch] = (float)v;
    invstd[ch] = (float)(1.0 / sqrt(v + eps));
  }
}
struct BnApply {
  const float *x, *mean, *invstd, *gamma, *beta;
  float *y, *xhat;
  __device__ void operator()(int64_t i, int64_t ch) const {
    const float h = (x[i] - mean[ch]) * invstd[ch];
    if (xhat) xhat[i] = h;
    y[i] = gamma[ch] * h + beta[ch];
  }
};
struct BnBwdInput {
  const float *gy, *xhat, *invstd, *gamma, *sg, *sgx;
  float count;
  float* gx;
  __device__ void operator()(int64_t i, int64_t ch) const {
    gx[i] = gamma[ch] * invstd[ch] / count * (count * gy[i] - sg[ch] - xhat[i] * sgx[ch]);
  }
};
// One block per row.
__global__ void k_log_softmax(int64_t n, const float* x, float* y) {
  __shared__ double sh[kThreads];
  const float* in = x + blockIdx.x * n;
  float* out = y + blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) mx = fmaxf(mx, in[j]);
  sh[threadIdx.x] = mx;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  mx = (float)sh[0];
  __syncthreads();
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) s += expf(in[j] - mx);
  s = block_sum(s, sh);
  const float lse = mx + (float)log(s);
  for (int64_t j = threadIdx.x; j < n; j += kThreads) out[j] = in[j] - lse;
}
__global__ void k_log_softmax_bwd(int64_t n, const float* y, const float* gy, float* gx) {
  __shared__ double sh[kThreads];
  const int64_t base = blockIdx.x * n;
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) s += gy[base + j];
  const float sf = (float)block_sum(s, sh);
  for (int64_t j = threadIdx.x; j < n; j += kThreads)
    gx[base + j] = gy[base + j] - expf(y[base + j]) * sf;
}
__global__ void k_nll(int64_t m, int64_t n, const float* logp, const int64_t* labels, double* out) {
  __shared__ double sh[kThreads];
  double s = 0;
  KOLO_GRID_LOOP(r, m) s -= logp[r * n + labels[r]];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) atomicAdd(out, s);
}
// nll_mean_to: one block, so a fixed partition and tree (the deterministic nll_mean's).
__global__ void k_nll_to(int64_t m, int64_t n, const float* logp, const int64_t* labels,
                         float* out) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int64_t r = threadIdx.x; r < m; r += kThreads) s -= logp[r * n + labels[r]];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) out[0] = static_cast<float>(s / static_cast<double>(m));
}
// softmax_xent_bwd with the incoming gradient read on the device (k = g / m as the host does).
__global__ void k_xent_bwd_dev(int64_t m, int64_t n, const float* logp, const int64_t* labels,
                               const float* g, float* gx) {
  const float k = g[0] / static_cast<float>(m);
  KOLO_GRID_LOOP(i, m * n) {
    const int64_t r = i / n, j = i % n;
    gx[i] = (expf(logp[i]) - (labels[r] == j ? 1.f : 0.f)) * k;
  }
}
__global__ void k_xent_bwd(int64_t m, int64_t n, const float* logp, const int64_t* labels, float k,
                           float* gx) {
  KOLO_GRID_LOOP(i, m * n) {
    const int64_t r = i / n, j = i % n;
    gx[i] = (expf(logp[i]) - (labels[r] == j ? 1.f : 0.f)) * k;
  }
}

// A device double used as a reduction target, read back synchronously.
float reduce_to_host(const std::function<void(double*)>& launch, double divisor) {
  refuse_during_capture("a scalar reduction (sum, sq_sum, nll_mean)");
  const int dev = current_device();
  double* d = static_cast<double*>(cuda_alloc::allocate(sizeof(double), dev));
  check(cudaMemsetAsync(d, 0, sizeof(double), cur()), "memset");
  launch(d);
  check_launch("reduction");
  double h = 0;
  cudaError_t e = cudaMemcpyAsync(&h, d, sizeof(double), cudaMemcpyDeviceToHost, cur());
  if (e == cudaSuccess) e = cudaStreamSynchronize(cur());
  cuda_alloc::release(d, sizeof(double), dev);
  check(e, "reduction copy");
  return static_cast<float>(h / divisor);
}

// Device memory from the caching allocator, released when the scope ends (the legacy default
// stream orders the release after every kernel that used it).
struct Workspace {
  void* p = nullptr;
  size_t n = 0;
  int dev = 0;
  explicit Workspace(size_t bytes) : n(bytes), dev(current_device()) {
    if (n) p = cuda_alloc::allocate(n, dev);
  }
  ~Workspace() { cuda_alloc::release(p, n, dev); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
};

// cuDNN's 4-d descriptors take int dimensions and strides: refuse what does not fit, naming it.
int dnn_dim(int64_t v, const char* what) {
  if (v < 0 || v > 0x7fffffff)
    throw Error(Status::InvalidArgument(std::string("cuDNN ") + what + ": dimension " +
                                        std::to_string(v) + " does not fit cuDNN's int"));
  return static_cast<int>(v);
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w, const char* what) {
    dnn_dim(n * c * h * w, what);  // the strides are ints too
    check_dnn(cudnnCreateTensorDescriptor(&d), "tensor descriptor");
    const cudnnStatus_t s =
        cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, dnn_dim(n, what),
                                   dnn_dim(c, what), dnn_dim(h, what), dnn_dim(w, what));
    if (s != CUDNN_STATUS_SUCCESS) cudnnDestroyTensorDescriptor(d);
    check_dnn(s, what);
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

// out[c] = sum_{n,i} x[n, c, i] + beta * out[c] over an [N, C, HW] array. This is exactly what
// cuDNN's convolution bias gradient computes (the sum over every element of a feature map across
// the batch, blended as alpha * result + beta * out; with beta 0, out is not read), and cuDNN
// does it with a reduction that fills the GPU where one block per channel did not (issue 32:
// k_channel_sums was 37% of a CNN step). Accumulates in float, deterministic per cuDNN.
void channel_reduce(int64_t n, int64_t c, int64_t hw, const float* x, float beta, float* out) {
  if (c == 0) return;
  if (n * hw == 0) {  // an empty sum; cuDNN refuses zero-sized dimensions
    if (beta == 0.f)
      k_fill<<<blocks_for(c), kThreads, 0, cur()>>>(c, 0.f, out);
    else
      k_scale<<<blocks_for(c), kThreads, 0, cur()>>>(c, beta, out);
    check_launch("channel_reduce of nothing");
    return;
  }
  TensorDesc xd(n, c, hw, 1, "channel_reduce input"), od(1, c, 1, 1, "channel_reduce output");
  const float one = 1.f;
  check_dnn(cudnnConvolutionBackwardBias(dnn(), &one, xd.d, x, &beta, od.d, out),
            "channel_reduce (cudnnConvolutionBackwardBias)");
}

// out[c] = sum_{n,i} a[n, c, i] * b[n, c, i]: the products into a scratch array, then
// channel_reduce (two passes over memory, both at full bandwidth).
void channel_product_reduce(int64_t n, int64_t c, int64_t hw, const float* a, const float* b,
                            float* out) {
  const int64_t total = n * c * hw;
  if (total == 0) return channel_reduce(n, c, hw, a, 0.f, out);
  Workspace prod(static_cast<size_t>(total) * sizeof(float));
  float* p = static_cast<float*>(prod.p);
  k_mul<<<blocks_for(total), kThreads, 0, cur()>>>(total, a, b, p);
  check_launch("channel_product_reduce");
  channel_reduce(n, c, hw, p, 0.f, out);
}

template <class F>
void launch_channel_map(int64_t n, int64_t c, int64_t hw, F f, const char* what) {
  const int64_t planes = n * c;
  if (planes * hw == 0) return;
  const bool by_plane = hw >= kThreads / 2;
  const int64_t bx = std::min<int64_t>((hw + kThreads - 1) / kThreads, 65535);
  const dim3 grid = by_plane ? dim3(static_cast<unsigned>(bx),
                                    static_cast<unsigned>(std::min<int64_t>(planes, 65535)))
                             : dim3(static_cast<unsigned>(blocks_for(planes * hw)));
  k_channel_map<<<grid, kThreads, 0, cur()>>>(planes, c, hw, by_plane, f);
  check_launch(what);
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
void set_device(int device) { check(cudaSetDevice(device), "set device"); }
// On the legacy stream these are the synchronous cudaMemcpy they always were; on a stream of
// a StreamScope the same copy is queued there and, for the host copies, waited for.
void copy_h2d(void* dst, const void* src, size_t n) {
  refuse_during_capture("a copy from the host (Tensor::to, copy_ from a CPU tensor)");
  if (!cur()) return check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copy host to device");
  check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cur()), "copy host to device");
  check(cudaStreamSynchronize(cur()), "copy host to device");
}
void copy_d2h(void* dst, const void* src, size_t n) {
  refuse_during_capture("a copy to the host (Tensor::to, item, to_vector)");
  if (!cur()) return check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copy device to host");
  check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cur()), "copy device to host");
  check(cudaStreamSynchronize(cur()), "copy device to host");
}
// Device to device is stream-ordered, so on a StreamScope's stream it is queued (and captured).
void copy_d2d(void* dst, const void* src, size_t n) {
  if (!cur()) return check(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "copy device to device");
  check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, cur()), "copy device to device");
}

StreamScope::StreamScope(void* stream) : previous_(t_stream) {
  t_stream = static_cast<cudaStream_t>(stream);
}
StreamScope::~StreamScope() { t_stream = static_cast<cudaStream_t>(previous_); }
void* current_stream() { return t_stream; }
bool capturing() {
  if (!t_stream) return false;  // the legacy stream cannot be captured
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(t_stream, &status), "stream capture status");
  return status != cudaStreamCaptureStatusNone;
}

#define KOLO_LAUNCH(kernel, n, ...)                               \
  do {                                                            \
    if ((n) > 0) {                                                \
      kernel<<<blocks_for(n), kThreads, 0, cur()>>>(__VA_ARGS__); \
      check_launch(#kernel);                                      \
    }                                                             \
  } while (0)

void fill(int64_t n, float v, float* y) { KOLO_LAUNCH(k_fill, n, n, v, y); }
void axpby(int64_t n, float a, const float* x, float b, float* y) {
  KOLO_LAUNCH(k_axpby, n, n, a, x, b, y);
}
void scale(int64_t n, float a, float* y) { KOLO_LAUNCH(k_scale, n, n, a, y); }
void mul(int64_t n, const float* a, const float* b, float* o) { KOLO_LAUNCH(k_mul, n, n, a, b, o); }
void add(int64_t n, const float* a, float al, const float* b, float* o) {
  KOLO_LAUNCH(k_add, n, n, a, al, b, o);
}
void addcmul(int64_t n, float* y, const float* a, const float* b, float v) {
  KOLO_LAUNCH(k_addcmul, n, n, y, a, b, v);
}
void addcdiv_sqrt(int64_t n, float* y, const float* a, const float* b, float v, float eps) {
  KOLO_LAUNCH(k_addcdiv_sqrt, n, n, y, a, b, v, eps);
}
void relu_fwd(int64_t n, const float* x, float* y) { KOLO_LAUNCH(k_relu_fwd, n, n, x, y); }
void relu_bwd(int64_t n, const float* x, const float* gy, float* gx) {
  KOLO_LAUNCH(k_relu_bwd, n, n, x, gy, gx);
}
void sigmoid_fwd(int64_t n, const float* x, float* y) { KOLO_LAUNCH(k_sigmoid_fwd, n, n, x, y); }
void sigmoid_bwd(int64_t n, const float* y, const float* gy, float* gx) {
  KOLO_LAUNCH(k_sigmoid_bwd, n, n, y, gy, gx);
}
void tanh_fwd(int64_t n, const float* x, float* y) { KOLO_LAUNCH(k_tanh_fwd, n, n, x, y); }
void tanh_bwd(int64_t n, const float* y, const float* gy, float* gx) {
  KOLO_LAUNCH(k_tanh_bwd, n, n, y, gy, gx);
}
void set_deterministic(bool on) { g_deterministic.store(on); }

float sum(int64_t n, const float* x) {
  if (n == 0) return 0.f;
  return reduce_to_host(
      [&](double* d) { k_sum<<<reduce_blocks(n), kThreads, 0, cur()>>>(n, x, false, d); }, 1.0);
}
float sq_sum(int64_t n, const float* x) {
  if (n == 0) return 0.f;
  return reduce_to_host(
      [&](double* d) { k_sum<<<reduce_blocks(n), kThreads, 0, cur()>>>(n, x, true, d); }, 1.0);
}
void f32_to_f16(int64_t n, const float* x, uint16_t* y) { KOLO_LAUNCH(k_f32_to_f16, n, n, x, y); }
void f16_to_f32(int64_t n, const uint16_t* x, float* y) { KOLO_LAUNCH(k_f16_to_f32, n, n, x, y); }
void f32_to_bf16(int64_t n, const float* x, uint16_t* y) { KOLO_LAUNCH(k_f32_to_bf16, n, n, x, y); }
void bf16_to_f32(int64_t n, const uint16_t* x, float* y) { KOLO_LAUNCH(k_bf16_to_f32, n, n, x, y); }

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  check_blas(cublasSgemm(blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                         static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                         ldb, a, lda, &beta, c, static_cast<int>(n)),
             "sgemm");
}
void add_row_bias(int64_t rows, int64_t cols, const float* b, float* y) {
  KOLO_LAUNCH(k_add_row_bias, rows * cols, rows, cols, b, y);
}
void col_sum(int64_t rows, int64_t cols, const float* x, float beta, float* out) {
  KOLO_LAUNCH(k_col_sum, cols, rows, cols, x, beta, out);
}
void add_channel_bias(int64_t n, int64_t c, int64_t hw, const float* b, float* y) {
  launch_channel_map(n, c, hw, AddChannelBias{b, y}, "add_channel_bias");
}
void channel_sum(int64_t n, int64_t c, int64_t hw, const float* x, float beta, float* out) {
  channel_reduce(n, c, hw, x, beta, out);
}
void im2col(const ConvGeom& g, const float* img, float* col) {
  KOLO_LAUNCH(k_im2col, g.c * g.kh * g.kw * g.oh() * g.ow(), g, g.oh(), g.ow(), img, col);
}
void col2im(const ConvGeom& g, const float* col, float* img) {
  KOLO_LAUNCH(k_col2im, g.c * g.kh * g.kw * g.oh() * g.ow(), g, g.oh(), g.ow(), col, img);
}
void maxpool_fwd(const PoolGeom& g, const float* x, float* y, int32_t* am) {
  KOLO_LAUNCH(k_maxpool_fwd, g.planes * g.oh() * g.ow(), g, g.oh(), g.ow(), x, y, am);
}
void maxpool_bwd(const PoolGeom& g, const float* gy, const int32_t* am, float* gx) {
  KOLO_LAUNCH(k_maxpool_bwd, g.planes * g.h * g.w, g, g.oh(), g.ow(), gy, am, gx);
}
void avgpool_fwd(const PoolGeom& g, const float* x, float* y) {
  KOLO_LAUNCH(k_avgpool_fwd, g.planes * g.oh() * g.ow(), g, g.oh(), g.ow(), x, y);
}
void avgpool_bwd(const PoolGeom& g, const float* gy, float* gx) {
  KOLO_LAUNCH(k_avgpool_bwd, g.planes * g.h * g.w, g, g.oh(), g.ow(), gy, gx);
}
void channel_sums(int64_t n, int64_t c, int64_t hw, const float* x, float* s, float* s2) {
  channel_reduce(n, c, hw, x, 0.f, s);
  channel_product_reduce(n, c, hw, x, x, s2);
}
void channel_dot_sums(int64_t n, int64_t c, int64_t hw, const float* gy, const float* xhat,
                      float* sg, float* sgx) {
  channel_reduce(n, c, hw, gy, 0.f, sg);
  channel_product_reduce(n, c, hw, gy, xhat, sgx);
}
void bn_finalize(int64_t c, float count, float eps, const float* s, const float* s2, float* mean,
                 float* var, float* invstd) {
  KOLO_LAUNCH(k_bn_finalize, c, c, count, eps, s, s2, mean, var, invstd);
}
void batchnorm_apply(int64_t n, int64_t c, int64_t hw, const float* x, const float* mean,
                     const float* invstd, const float* gamma, const float* beta, float* y,
                     float* xhat) {
  launch_channel_map(n, c, hw, BnApply{x, mean, invstd, gamma, beta, y, xhat}, "batchnorm_apply");
}
void batchnorm_bwd_input(int64_t n, int64_t c, int64_t hw, const float* gy, const float* xhat,
                         const float* invstd, const float* gamma, const float* sg, const float* sgx,
                         float count, float* gx) {
  launch_channel_map(n, c, hw, BnBwdInput{gy, xhat, invstd, gamma, sg, sgx, count, gx},
                     "batchnorm_bwd_input");
}
void log_softmax(int64_t m, int64_t n, const float* x, float* y) {
  if (m == 0) return;
  k_log_softmax<<<static_cast<int>(m), kThreads, 0, cur()>>>(n, x, y);
  check_launch("log_softmax");
}
void log_softmax_bwd(int64_t m, int64_t n, const float* y, const float* gy, float* gx) {
  if (m == 0) return;
  k_log_softmax_bwd<<<static_cast<int>(m), kThreads, 0, cur()>>>(n, y, gy, gx);
  check_launch("log_softmax_bwd");
}
float nll_mean(int64_t m, int64_t n, const float* logp, const int64_t* labels) {
  if (m == 0) return 0.f;
  return reduce_to_host(
      [&](double* d) { k_nll<<<reduce_blocks(m), kThreads, 0, cur()>>>(m, n, logp, labels, d); },
      static_cast<double>(m));
}
void softmax_xent_bwd(int64_t m, int64_t n, const float* logp, const int64_t* labels, float g,
                      float* gx) {
  const float k = m == 0 ? 0.f : g / static_cast<float>(m);
  KOLO_LAUNCH(k_xent_bwd, m * n, m, n, logp, labels, k, gx);
}

void nll_mean_to(int64_t m, int64_t n, const float* logp, const int64_t* labels, float* out) {
  if (m == 0) {
    KOLO_LAUNCH(k_fill, 1, 1, 0.f, out);
    return;
  }
  k_nll_to<<<1, kThreads, 0, cur()>>>(m, n, logp, labels, out);
  check_launch("nll_mean_to");
}
void softmax_xent_bwd_dev(int64_t m, int64_t n, const float* logp, const int64_t* labels,
                          const float* g, float* gx) {
  KOLO_LAUNCH(k_xent_bwd_dev, m * n, m, n, logp, labels, g, gx);
}

// ---- cuBLASLt: GEMM with the bias + ReLU epilogue ----
namespace {
// The most workspace a fused GEMM may ask for (from the caching allocator, per call).
constexpr uint64_t kMaxLtWorkspace = uint64_t{32} << 20;

Mutex g_lt_mu;
std::vector<cublasLtHandle_t> g_lt KOLO_GUARDED_BY(g_lt_mu);
// A heuristic's answer for one key; ok false: no algorithm (the caller falls back, every time).
struct LtChoice {
  bool ok = false;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};
// device, n, in, out, and the alignments of x, w, y, b (cuBLASLt's algorithms depend on them).
using LtKey = std::array<int64_t, 8>;
std::map<LtKey, LtChoice> g_lt_choices KOLO_GUARDED_BY(g_lt_mu);

cublasLtHandle_t lt_handle() {
  MutexLock lock(g_lt_mu);
  const int d = current_device();
  if (static_cast<int>(g_lt.size()) <= d) g_lt.resize(d + 1, nullptr);
  if (!g_lt[d]) check_blas(cublasLtCreate(&g_lt[d]), "Lt create");
  return g_lt[d];
}

// The largest power of two up to 256 dividing the address (cuBLASLt assumes 256 unless told).
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

// The descriptors of one fused call, destroyed with it.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  LtDescs() = default;
  ~LtDescs() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
};

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& v,
              const char* what) {
  check_blas(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)), what);
}

// Row-major y [n, out] = x [n, in] w^T is column-major y^T [out, n] = w^T' x^T where the stored
// w is column-major [in, out] (ld in, transposed by the op) and x column-major [in, n] (ld in):
// m = out, n = n, k = in, and the bias (length m = the rows of D, as RELU_BIAS requires) is added
// to every column of D, i.e. to every row of y.
void make_fused_descs(LtDescs& d, int64_t n, int64_t in, int64_t out, const float* b) {
  check_blas(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "Lt matmul desc");
  set_desc(d.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "Lt transa");
  set_desc(d.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "Lt transb");
  set_desc(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_BIAS, "Lt epilogue");
  // Set before the heuristic too: it reads the pointer's alignment.
  const void* bias = b;
  set_desc(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "Lt bias pointer");
  check_blas(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_32F, in, out, in), "Lt layout w");
  check_blas(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_32F, in, n, in), "Lt layout x");
  check_blas(cublasLtMatrixLayoutCreate(&d.d, CUDA_R_32F, out, n, out), "Lt layout y");
}

// cuBLASLt's first choice for these descriptors and pointer alignments, or ok false.
LtChoice ask_heuristic(const LtDescs& d, uint32_t align_x, uint32_t align_w, uint32_t align_y) {
  cublasLtMatmulPreference_t pref = nullptr;
  check_blas(cublasLtMatmulPreferenceCreate(&pref), "Lt preference");
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v) {
    return cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v));
  };
  cublasStatus_t st = set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxLtWorkspace);
  if (st == CUBLAS_STATUS_SUCCESS) st = set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_w);
  if (st == CUBLAS_STATUS_SUCCESS) st = set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_x);
  if (st == CUBLAS_STATUS_SUCCESS) st = set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_y);
  if (st == CUBLAS_STATUS_SUCCESS) st = set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_y);
  cublasLtMatmulHeuristicResult_t r{};
  int count = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_handle(), d.op, d.a, d.b, d.d, d.d, pref, 1, &r, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED (or no result) is an answer: this shape runs unfused.
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
    check_blas(st, "Lt heuristic");
  LtChoice c;
  if (st == CUBLAS_STATUS_SUCCESS && count > 0 && r.state == CUBLAS_STATUS_SUCCESS)
    c = {true, r.algo, r.workspaceSize};
  return c;
}
}  // namespace

bool linear_bias_relu(int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                      const float* b, float* y) {
  if (g_deterministic.load() || n == 0 || in == 0 || out == 0) return false;
  LtDescs d;
  make_fused_descs(d, n, in, out, b);
  const uint32_t ax = alignment_of(x), aw = alignment_of(w), ay = alignment_of(y);
  const LtKey key{current_device(), n, in, out, ax, aw, ay, alignment_of(b)};
  std::optional<LtChoice> cached;
  {
    MutexLock lock(g_lt_mu);
    auto it = g_lt_choices.find(key);
    if (it != g_lt_choices.end()) cached = it->second;
  }
  if (!cached) {
    cached = ask_heuristic(d, ax, aw, ay);
    MutexLock lock(g_lt_mu);
    g_lt_choices.emplace(key, *cached);
  }
  LtChoice c = *cached;
  if (!c.ok) return false;
  Workspace ws(c.workspace);
  const float one = 1.f, zero = 0.f;  // beta 0: y (as C) is not read
  check_blas(cublasLtMatmul(lt_handle(), d.op, &one, w, d.a, x, d.b, &zero, y, d.d, y, d.d, &c.algo,
                            ws.p, c.workspace, cur()),
             "Lt matmul (bias + ReLU epilogue)");
  return true;
}

// ---- cuDNN convolution ----
namespace {
// TF32 tensor cores for float convolutions (set_allow_tf32); off by default (see the header).
std::atomic<bool> g_allow_tf32{false};
// The most workspace one convolution algorithm may use (and at most half the free memory when
// it is chosen): the heuristics' fastest choices ask for tens of MiB at batch 512, and a cap
// keeps a pathological shape from taking the device's memory.
constexpr size_t kMaxConvWorkspace = size_t{1} << 30;

struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ConvDescs(int64_t n, const ConvGeom& g, int64_t oc) {
    dnn_dim(n * g.c * g.h * g.w, "conv input");  // before anything is created (no leak)
    dnn_dim(n * oc * g.oh() * g.ow(), "conv output");
    check_dnn(cudnnCreateTensorDescriptor(&x), "tensor descriptor");
    check_dnn(cudnnCreateTensorDescriptor(&y), "tensor descriptor");
    check_dnn(cudnnCreateFilterDescriptor(&w), "filter descriptor");
    check_dnn(cudnnCreateConvolutionDescriptor(&conv), "conv descriptor");
    check_dnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, (int)g.c,
                                         (int)g.h, (int)g.w),
              "set x");
    check_dnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, (int)oc,
                                         (int)g.oh(), (int)g.ow()),
              "set y");
    check_dnn(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)oc, (int)g.c,
                                         (int)g.kh, (int)g.kw),
              "set w");
    check_dnn(
        cudnnSetConvolution2dDescriptor(conv, (int)g.pad, (int)g.pad, (int)g.stride, (int)g.stride,
                                        1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "set conv");
  }
  ~ConvDescs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
};

// One algorithm with the math type it runs under and its workspace size for that math type.
struct AlgoChoice {
  int algo;
  cudnnMathType_t math;
  size_t bytes;
};
struct ConvAlgos {
  AlgoChoice fwd, filter, data;
};
// device, n, c, h, w, oc, kh, kw, stride, pad, deterministic, tf32.
using ConvKey = std::array<int64_t, 12>;
Mutex g_algo_mu;
std::map<ConvKey, ConvAlgos> g_algos KOLO_GUARDED_BY(g_algo_mu);

cudnnMathType_t base_math() { return g_allow_tf32.load() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

size_t workspace_limit() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;  // only workspace-free algorithms (or the fallback) then
  }
  return std::min(kMaxConvWorkspace, free_bytes / 2);
}

// The first of cuDNN's heuristic ranking (best first) that succeeded, fits the workspace limit
// and, in deterministic mode, is deterministic; false (c unchanged) when none qualifies. Without
// TF32 the algorithm runs under FMA math whatever math type cuDNN ranked it with.
template <class Perf>
void pick(const Perf* perf, int count, AlgoChoice* c) {
  const bool det = g_deterministic.load(), tf32 = g_allow_tf32.load();
  const size_t limit = workspace_limit();
  for (int i = 0; i < count; ++i) {
    const Perf& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS || r.memory > limit) continue;
    if (det && r.determinism != CUDNN_DETERMINISTIC) continue;
    *c = {static_cast<int>(r.algo), tf32 ? r.mathType : CUDNN_FMA_MATH, 0};
    return;
  }
}

// Each choose_* ranks with cudnnGet*Algorithm_v7 (heuristics, no timing: the same choice in
// every run, which deterministic mode relies on), falls back to the algorithm used before the
// search (deterministic, supported for every geometry we build) and sizes its workspace under
// the chosen math type.
AlgoChoice choose_fwd(const ConvDescs& d) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  check_dnn(cudnnSetConvolutionMathType(d.conv, base_math()), "set math type");
  check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(dnn(), d.x, d.w, d.conv, d.y,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
            "forward algorithm heuristics");
  AlgoChoice c{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, base_math(), 0};
  pick(perf, count, &c);
  check_dnn(cudnnSetConvolutionMathType(d.conv, c.math), "set math type");
  check_dnn(cudnnGetConvolutionForwardWorkspaceSize(dnn(), d.x, d.w, d.conv, d.y,
                                                    (cudnnConvolutionFwdAlgo_t)c.algo, &c.bytes),
            "forward workspace");
  return c;
}
AlgoChoice choose_filter(const ConvDescs& d) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  check_dnn(cudnnSetConvolutionMathType(d.conv, base_math()), "set math type");
  check_dnn(
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          dnn(), d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
      "backward filter algorithm heuristics");
  AlgoChoice c{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, base_math(), 0};
  pick(perf, count, &c);
  check_dnn(cudnnSetConvolutionMathType(d.conv, c.math), "set math type");
  check_dnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                dnn(), d.x, d.y, d.conv, d.w, (cudnnConvolutionBwdFilterAlgo_t)c.algo, &c.bytes),
            "backward filter workspace");
  return c;
}
AlgoChoice choose_data(const ConvDescs& d) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  check_dnn(cudnnSetConvolutionMathType(d.conv, base_math()), "set math type");
  check_dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                dnn(), d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
            "backward data algorithm heuristics");
  AlgoChoice c{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, base_math(), 0};
  pick(perf, count, &c);
  check_dnn(cudnnSetConvolutionMathType(d.conv, c.math), "set math type");
  check_dnn(cudnnGetConvolutionBackwardDataWorkspaceSize(
                dnn(), d.w, d.y, d.conv, d.x, (cudnnConvolutionBwdDataAlgo_t)c.algo, &c.bytes),
            "backward data workspace");
  return c;
}

// The three algorithms for this shape on the current device, chosen once and cached for the
// process (a training step repeats the same few shapes).
ConvAlgos algos_for(int64_t n, const ConvGeom& g, int64_t oc, const ConvDescs& d) {
  const ConvKey key{
      current_device(),   n, g.c, g.h, g.w, oc, g.kh, g.kw, g.stride, g.pad, g_deterministic.load(),
      g_allow_tf32.load()};
  {
    MutexLock lock(g_algo_mu);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) return it->second;
  }
  const ConvAlgos a{choose_fwd(d), choose_filter(d), choose_data(d)};
  MutexLock lock(g_algo_mu);
  g_algos.emplace(key, a);
  return a;
}
}  // namespace

void set_allow_tf32(bool on) { g_allow_tf32.store(on); }

void conv2d_fwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w,
                float* y) {
  ConvDescs d(n, g, oc);
  const AlgoChoice c = algos_for(n, g, oc, d).fwd;
  check_dnn(cudnnSetConvolutionMathType(d.conv, c.math), "set math type");
  Workspace ws(c.bytes);
  const float one = 1.f, zero = 0.f;  // beta 0: y is not read
  check_dnn(
      cudnnConvolutionForward(dnn(), &one, d.x, x, d.w, w, d.conv,
                              (cudnnConvolutionFwdAlgo_t)c.algo, ws.p, c.bytes, &zero, d.y, y),
      "convolution forward");
}

void conv2d_bwd(int64_t n, const ConvGeom& g, int64_t oc, const float* x, const float* w,
                const float* gy, float* gx, float* gw) {
  ConvDescs d(n, g, oc);
  const ConvAlgos a = algos_for(n, g, oc, d);
  const float one = 1.f, zero = 0.f;  // beta 0: gw and gx are overwritten, never read
  if (gw) {
    check_dnn(cudnnSetConvolutionMathType(d.conv, a.filter.math), "set math type");
    Workspace ws(a.filter.bytes);
    check_dnn(cudnnConvolutionBackwardFilter(dnn(), &one, d.x, x, d.y, gy, d.conv,
                                             (cudnnConvolutionBwdFilterAlgo_t)a.filter.algo, ws.p,
                                             a.filter.bytes, &zero, d.w, gw),
              "backward filter");
  }
  if (gx) {
    check_dnn(cudnnSetConvolutionMathType(d.conv, a.data.math), "set math type");
    Workspace ws(a.data.bytes);
    check_dnn(cudnnConvolutionBackwardData(dnn(), &one, d.w, w, d.y, gy, d.conv,
                                           (cudnnConvolutionBwdDataAlgo_t)a.data.algo, ws.p,
                                           a.data.bytes, &zero, d.x, gx),
              "backward data");
  }
}

}  // namespace kolo::fw::kernels::cuda

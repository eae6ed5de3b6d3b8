#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "framework/optim/update_kernels_cuda.h"
#include "kolo/status.h"

namespace kolo::fw::optim_cuda {
namespace {

constexpr int kThreads = 256;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw Error(Status::IoError(std::string(what) + ": " + cudaGetErrorString(err)));
  }
}

// Enough blocks to fill the GPU; each thread strides over the rest.
int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

__global__ void sgd_kernel(float* __restrict__ param, const float* __restrict__ grad,
                           float* __restrict__ buf, int64_t n, kernels::SgdArgs a) {
  const float keep = 1.0f - a.dampening;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = a.grad_scale * (grad[i] + a.weight_decay * param[i]);
    if (a.momentum == 0.0f) {
      param[i] -= a.lr * g;
      continue;
    }
    const float b = a.first ? g : a.momentum * buf[i] + keep * g;
    buf[i] = b;
    param[i] -= a.lr * (a.nesterov ? g + a.momentum * b : b);
  }
}

__global__ void adam_kernel(float* __restrict__ param, const float* __restrict__ grad,
                            float* __restrict__ m, float* __restrict__ v, int64_t n, float lr,
                            float b1, float b2, float eps, float l2, float shrink, float step_size,
                            float inv_sqrt_bc2) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] + l2 * param[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * shrink - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

void sgd_update(int device, float* param, const float* grad, float* buf, int64_t n,
                const kernels::SgdArgs& a) {
  if (n == 0) return;
  check(cudaSetDevice(device), "optim sgd_update: cudaSetDevice");
  sgd_kernel<<<blocks_for(n), kThreads>>>(param, grad, buf, n, a);
  check(cudaGetLastError(), "optim sgd_update: kernel launch");
}

void adam_update(int device, float* param, const float* grad, float* m, float* v, int64_t n,
                 const kernels::AdamArgs& a) {
  if (n == 0) return;
  // The bias corrections are computed once on the host in double, as in the CPU loop.
  const double t = static_cast<double>(a.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), t));
  const float l2 = a.decoupled ? 0.0f : a.weight_decay;
  const float shrink = a.decoupled ? 1.0f - a.lr * a.weight_decay : 1.0f;
  check(cudaSetDevice(device), "optim adam_update: cudaSetDevice");
  adam_kernel<<<blocks_for(n), kThreads>>>(param, grad, m, v, n, a.lr, a.beta1, a.beta2, a.eps, l2,
                                           shrink, a.lr / bc1, 1.0f / std::sqrt(bc2));
  check(cudaGetLastError(), "optim adam_update: kernel launch");
}

}  // namespace kolo::fw::optim_cuda

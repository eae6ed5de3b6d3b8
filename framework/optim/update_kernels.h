// The arithmetic of the optimizers on raw float buffers, kept apart from tensors and parameter
// bookkeeping so that it can be checked against hand-computed values and has one CUDA twin
// (update_kernels_cuda.h) with the same semantics. Loops are simple element-wise passes that
// the compiler vectorises at -O3.
//
// Contract for every function: buffers hold n floats, do not overlap (except as stated) and are
// owned by the caller; n >= 0. No error reporting: the optimizers validate before calling.
#pragma once

#include <cstdint>

namespace kolo::fw::kernels {

// One SGD update with an optional gradient scale (LARS' trust ratio):
//   g'  = grad_scale * (grad + weight_decay * param)
//   buf = first ? g' : momentum * buf + (1 - dampening) * g'      (only when momentum != 0)
//   d   = nesterov ? g' + momentum * buf : buf                     (d = g' without momentum)
//   param -= lr * d
// `buf` may be null when momentum == 0.
struct SgdArgs {
  float lr = 0;
  float momentum = 0;
  float dampening = 0;
  float weight_decay = 0;
  float grad_scale = 1;
  bool nesterov = false;
  bool first = false;  // the momentum buffer has no history yet: it is set to g'
};
void sgd_update(float* param, const float* grad, float* buf, int64_t n, const SgdArgs& a);

// One Adam/AdamW update at 1-based step t:
//   Adam  (decoupled=false): g = grad + weight_decay * param
//   AdamW (decoupled=true):  param *= 1 - lr * weight_decay;  g = grad
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
struct AdamArgs {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  bool decoupled = false;
  int64_t step = 1;
};
void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamArgs& a);

// Sum of squares, accumulated in double so that large layers keep their precision.
double sum_squares(const float* x, int64_t n);

}  // namespace kolo::fw::kernels

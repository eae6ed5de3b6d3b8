#include "framework/optim/update_kernels.h"

#include <cmath>

namespace kolo::fw::kernels {

void sgd_update(float* __restrict param, const float* __restrict grad, float* __restrict buf,
                int64_t n, const SgdArgs& a) {
  const float lr = a.lr, wd = a.weight_decay, s = a.grad_scale, mom = a.momentum;
  if (mom == 0.0f) {
    for (int64_t i = 0; i < n; ++i) param[i] -= lr * (s * (grad[i] + wd * param[i]));
    return;
  }
  // One pass over memory (the loop is bandwidth-bound). `first` and `nesterov` are loop
  // invariant: -O3 unswitches the loop, so each variant still vectorises.
  const bool first = a.first, nesterov = a.nesterov;
  const float keep = 1.0f - a.dampening;
  for (int64_t i = 0; i < n; ++i) {
    const float g = s * (grad[i] + wd * param[i]);
    const float b = first ? g : mom * buf[i] + keep * g;
    buf[i] = b;
    param[i] -= lr * (nesterov ? g + mom * b : b);
  }
}

void adam_update(float* __restrict param, const float* __restrict grad, float* __restrict m,
                 float* __restrict v, int64_t n, const AdamArgs& a) {
  const double t = static_cast<double>(a.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), t));
  const float step_size = a.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float b1 = a.beta1, b2 = a.beta2, eps = a.eps;
  const float l2 = a.decoupled ? 0.0f : a.weight_decay;
  const float shrink = a.decoupled ? 1.0f - a.lr * a.weight_decay : 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + l2 * param[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * shrink - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

double sum_squares(const float* x, int64_t n) {
  // Eight independent partial sums: without -ffast-math the compiler may not reorder one
  // running sum, so the lanes are spelled out to let it vectorise.
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
  double total = 0;
  for (double a : acc) total += a;
  return total;
}

}  // namespace kolo::fw::kernels

#include "framework/optim/update_tensor_ops.h"

#include <cmath>

namespace kolo::fw {

void sgd_update_tensors(Tensor& param, const Tensor& grad, Tensor& buf,
                        const kernels::SgdArgs& a) {
  // g' = grad_scale * (grad + weight_decay * param)
  Tensor g = grad.clone();
  if (a.weight_decay != 0.0f) g.add_(param, a.weight_decay);
  if (a.grad_scale != 1.0f) g.mul_(a.grad_scale);
  if (a.momentum == 0.0f) {
    param.add_(g, -a.lr);
    return;
  }
  if (a.first) {
    buf.copy_(g);
  } else {
    buf.lerp_(g, a.momentum, 1.0f - a.dampening);
  }
  if (a.nesterov) {
    g.add_(buf, a.momentum);
    param.add_(g, -a.lr);
  } else {
    param.add_(buf, -a.lr);
  }
}

void adam_update_tensors(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                         const kernels::AdamArgs& a) {
  const double t = static_cast<double>(a.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), t);
  const double sqrt_bc2 = std::sqrt(1.0 - std::pow(static_cast<double>(a.beta2), t));
  Tensor g = grad;
  if (a.decoupled) {
    if (a.weight_decay != 0.0f) param.mul_(1.0f - a.lr * a.weight_decay);
  } else if (a.weight_decay != 0.0f) {
    g = grad.clone();
    g.add_(param, a.weight_decay);
  }
  m.lerp_(g, a.beta1, 1.0f - a.beta1);
  v.mul_(a.beta2);
  v.addcmul_(g, g, 1.0f - a.beta2);
  // m / (sqrt(v / bc2) + eps) == sqrt(bc2) * m / (sqrt(v) + eps * sqrt(bc2)), which fits the
  // single addcdiv_sqrt_ op.
  const float value = static_cast<float>(-a.lr / bc1 * sqrt_bc2);
  param.addcdiv_sqrt_(m, v, value, static_cast<float>(a.eps * sqrt_bc2));
}

}  // namespace kolo::fw

#include "framework/distributed/sharded_update.h"

#include <cmath>

#include "framework/optim/adam.h"
#include "framework/optim/device_update.h"
#include "framework/optim/lars.h"
#include "framework/optim/sgd.h"
#include "framework/optim/update_kernels.h"

namespace kolo::fw {

double clip_coefficient(double total_sum_of_squares, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = max_norm / (std::sqrt(total_sum_of_squares) + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

SliceUpdater::SliceUpdater(const Optimizer& optimizer) : optimizer_(optimizer) {
  if (dynamic_cast<const SGD*>(&optimizer)) {
    kind_ = Kind::kSgd;
    slots_ = {"momentum"};
  } else if (dynamic_cast<const Adam*>(&optimizer)) {
    kind_ = Kind::kAdam;
    slots_ = {"exp_avg", "exp_avg_sq"};
  } else if (dynamic_cast<const LARS*>(&optimizer)) {
    kind_ = Kind::kLars;
    slots_ = {"momentum"};
  } else {
    throw Error(Status::Unsupported(
        "ShardedOptimizer: cannot shard the state of optimizer '" + optimizer.name() +
        "': only SGD, Adam, AdamW and LARS have sliced updates (sharded_update.h); wrap it in "
        "DistributedOptimizer (no sharding) instead"));
  }
}

double SliceUpdater::default_weight_decay() const {
  switch (kind_) {
    case Kind::kSgd:
      return static_cast<const SGD&>(optimizer_).options().weight_decay;
    case Kind::kAdam:
      return static_cast<const Adam&>(optimizer_).options().weight_decay;
    case Kind::kLars:
      break;
  }
  return static_cast<const LARS&>(optimizer_).options().weight_decay;
}

SliceUpdater::KernelArgs SliceUpdater::kernel_args(int64_t param_dim, double lr,
                                                   double weight_decay, int64_t count,
                                                   const LayerNorms& norms) const {
  KernelArgs k;
  if (kind_ == Kind::kSgd) {
    const SgdOptions& o = static_cast<const SGD&>(optimizer_).options();
    k.sgd.lr = static_cast<float>(lr);
    k.sgd.momentum = static_cast<float>(o.momentum);
    k.sgd.dampening = static_cast<float>(o.dampening);
    k.sgd.weight_decay = static_cast<float>(weight_decay);
    k.sgd.nesterov = o.nesterov;
    k.sgd.first = count == 1;
    return k;
  }
  if (kind_ == Kind::kAdam) {
    const AdamOptions& o = static_cast<const Adam&>(optimizer_).options();
    k.is_adam = true;
    k.adam.lr = static_cast<float>(lr);
    k.adam.beta1 = static_cast<float>(o.beta1);
    k.adam.beta2 = static_cast<float>(o.beta2);
    k.adam.eps = static_cast<float>(o.eps);
    k.adam.weight_decay = static_cast<float>(weight_decay);
    k.adam.decoupled = optimizer_.name() == "AdamW";
    k.adam.step = count;
    return k;
  }
  // LARS, as LARS::update and LARS::trust_ratio compute it on the whole parameter.
  const LarsOptions& o = static_cast<const LARS&>(optimizer_).options();
  const bool adapt = !(o.exclude_1d && param_dim <= 1);
  if (!adapt) weight_decay = 0;
  double ratio = 1.0;
  if (adapt) {
    const double pn = std::sqrt(norms.param_sq), gn = std::sqrt(norms.grad_sq);
    if (pn != 0 && gn != 0) ratio = o.trust_coefficient * pn / (gn + weight_decay * pn + o.eps);
  }
  k.sgd.lr = static_cast<float>(lr);
  k.sgd.momentum = static_cast<float>(o.momentum);
  k.sgd.weight_decay = static_cast<float>(weight_decay);
  k.sgd.grad_scale = static_cast<float>(ratio);
  k.sgd.first = count == 1;
  return k;
}

void SliceUpdater::update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state,
                          int64_t param_dim, double lr, double weight_decay, int64_t count,
                          const LayerNorms& norms) const {
  const KernelArgs k = kernel_args(param_dim, lr, weight_decay, count, norms);
  if (k.is_adam)
    apply_update(param, grad, state[0], state[1], k.adam);
  else
    apply_update(param, grad, state[0], k.sgd);
}

void SliceUpdater::update(float* param, const float* grad, const std::vector<float*>& state,
                          int64_t n, int64_t param_dim, double lr, double weight_decay,
                          int64_t count, const LayerNorms& norms) const {
  const KernelArgs k = kernel_args(param_dim, lr, weight_decay, count, norms);
  if (k.is_adam)
    kernels::adam_update(param, grad, state[0], state[1], n, k.adam);
  else
    kernels::sgd_update(param, grad, state[0], n, k.sgd);
}

}  // namespace kolo::fw

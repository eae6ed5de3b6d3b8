#include "framework/optim/lars.h"

#include <cmath>

#include "framework/optim/device_update.h"
#include "framework/optim/update_kernels.h"

namespace kolo::fw {

LARS::LARS(std::vector<Tensor> params, LarsOptions options)
    : LARS(single_group(std::move(params)), options) {}

LARS::LARS(std::vector<ParamGroup> groups, LarsOptions options)
    : Optimizer("LARS", std::move(groups), options.lr, {"momentum"}), options_(options) {
  check_range("momentum", options.momentum, 0, 1, true);
  if (!std::isfinite(options.weight_decay) || options.weight_decay < 0) {
    invalid("weight_decay must be finite and >= 0, got " + std::to_string(options.weight_decay));
  }
  if (!std::isfinite(options.trust_coefficient) || options.trust_coefficient <= 0) {
    invalid("trust_coefficient must be finite and > 0, got " +
            std::to_string(options.trust_coefficient));
  }
  if (!std::isfinite(options.eps) || options.eps < 0) {
    invalid("eps must be finite and >= 0, got " + std::to_string(options.eps));
  }
  default_weight_decay_ = options.weight_decay;
}

double LARS::trust_ratio(const Tensor& param, const Tensor& grad, double weight_decay) const {
  double p2 = 0, g2 = 0;
  if (param.device().is_cpu()) {
    p2 = kernels::sum_squares(param.data<float>(), param.numel());
    g2 = kernels::sum_squares(grad.data<float>(), grad.numel());
  } else {
    p2 = param.sq_norm();
    g2 = grad.sq_norm();
  }
  const double pn = std::sqrt(p2), gn = std::sqrt(g2);
  if (pn == 0 || gn == 0) return 1.0;
  return options_.trust_coefficient * pn / (gn + weight_decay * pn + options_.eps);
}

void LARS::update(int64_t index, Tensor& param, const Tensor& grad, double lr, double weight_decay,
                  int64_t count) {
  const bool adapt = !(options_.exclude_1d && param.dim() <= 1);
  if (!adapt) weight_decay = 0;
  kernels::SgdArgs a;
  a.lr = static_cast<float>(lr);
  a.momentum = static_cast<float>(options_.momentum);
  a.weight_decay = static_cast<float>(weight_decay);
  a.grad_scale = adapt ? static_cast<float>(trust_ratio(param, grad, weight_decay)) : 1.0f;
  a.first = count == 1;
  apply_update(param, grad, state(index)[0], a);
}

}  // namespace kolo::fw

#include "framework/optim/adam.h"

#include <cmath>

#include "framework/optim/device_update.h"
#include "framework/optim/update_kernels.h"

namespace kolo::fw {

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(single_group(std::move(params)), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(decoupled ? "AdamW" : "Adam", std::move(groups), options.lr,
                {"exp_avg", "exp_avg_sq"}),
      options_(options),
      decoupled_(decoupled) {
  check_range("beta1", options.beta1, 0, 1, true);
  check_range("beta2", options.beta2, 0, 1, true);
  if (!std::isfinite(options.eps) || options.eps <= 0) {
    invalid("eps must be finite and > 0, got " + std::to_string(options.eps));
  }
  if (!std::isfinite(options.weight_decay) || options.weight_decay < 0) {
    invalid("weight_decay must be finite and >= 0, got " + std::to_string(options.weight_decay));
  }
  default_weight_decay_ = options.weight_decay;
}

void Adam::update(int64_t index, Tensor& param, const Tensor& grad, double lr, double weight_decay,
                  int64_t count) {
  kernels::AdamArgs a;
  a.lr = static_cast<float>(lr);
  a.beta1 = static_cast<float>(options_.beta1);
  a.beta2 = static_cast<float>(options_.beta2);
  a.eps = static_cast<float>(options_.eps);
  a.weight_decay = static_cast<float>(weight_decay);
  a.decoupled = decoupled_;
  a.step = count;
  std::vector<Tensor>& s = state(index);
  apply_update(param, grad, s[0], s[1], a);
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam(single_group(std::move(params)), options, true) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), options, true) {}

}  // namespace kolo::fw

#include "framework/optim/sgd.h"

#include <cmath>

#include "framework/optim/device_update.h"
#include "framework/optim/update_kernels.h"

namespace kolo::fw {

SGD::SGD(std::vector<Tensor> params, SgdOptions options)
    : SGD(single_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer("SGD", std::move(groups), options.lr, {"momentum"}), options_(options) {
  check_range("momentum", options.momentum, 0, 1, true);
  check_range("dampening", options.dampening, 0, 1, false);
  if (!std::isfinite(options.weight_decay) || options.weight_decay < 0) {
    invalid("weight_decay must be finite and >= 0, got " + std::to_string(options.weight_decay));
  }
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0)) {
    invalid("nesterov requires momentum > 0 and dampening == 0, got momentum " +
            std::to_string(options.momentum) + ", dampening " + std::to_string(options.dampening));
  }
  default_weight_decay_ = options.weight_decay;
}

void SGD::update(int64_t index, Tensor& param, const Tensor& grad, double lr, double weight_decay,
                 int64_t count) {
  kernels::SgdArgs a;
  a.lr = static_cast<float>(lr);
  a.momentum = static_cast<float>(options_.momentum);
  a.dampening = static_cast<float>(options_.dampening);
  a.weight_decay = static_cast<float>(weight_decay);
  a.nesterov = options_.nesterov;
  a.first = count == 1;
  apply_update(param, grad, state(index)[0], a);
}

}  // namespace kolo::fw

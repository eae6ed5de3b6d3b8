// SGD with momentum, Nesterov momentum and L2 weight decay, following the update of
// kernels::sgd_update (the formulation of torch.optim.SGD):
//   g = grad + weight_decay * param
//   buf = g on a parameter's first update, else momentum * buf + (1 - dampening) * g
//   param -= lr * (nesterov ? g + momentum * buf : buf)      (param -= lr * g when momentum = 0)
// State slot: "momentum" (zeros until the first update). Contract and errors: optimizer.h;
// nesterov requires momentum > 0 and dampening == 0.
#pragma once

#include "framework/optim/optimizer.h"

namespace kolo::fw {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SgdOptions options);
  SGD(std::vector<ParamGroup> groups, SgdOptions options);
  std::string name() const override { return "SGD"; }
  const SgdOptions& options() const { return options_; }

 protected:
  void update(int64_t index, Tensor& param, const Tensor& grad, double lr, double weight_decay,
              int64_t count) override;

 private:
  SgdOptions options_;
};

}  // namespace kolo::fw

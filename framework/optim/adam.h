// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), following kernels::adam_update:
//   Adam:  g = grad + weight_decay * param            (L2 penalty through the gradient)
//   AdamW: param *= 1 - lr * weight_decay; g = grad   (decay decoupled from the moments)
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   param -= lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
// with t the parameter's 1-based update count (kept in the "param_steps" state, so a restored
// checkpoint continues the bias correction). State slots: "exp_avg" (m), "exp_avg_sq" (v).
// Contract and errors: optimizer.h; betas in [0, 1), eps > 0, weight_decay >= 0.
#pragma once

#include "framework/optim/optimizer.h"

namespace kolo::fw {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  void update(int64_t index, Tensor& param, const Tensor& grad, double lr, double weight_decay,
              int64_t count) override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

// AdamW: Adam with decoupled weight decay. PyTorch's default decay is 0.01; set it explicitly.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options);
  AdamW(std::vector<ParamGroup> groups, AdamOptions options);
};

}  // namespace kolo::fw

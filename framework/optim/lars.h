// LARS: layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, "Large Batch Training of
// Convolutional Networks"), the SGD variant that keeps very large global batches (many workers)
// stable. Each parameter tensor (a "layer") gets its own trust ratio
//   ratio = trust_coefficient * ||param|| / (||grad|| + weight_decay * ||param|| + eps)
// (1 when ||param|| or ||grad|| is 0, e.g. a freshly zeroed bias), then momentum SGD runs on
// the scaled gradient:
//   g = ratio * (grad + weight_decay * param);  buf = momentum * buf + g;  param -= lr * buf
// (buf = g on the first update). With exclude_1d (the usual practice) parameters of at most one
// dimension (biases, norm scales) skip both the ratio and the weight decay.
// State slot: "momentum". Contract and errors: optimizer.h.
#pragma once

#include "framework/optim/optimizer.h"

namespace kolo::fw {

struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0;
  double trust_coefficient = 0.001;
  double eps = 0;
  bool exclude_1d = true;
};

class LARS : public Optimizer {
 public:
  LARS(std::vector<Tensor> params, LarsOptions options);
  LARS(std::vector<ParamGroup> groups, LarsOptions options);
  std::string name() const override { return "LARS"; }
  const LarsOptions& options() const { return options_; }

  // The trust ratio the next step would use for this parameter and gradient (for tests and
  // logging). CPU or CUDA.
  double trust_ratio(const Tensor& param, const Tensor& grad, double weight_decay) const;

 protected:
  void update(int64_t index, Tensor& param, const Tensor& grad, double lr, double weight_decay,
              int64_t count) override;

 private:
  LarsOptions options_;
};

}  // namespace kolo::fw

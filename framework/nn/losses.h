// Loss modules (namespace kolo::fw::nn). Both return a one-element tensor (mean over the batch).
#pragma once

#include "framework/functional.h"

namespace kolo::fw::nn {

// Fused log-softmax + negative log-likelihood: logits [N, classes], int64 labels [N].
class CrossEntropyLoss {
 public:
  Tensor operator()(const Tensor& logits, const Tensor& labels) const;
};

// Mean of squared differences; pred and target have the same shape.
class MSELoss {
 public:
  Tensor operator()(const Tensor& pred, const Tensor& target) const;
};

}  // namespace kolo::fw::nn

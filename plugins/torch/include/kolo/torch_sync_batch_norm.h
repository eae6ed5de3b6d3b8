// kolo::torch::SyncBatchNorm2d: torch::nn::BatchNorm2d whose training-mode statistics are those
// of the global batch, over every rank (Kolo::torch). Evaluation uses the running statistics,
// as BatchNorm2d. Same parameters and buffers (weight, bias, running_mean, running_var,
// num_batches_tracked), so a BatchNorm2d's state loads into it.
//
// Each training forward allreduces, per channel, the sum and sum of squares of its input and
// the element count (one [2C + 1] allreduce, so uneven local batches weigh by their samples);
// backward allreduces the gradient of those statistics. Every rank must run forward and
// backward of the module the same number of times (collective). Names: "syncbn<k>.fwd|bwd",
// k counting the SyncBatchNorm2d modules this process built, in order (the same on every rank
// when every rank builds the same model). Errors: kolo::torch::Error (e.g. ranks disagree on C).
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "kolo/torch.h"

#pragma GCC visibility push(default)

namespace kolo::torch {

class SyncBatchNorm2dImpl : public ::torch::nn::Cloneable<SyncBatchNorm2dImpl> {
 public:
  explicit SyncBatchNorm2dImpl(int64_t num_features)
      : SyncBatchNorm2dImpl(::torch::nn::BatchNormOptions(num_features)) {}
  explicit SyncBatchNorm2dImpl(::torch::nn::BatchNormOptions options);
  void reset() override;
  // input: [N, C, H, W]; N may be 0 on some ranks.
  at::Tensor forward(const at::Tensor& input);

  ::torch::nn::BatchNormOptions options;
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::string name_;
};
// TORCH_MODULE(SyncBatchNorm2d), spelled out: the macro names torch::nn unqualified, which
// inside kolo::torch means this namespace.
class SyncBatchNorm2d : public ::torch::nn::ModuleHolder<SyncBatchNorm2dImpl> {
 public:
  using ::torch::nn::ModuleHolder<SyncBatchNorm2dImpl>::ModuleHolder;
  using Impl = SyncBatchNorm2dImpl;
};

}  // namespace kolo::torch
#pragma GCC visibility pop

// ZeRO stages 1 and 2 for Kolo::torch (docs/zero-torch.md): the C++ side of kolo.torch's
// DistributedOptimizer(shard=...). Kept out of kolo/torch.h so that code which does not shard
// does not recompile against it.
#pragma once

#include <cstdint>
#include <vector>

#include "kolo/torch.h"

#pragma GCC visibility push(default)

namespace kolo::torch {

enum class Shard {
  kOptimizerState,  // ZeRO stage 1: each rank keeps optimizer state for its own parameters
  kGradients,       // stage 2: also drops the gradients of other ranks' parameters after reducing
};

// Data-parallel training with the optimizer state sharded across the ranks of
// options.process_set. Each parameter belongs whole to one rank (per param group, largest first,
// to the least loaded rank: PyTorch's ZeroRedundancyOptimizer's partition); the constructor
// leaves in `inner`'s param groups only this rank's parameters, so its step and state see only
// those. step(): the GradientReducer's bucketed allreduce, the inner step on this rank's
// parameters, one broadcast per rank and dtype of its updated parameters.
//
// Errors: the constructor throws Error(InvalidArgument) naming the optimizer when its update is
// not per-parameter (LBFGS; anything but SGD, Adam, AdamW, Adagrad and RMSprop).
class ShardedOptimizer {
 public:
  ShardedOptimizer(::torch::optim::Optimizer& inner,
                   const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                   Shard shard = Shard::kOptimizerState, DistributedOptions options = {});

  void set_local_batch_size(int64_t n) { reducer_.set_local_batch_size(n); }
  // Every parameter's gradient, not only this rank's.
  void zero_grad();
  void step();

  // owner()[i]: the rank (of the process set) that steps the i-th parameter of the groups.
  const std::vector<int>& owner() const { return owner_; }
  const std::vector<at::Tensor>& parameters() const { return params_; }
  GradientReducer& reducer() { return reducer_; }

 private:
  void gather_parameters();

  ::torch::optim::Optimizer& inner_;
  GradientReducer reducer_;
  Shard shard_;
  ProcessSet set_;
  int me_;
  std::vector<at::Tensor> params_;  // every parameter, in the groups' order
  std::vector<int> owner_;
};

}  // namespace kolo::torch
#pragma GCC visibility pop

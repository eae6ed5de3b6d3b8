// The optimizer arithmetic of ZeRO's sharded step: one rank updates a slice of a parameter with
// the same kernels (update_kernels.h on the CPU, their CUDA twins in update_kernels_cuda.h, both
// through device_update.h) and hyperparameters as the wrapped optimizer, on its own slice of the
// optimizer state. The kernels are element-wise, so updating a slice gives the elements the
// whole-tensor update would give, bit for bit, given the same gradient.
//
// LARS' trust ratio and global-norm clipping need norms of tensors that span ranks: the caller
// sums partial sums of squares over the ranks (one small allreduce) and passes the totals in.
//
// Errors: SliceUpdater's constructor throws kolo::Error(Unsupported) for an optimizer whose
// state it cannot shard (a type other than SGD, Adam, AdamW and LARS), naming it.
// Thread-safety: none; use from the training thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/optim/optimizer.h"
#include "framework/optim/update_kernels.h"
#include "framework/tensor.h"

namespace kolo::fw {

// The scale global-norm clipping applies to every gradient (torch.nn.utils.clip_grad_norm_):
// max_norm / (norm + 1e-6) when that is below 1, else 1. max_norm <= 0 disables clipping (1).
double clip_coefficient(double total_sum_of_squares, double max_norm);

// The settings that LARS' trust ratio needs for one parameter.
struct LayerNorms {
  double param_sq = 0;  // ||param||^2 over the whole parameter (every rank's slice)
  double grad_sq = 0;   // ||grad||^2 likewise, after clipping
};

class SliceUpdater {
 public:
  // Reads the type and options of `optimizer` (which must outlive this object).
  explicit SliceUpdater(const Optimizer& optimizer);

  // The state slots this optimizer keeps per parameter ("momentum"; "exp_avg", "exp_avg_sq").
  const std::vector<std::string>& slot_names() const { return slots_; }
  // The optimizer's weight decay, for parameter groups that do not override it.
  double default_weight_decay() const;
  // Whether update() needs LayerNorms (LARS).
  bool needs_layer_norms() const { return kind_ == Kind::kLars; }

  // Updates a slice of a parameter of `param_dim` dimensions: `param`, `grad` and each of
  // `state` (one tensor per slot) are float32 tensors of the same numel on one device (views of
  // the caller's buffers, which must not overlap), CPU or CUDA: device_update.h runs the
  // wrapped optimizer's kernel there (kolo::Error(Unsupported) for another device). lr and
  // weight_decay are the parameter's group's; count its 1-based update number.
  void update(Tensor& param, const Tensor& grad, std::vector<Tensor>& state, int64_t param_dim,
              double lr, double weight_decay, int64_t count, const LayerNorms& norms) const;
  // The 0.2 form: `n` float32 values of CPU memory at each pointer.
  [[deprecated("pass tensors (CPU or CUDA): update(Tensor&, const Tensor&, ...)")]] void update(
      float* param, const float* grad, const std::vector<float*>& state, int64_t n,
      int64_t param_dim, double lr, double weight_decay, int64_t count,
      const LayerNorms& norms) const;

 private:
  // The wrapped optimizer's kernel arguments for one update: Adam's, or SGD's (SGD and LARS).
  struct KernelArgs {
    bool is_adam = false;
    kernels::SgdArgs sgd;
    kernels::AdamArgs adam;
  };
  KernelArgs kernel_args(int64_t param_dim, double lr, double weight_decay, int64_t count,
                         const LayerNorms& norms) const;

  enum class Kind { kSgd, kAdam, kLars };
  Kind kind_;
  const Optimizer& optimizer_;
  std::vector<std::string> slots_;
};

}  // namespace kolo::fw

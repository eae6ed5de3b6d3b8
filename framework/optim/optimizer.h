// Optimizer: the base of SGD, Adam/AdamW and LARS.
//
// An optimizer holds handles to the parameters (Tensors share their storage, so the caller's
// model sees every update) arranged in parameter groups, a learning rate that the training
// loop sets from an LrSchedule before each step, and per-parameter state tensors.
//
// State is allocated when first needed (zeros, same shape/device as the parameter, counted as
// optimizer state in memory_stats.h): by a parameter's first update, or by state_tensors(),
// which allocates it all, so that before the first step every rank already has the same set of
// named state tensors to broadcast from the root or to save in a checkpoint. Not before: a
// ShardedOptimizer that takes the state slices it from what exists and never makes the whole.
// Whether a parameter has been updated yet is kept in the int64 "param_steps" counter, not in
// the presence of a buffer.
//
// State names (state_tensors()) are stable across runs and processes for the same parameter
// order: "step" (int64 [1], number of step() calls), "param_steps" (int64 [P], updates applied
// to each parameter), and "param.<i>.<slot>" for parameter i in flattened group order, where
// slot is "momentum" (SGD, LARS) or "exp_avg" / "exp_avg_sq" (Adam, AdamW).
//
// Devices: float32 parameters on CPU use fused single-pass loops (update_kernels.h); CUDA
// parameters their CUDA twins (update_kernels_cuda.h, CUDA builds only). Counters stay on CPU.
//
// Errors: constructors and set_lr throw kolo::Error(InvalidArgument) naming the bad argument
// ("SGD: momentum must be in [0, 1), got 1.5"); step() throws InvalidArgument when a
// gradient's shape differs from its parameter and Unsupported for non-float32 parameters;
// PreconditionFailed once a ShardedOptimizer has taken the state (sharded_optimizer.h).
// Parameters whose grad() is undefined are skipped by step() (no gradient this iteration).
// Thread-safety: none; use an optimizer from one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace kolo::fw {

struct ParamGroup {
  std::vector<Tensor> params;
  // The group's learning rate is the optimizer's lr() times lr_scale.
  double lr_scale = 1.0;
  // Overrides the optimizer's weight decay for this group (e.g. 0 for biases and norms).
  std::optional<double> weight_decay;
};

// One group holding `params` with the optimizer's own settings.
std::vector<ParamGroup> single_group(std::vector<Tensor> params);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Zeroes every parameter's gradient in place (keeps the buffers, so views stay valid).
  void zero_grad();
  // Applies one update to every parameter that has a gradient, then increments step_count().
  void step();

  double lr() const { return lr_; }
  // Throws InvalidArgument unless lr is finite and >= 0.
  void set_lr(double lr);
  int64_t step_count() const;

  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // All parameters in flattened group order (the <i> of the state names).
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const { return static_cast<int64_t>(flat_.size()); }

  enum class StateAccess {
    kAllocate,     // allocate every parameter's state first (zeros where it did not exist)
    kAsAllocated,  // as it is: a state never needed yet is an undefined Tensor
  };
  // Named pointers to the state tensors, in a fixed order (see the header comment). Writing
  // through the pointers (broadcast, checkpoint load) changes the optimizer's state; the
  // pointers stay valid for the optimizer's lifetime. After release_state() the per-parameter
  // ones are undefined whatever `access` says.
  std::vector<std::pair<std::string, Tensor*>> state_tensors(
      StateAccess access = StateAccess::kAllocate);
  // Frees every per-parameter state tensor for good (the counters stay): a ShardedOptimizer
  // that took the state calls it; step() then throws PreconditionFailed.
  void release_state();

  // "SGD", "Adam", "AdamW", "LARS".
  virtual std::string name() const = 0;

 protected:
  // `slots` are the per-parameter state names this optimizer keeps (e.g. {"momentum"}).
  Optimizer(std::string type, std::vector<ParamGroup> groups, double lr,
            std::vector<std::string> slots);

  // Updates parameter `index` (flattened) with its gradient. `first` is true when the
  // parameter has never been updated; `count` is its 1-based update number (Adam's t).
  // state(index) holds the slots in the order given to the constructor.
  virtual void update(int64_t index, Tensor& param, const Tensor& grad, double lr,
                      double weight_decay, int64_t count) = 0;

  // Parameter `index`'s slots, allocated (zeros) on first use.
  std::vector<Tensor>& state(int64_t index);
  const std::string& type() const { return type_; }
  // The weight decay set in the options; groups may override it.
  double default_weight_decay_ = 0;

  [[noreturn]] void invalid(const std::string& what) const;
  void check_range(const char* arg, double v, double lo, double hi, bool hi_open) const;

 private:
  std::string type_;
  std::vector<ParamGroup> groups_;
  std::vector<Tensor> flat_;
  std::vector<int64_t> group_of_;  // flattened index -> group
  std::vector<std::string> slots_;
  std::vector<std::vector<Tensor>> state_;  // [param][slot]; undefined until first needed
  bool released_ = false;                   // release_state() was called
  Tensor step_;                             // int64 [1]
  Tensor param_steps_;                      // int64 [P]
  double lr_ = 0;
};

}  // namespace kolo::fw

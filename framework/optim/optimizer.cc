#include "framework/optim/optimizer.h"

#include <cmath>
#include <set>

#include "framework/memory_stats.h"

namespace kolo::fw {

std::vector<ParamGroup> single_group(std::vector<Tensor> params) {
  ParamGroup group;
  group.params = std::move(params);
  return {std::move(group)};
}

Optimizer::Optimizer(std::string type, std::vector<ParamGroup> groups, double lr,
                     std::vector<std::string> slots)
    : type_(std::move(type)), groups_(std::move(groups)), slots_(std::move(slots)) {
  set_lr(lr);
  std::set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    if (!std::isfinite(group.lr_scale) || group.lr_scale < 0) {
      invalid("param group " + std::to_string(g) + ": lr_scale must be finite and >= 0, got " +
              std::to_string(group.lr_scale));
    }
    if (group.weight_decay && (!std::isfinite(*group.weight_decay) || *group.weight_decay < 0)) {
      invalid("param group " + std::to_string(g) + ": weight_decay must be finite and >= 0, got " +
              std::to_string(*group.weight_decay));
    }
    for (const Tensor& p : group.params) {
      const std::string where =
          "parameter " + std::to_string(flat_.size()) + " (group " + std::to_string(g) + ")";
      if (!p.defined()) invalid(where + " is an undefined tensor");
      if (p.dtype() != DataType::kFloat32) {
        throw Error(Status::Unsupported(type_ + ": " + where + " has dtype " +
                                        std::string(dtype_name(p.dtype())) +
                                        "; only float32 parameters are supported"));
      }
      if (!seen.insert(p.impl().get()).second) invalid(where + " appears more than once");
      flat_.push_back(p);
      group_of_.push_back(static_cast<int64_t>(g));
    }
  }
  if (flat_.empty()) invalid("no parameters to optimize");
  state_.assign(flat_.size(), std::vector<Tensor>(slots_.size()));
  step_ = Tensor::zeros({1}, Device::cpu(), DataType::kInt64);
  param_steps_ = Tensor::zeros({num_parameters()}, Device::cpu(), DataType::kInt64);
}

void Optimizer::invalid(const std::string& what) const {
  throw Error(Status::InvalidArgument(type_ + ": " + what));
}

void Optimizer::check_range(const char* arg, double v, double lo, double hi, bool hi_open) const {
  const bool ok = std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
  if (!ok) {
    invalid(std::string(arg) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
            (hi_open ? ")" : "]") + ", got " + std::to_string(v));
  }
}

void Optimizer::set_lr(double lr) {
  if (!std::isfinite(lr) || lr < 0)
    invalid("lr must be finite and >= 0, got " + std::to_string(lr));
  lr_ = lr;
}

int64_t Optimizer::step_count() const { return step_.data<int64_t>()[0]; }

void Optimizer::zero_grad() {
  for (const Tensor& p : flat_) {
    if (p.grad().defined()) p.zero_grad();
  }
}

void Optimizer::step() {
  int64_t* counts = param_steps_.data<int64_t>();
  for (size_t i = 0; i < flat_.size(); ++i) {
    Tensor& p = flat_[i];
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (grad.shape() != p.shape()) {
      invalid("gradient of parameter " + std::to_string(i) + " has shape " +
              shape_to_string(grad.shape()) + ", expected " + shape_to_string(p.shape()));
    }
    if (grad.dtype() != DataType::kFloat32) {
      throw Error(Status::Unsupported(type_ + ": gradient of parameter " + std::to_string(i) +
                                      " has dtype " + std::string(dtype_name(grad.dtype())) +
                                      "; expected float32"));
    }
    if (!(grad.device() == p.device())) {
      invalid("gradient of parameter " + std::to_string(i) + " is on " + grad.device().to_string() +
              ", parameter on " + p.device().to_string());
    }
    if (released_ && !slots_.empty()) {
      // ShardedOptimizer took this state (sharded_optimizer.h): stepping here would update
      // through a released buffer.
      throw Error(Status::PreconditionFailed(
          type_ + ": the state of parameter " + std::to_string(i) +
          " was released to a ShardedOptimizer; step the ShardedOptimizer instead"));
    }
    const ParamGroup& group = groups_[static_cast<size_t>(group_of_[i])];
    const double wd = group.weight_decay.value_or(default_weight_decay_);
    update(static_cast<int64_t>(i), p, grad, lr_ * group.lr_scale, wd, counts[i] + 1);
    ++counts[i];
  }
  ++step_.data<int64_t>()[0];
}

std::vector<Tensor> Optimizer::parameters() const { return flat_; }

std::vector<Tensor>& Optimizer::state(int64_t index) {
  std::vector<Tensor>& slots = state_[static_cast<size_t>(index)];
  if (!released_ && !slots.empty() && !slots[0].defined()) {
    MemoryCategoryScope state_memory(MemoryCategory::kOptimizerState);
    const Tensor& p = flat_[static_cast<size_t>(index)];
    for (Tensor& slot : slots) slot = Tensor::zeros(p.shape(), p.device());
  }
  return slots;
}

void Optimizer::release_state() {
  released_ = true;
  for (std::vector<Tensor>& slots : state_)
    for (Tensor& slot : slots) slot = Tensor();
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state_tensors(StateAccess access) {
  if (access == StateAccess::kAllocate)
    for (size_t i = 0; i < state_.size(); ++i) (void)state(static_cast<int64_t>(i));
  std::vector<std::pair<std::string, Tensor*>> out;
  out.emplace_back("step", &step_);
  out.emplace_back("param_steps", &param_steps_);
  for (size_t i = 0; i < state_.size(); ++i) {
    for (size_t s = 0; s < slots_.size(); ++s) {
      out.emplace_back("param." + std::to_string(i) + "." + slots_[s], &state_[i][s]);
    }
  }
  return out;
}

}  // namespace kolo::fw

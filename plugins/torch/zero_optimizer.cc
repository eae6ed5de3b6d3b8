// ShardedOptimizer (kolo/torch_zero.h): ZeRO stages 1 and 2 around a torch::optim::Optimizer.
// Whole parameters, not flat slices (docs/zero-torch.md): the inner optimizer then steps real
// parameters with its usual per-parameter state, so every per-parameter optimizer is exact.
#include <torch/optim.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "kolo/torch_zero.h"

namespace kolo::torch {
namespace {

void check_per_parameter(::torch::optim::Optimizer& inner) {
  if (dynamic_cast<::torch::optim::LBFGS*>(&inner) != nullptr) {
    throw Error(Status::InvalidArgument(
        "ShardedOptimizer: the optimizer state of LBFGS cannot be sharded: its update is a line "
        "search over all parameters as one vector"));
  }
  if (dynamic_cast<::torch::optim::SGD*>(&inner) == nullptr &&
      dynamic_cast<::torch::optim::Adam*>(&inner) == nullptr &&
      dynamic_cast<::torch::optim::AdamW*>(&inner) == nullptr &&
      dynamic_cast<::torch::optim::Adagrad*>(&inner) == nullptr &&
      dynamic_cast<::torch::optim::RMSprop*>(&inner) == nullptr) {
    throw Error(Status::InvalidArgument(
        std::string("ShardedOptimizer: the optimizer state of ") + typeid(inner).name() +
        " cannot be sharded: Kolo knows no per-parameter update for it; shardable: SGD, Adam, "
        "AdamW, Adagrad, RMSprop"));
  }
}

// Per group, the largest parameters first to the least loaded rank (ties: the lowest); the same
// on every rank, as kolo.torch.zero.partition.
std::vector<int> partition(const std::vector<::torch::optim::OptimizerParamGroup>& groups,
                           int world) {
  std::vector<int> owner;
  std::vector<int64_t> load(world, 0);
  for (const auto& g : groups) {
    const std::vector<at::Tensor>& ps = g.params();
    std::vector<size_t> order(ps.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ps[a].numel() > ps[b].numel(); });
    const size_t base = owner.size();
    owner.resize(base + ps.size());
    for (size_t i : order) {
      const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      owner[base + i] = r;
      load[r] += ps[i].numel();
    }
  }
  return owner;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(
    ::torch::optim::Optimizer& inner,
    const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters, Shard shard,
    DistributedOptions options)
    : inner_(inner),
      reducer_((check_per_parameter(inner), named_parameters), options),
      shard_(shard),
      set_(options.process_set),
      me_(options.process_set.rank()) {
  owner_ = partition(inner_.param_groups(), set_.size());
  size_t i = 0;
  for (auto& g : inner_.param_groups()) {
    std::vector<at::Tensor> mine;
    for (const at::Tensor& p : g.params()) {
      params_.push_back(p);
      if (owner_[i++] == me_) mine.push_back(p);
    }
    g.params() = std::move(mine);
  }
}

void ShardedOptimizer::zero_grad() {
  for (at::Tensor& p : params_) {
    if (p.mutable_grad().defined()) p.mutable_grad().zero_();
  }
}

void ShardedOptimizer::step() {
  reducer_.synchronize();
  if (shard_ == Shard::kGradients) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (owner_[i] != me_) params_[i].mutable_grad() = at::Tensor();
    }
  }
  inner_.step();
  reducer_.mark_step();
  gather_parameters();
}

// One broadcast per rank and dtype, all in flight at once: Kolo's allgather was 2-3x slower
// than the broadcasts for the same bytes (docs/zero-torch.md).
void ShardedOptimizer::gather_parameters() {
  ::torch::NoGradGuard no_grad;
  std::map<std::pair<int, int>, std::vector<size_t>> by_dtype_rank;
  for (size_t i = 0; i < params_.size(); ++i) {
    by_dtype_rank[{static_cast<int>(params_[i].scalar_type()), owner_[i]}].push_back(i);
  }
  struct Pending {
    Handle handle;
    at::Tensor flat;
    const std::vector<size_t>* indices;
  };
  std::vector<Pending> pending;
  for (const auto& [key, indices] : by_dtype_rank) {
    const auto [dtype, r] = key;
    at::Tensor flat;
    if (r == me_) {
      std::vector<at::Tensor> mine;
      for (size_t i : indices) mine.push_back(params_[i].detach().reshape(-1));
      flat = at::cat(mine);
    } else {
      int64_t n = 0;
      for (size_t i : indices) n += params_[i].numel();
      flat = at::empty({n}, params_[indices[0]].options());
    }
    const std::string name = "zero.parameters." + std::to_string(dtype) + "." + std::to_string(r);
    pending.push_back({broadcast_async_(name, flat, r, set_), flat, &indices});
  }
  for (Pending& p : pending) {
    p.handle.wait();
    if (owner_[p.indices->front()] == me_) continue;
    int64_t at = 0;
    for (size_t i : *p.indices) {
      const int64_t n = params_[i].numel();
      params_[i].copy_(p.flat.slice(0, at, at + n).view_as(params_[i]));
      at += n;
    }
  }
}

}  // namespace kolo::torch

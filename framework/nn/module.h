// nn::Module: a layer or a model made of layers (namespace kolo::fw::nn).
//
// A Module owns its parameters (leaf tensors with requires_grad) and buffers (running stats),
// and its child modules, registered in construction order. named_parameters() yields stable
// dotted names ("0.weight", "features.1.bias"): the same model built the same way gives the
// same names and order on every rank, which DistributedOptimizer and checkpoints rely on.
// Errors: bad shapes or arguments throw kolo::Error(kInvalidArgument) naming the layer.
// Thread-safety: a Module is used by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace kolo::fw::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Parameters of this module and all children, depth-first in registration order.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // Non-trainable state (BatchNorm running mean/var), named like parameters.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer to device (parameters stay leaves requiring grad; their
  // gradients and grad-ready hooks are dropped: move first, then register hooks). Returns *this.
  Module& to(Device device);
  void zero_grad();

 protected:
  // Registers and returns a parameter (marked requires_grad).
  Tensor& register_parameter(std::string name, Tensor t);
  Tensor& register_buffer(std::string name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    children_.emplace_back(std::move(name), m);
    return m;
  }
  virtual void on_train_changed() {}

 private:
  void collect(const std::string& prefix, bool buffers,
               std::vector<std::pair<std::string, Tensor>>& out) const;

  bool training_ = true;
  // Held by unique_ptr so references returned by register_* stay valid as more are added.
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// Runs children in order; child i is named "i".
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  void push_back(std::shared_ptr<Module> layer);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace kolo::fw::nn

#include "framework/nn/module.h"

#include "framework/memory_stats.h"

namespace kolo::fw::nn {

Tensor& Module::register_parameter(std::string name, Tensor t) {
  t.set_requires_grad(true);
  t.set_memory_category(MemoryCategory::kParameters);
  params_.emplace_back(std::move(name), std::make_unique<Tensor>(std::move(t)));
  return *params_.back().second;
}
Tensor& Module::register_buffer(std::string name, Tensor t) {
  buffers_.emplace_back(std::move(name), std::make_unique<Tensor>(std::move(t)));
  return *buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool buffers,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + name, *t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}
std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}
std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  on_train_changed();
  for (auto& [n, c] : children_) c->train(on);
}

Module& Module::to(Device device) {
  // The TensorImpl is replaced in place of the stored handle so layers that hold a reference to
  // it (returned by register_parameter) see the moved tensor.
  for (auto& [n, t] : params_) {
    if (t->device() == device) continue;
    Tensor moved = t->detach().to(device);
    moved.set_requires_grad(true);
    *t = moved;
  }
  for (auto& [n, t] : buffers_) *t = t->to(device);
  for (auto& [n, c] : children_) c->to(device);
  return *this;
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& l : layers) push_back(std::move(l));
}
void Sequential::push_back(std::shared_ptr<Module> layer) {
  layers_.push_back(register_module(std::to_string(layers_.size()), std::move(layer)));
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& l : layers_) h = l->forward(h);
  return h;
}

}  // namespace kolo::fw::nn

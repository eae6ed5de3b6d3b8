#include "examples/train_fashion_mnist/models.h"

#include <cmath>

#include "framework/functional.h"

namespace kolo::example {

using fw::Tensor;

std::vector<Tensor> Model::parameters() const {
  std::vector<Tensor> out;
  out.reserve(params_.size());
  for (const auto& [name, t] : params_) out.push_back(t);
  return out;
}

int64_t Model::num_elements() const {
  int64_t n = 0;
  for (const auto& [name, t] : params_) n += t.numel();
  return n;
}

Tensor Model::add(const std::string& name, const fw::Shape& shape, int64_t fan_in,
                  fw::Generator& gen, Device device, float gain) {
  // Drawn on the CPU so the values depend on the seed only, not on the device's generator.
  Tensor host = fan_in > 0
                    ? Tensor::randn(shape, 0.f, std::sqrt(gain / static_cast<float>(fan_in)), &gen)
                    : Tensor::zeros(shape);
  // to() returns a fresh leaf on another device; on the CPU clone() makes sure the parameter
  // owns its storage.
  Tensor param = device.is_cpu() ? host.clone() : host.to(device);
  param.set_requires_grad(true);
  params_.emplace_back(name, param);
  return param;
}

namespace {

class Mlp : public Model {
 public:
  Mlp(fw::Generator& gen, Device device) {
    w1_ = add("fc1.weight", {512, 784}, 784, gen, device);
    b1_ = add("fc1.bias", {512}, 0, gen, device);
    w2_ = add("fc2.weight", {256, 512}, 512, gen, device);
    b2_ = add("fc2.bias", {256}, 0, gen, device);
    w3_ = add("fc3.weight", {10, 256}, 256, gen, device, /*gain=*/1.f);
    b3_ = add("fc3.bias", {10}, 0, gen, device);
  }

  Tensor forward(const Tensor& images) const override {
    Tensor h = images.reshape({images.size(0), 784});
    h = fw::relu(fw::linear(h, w1_, b1_));
    h = fw::relu(fw::linear(h, w2_, b2_));
    return fw::linear(h, w3_, b3_);
  }

 private:
  Tensor w1_, b1_, w2_, b2_, w3_, b3_;
};

class Cnn : public Model {
 public:
  Cnn(fw::Generator& gen, Device device) {
    c1w_ = add("conv1.weight", {16, 1, 3, 3}, 1 * 9, gen, device);
    c1b_ = add("conv1.bias", {16}, 0, gen, device);
    c2w_ = add("conv2.weight", {32, 16, 3, 3}, 16 * 9, gen, device);
    c2b_ = add("conv2.bias", {32}, 0, gen, device);
    f1w_ = add("fc1.weight", {128, 32 * 7 * 7}, 32 * 7 * 7, gen, device);
    f1b_ = add("fc1.bias", {128}, 0, gen, device);
    f2w_ = add("fc2.weight", {10, 128}, 128, gen, device, /*gain=*/1.f);
    f2b_ = add("fc2.bias", {10}, 0, gen, device);
  }

  Tensor forward(const Tensor& images) const override {
    Tensor h = fw::relu(fw::conv2d(images, c1w_, c1b_, /*stride=*/1, /*pad=*/1));  // 16x28x28
    h = fw::max_pool2d(h, 2, 2);                                                   // 16x14x14
    h = fw::relu(fw::conv2d(h, c2w_, c2b_, 1, 1));                                 // 32x14x14
    h = fw::max_pool2d(h, 2, 2);                                                   // 32x7x7
    h = h.reshape({h.size(0), 32 * 7 * 7});
    h = fw::relu(fw::linear(h, f1w_, f1b_));
    return fw::linear(h, f2w_, f2b_);
  }

 private:
  Tensor c1w_, c1b_, c2w_, c2b_, f1w_, f1b_, f2w_, f2b_;
};

}  // namespace

std::unique_ptr<Model> make_model(ModelKind kind, uint64_t seed, Device device) {
  fw::Generator gen(seed);
  if (kind == ModelKind::kMlp) return std::make_unique<Mlp>(gen, device);
  return std::make_unique<Cnn>(gen, device);
}

}  // namespace kolo::example

// The two models of the Fashion-MNIST example, written with the differentiable functions of
// framework/functional.h. Each holds its parameters as named leaf tensors (the names are what
// DistributedOptimizer's allreduces, the parameter broadcast and checkpoints use, so they are
// identical on every rank).
//
//   mlp: flatten -> linear 784x512 -> relu -> linear 512x256 -> relu -> linear 256x10
//   cnn: conv 1->16 3x3 pad 1 -> relu -> max-pool 2 -> conv 16->32 3x3 pad 1 -> relu ->
//        max-pool 2 -> flatten (32x7x7) -> linear 1568x128 -> relu -> linear 128x10
//
// Initialisation: normal weights with std sqrt(gain / fan_in): gain 2 (He) for layers followed
// by a ReLU, which halves the variance; gain 1 (LeCun) for the output layer, whose logits would
// otherwise start too large and give a first loss well above ln 10. Zero biases. Drawn
// from a Generator seeded by the caller, so every rank builds the same model from the same
// seed (rank 0's copy is broadcast anyway, which also covers a different seed per rank).
//
// Errors: forward throws kolo::Error from the functional ops when the input is not
// float32 [N, 1, 28, 28] on the model's device. Thread-safety: one forward at a time.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "examples/train_fashion_mnist/train_args.h"
#include "framework/tensor.h"

namespace kolo::example {

using NamedParameters = std::vector<std::pair<std::string, fw::Tensor>>;

class Model {
 public:
  virtual ~Model() = default;
  // Logits [N, 10] for images [N, 1, 28, 28].
  virtual fw::Tensor forward(const fw::Tensor& images) const = 0;
  // In registration order (input to output), the same on every rank.
  const NamedParameters& named_parameters() const { return params_; }
  std::vector<fw::Tensor> parameters() const;
  int64_t num_elements() const;

 protected:
  // Creates a parameter on `device` that requires grad: normal with std sqrt(gain / fan_in)
  // for fan_in > 0, zeros for fan_in == 0 (biases).
  fw::Tensor add(const std::string& name, const fw::Shape& shape, int64_t fan_in,
                 fw::Generator& gen, Device device, float gain = 2.f);

 private:
  NamedParameters params_;
};

std::unique_ptr<Model> make_model(ModelKind kind, uint64_t seed, Device device);

}  // namespace kolo::example

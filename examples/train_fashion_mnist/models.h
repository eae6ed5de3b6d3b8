// The two models of the Fashion-MNIST example, written with the layer API of
// framework/nn/layers.h: each model is an nn::Module whose layers are child modules registered
// under fixed names, so named_parameters() gives "conv1.weight", "fc1.bias", ... in
// input-to-output order, identical on every rank (DistributedOptimizer's allreduces, the
// parameter broadcast and checkpoints use these names).
//
//   mlp: flatten -> fc1 linear 784x512 -> relu -> fc2 linear 512x256 -> relu -> fc3 linear 256x10
//   cnn: conv1 1->16 3x3 pad 1 -> relu -> max-pool 2 -> conv2 16->32 3x3 pad 1 -> relu ->
//        max-pool 2 -> flatten (32x7x7) -> fc1 linear 1568x128 -> relu -> fc2 linear 128x10
//
// Initialisation: normal weights with std sqrt(gain / fan_in): gain 2 (He) for layers followed
// by a ReLU, which halves the variance; gain 1 (LeCun) for the output layer, whose logits would
// otherwise start too large and give a first loss well above ln 10. Zero biases. Drawn on the
// CPU, layer by layer from input to output, from a Generator seeded by the caller, so every
// rank builds the same model from the same seed (rank 0's copy is broadcast anyway, which also
// covers a different seed per rank); the values do not depend on the device.
//
// Errors: forward throws kolo::Error from the layers when the input is not float32
// [N, 1, 28, 28] on the model's device. Thread-safety: one forward at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "examples/train_fashion_mnist/train_args.h"
#include "framework/nn/module.h"
#include "framework/tensor.h"

namespace kolo::example {

using NamedParameters = std::vector<std::pair<std::string, fw::Tensor>>;

// A classifier of [N, 1, 28, 28] images into 10 classes. forward() returns the logits [N, 10];
// named_parameters() / parameters() come from nn::Module (in registration order, the same on
// every rank).
class Model : public fw::nn::Module {
 public:
  // Total number of parameter elements.
  int64_t num_elements() const;
};

// Builds the model of `kind` with the initialisation above drawn from a Generator seeded with
// `seed`, its parameters on `device` (leaves that require grad). Throws kolo::Error when the
// device cannot be used (e.g. CUDA in a CPU-only build).
std::unique_ptr<Model> make_model(ModelKind kind, uint64_t seed, Device device);

}  // namespace kolo::example

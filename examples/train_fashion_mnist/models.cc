#include "examples/train_fashion_mnist/models.h"

#include <cmath>

#include "framework/nn/layers.h"

namespace kolo::example {

namespace nn = fw::nn;
using fw::Tensor;

int64_t Model::num_elements() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

namespace {

constexpr float kHeGain = 2.f;     // layers followed by a ReLU
constexpr float kLeCunGain = 1.f;  // the output layer

// The layers initialise themselves PyTorch-style, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the
// weights and the biases, with no way to ask for another scheme. That is a variance of
// 1/(3 fan_in), six times below He's 2/fan_in, and non-zero biases: not the initialisation
// documented in models.h, with which the example's accuracies were measured. So each layer is
// built from a local scratch generator (its draws are thrown away, and the process-wide
// default generator is left untouched) and its parameters are overwritten here from the caller's
// seeded generator, layer by layer from input to output, in the order the models have always
// drawn them: the same seed gives the same values as before the move to nn layers.
//
// weight ~ N(0, gain / fan_in), fan_in = the weight's elements per output unit (in for a
// Linear [out, in], in * k * k for a Conv2d [out, in, k, k]); bias = 0. On the CPU, where the
// layers are built; copy_ writes through the handle into the registered parameter.
void init_layer(nn::Module& layer, float gain, fw::Generator& gen) {
  for (auto& [name, param] : layer.named_parameters()) {
    if (name == "weight") {
      const int64_t fan_in = param.numel() / param.size(0);
      param.copy_(
          Tensor::randn(param.shape(), 0.f, std::sqrt(gain / static_cast<float>(fan_in)), &gen));
    } else {
      param.zero_();
    }
  }
}

class Mlp : public Model {
 public:
  explicit Mlp(fw::Generator& gen) {
    fw::Generator scratch;  // see init_layer
    flatten_ = register_module("flatten", std::make_shared<nn::Flatten>());
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(784, 512, /*bias=*/true, &scratch));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(512, 256, true, &scratch));
    fc3_ = register_module("fc3", std::make_shared<nn::Linear>(256, 10, true, &scratch));
    init_layer(*fc1_, kHeGain, gen);
    init_layer(*fc2_, kHeGain, gen);
    init_layer(*fc3_, kLeCunGain, gen);
  }

  Tensor forward(const Tensor& images) override {
    Tensor h = flatten_->forward(images);  // [N, 784]
    // Linear + ReLU as one op: one fused GEMM on CUDA (functional.h, linear_relu), the same two
    // ops on the CPU.
    h = fc1_->forward_relu(h);
    h = fc2_->forward_relu(h);
    return fc3_->forward(h);
  }

 private:
  std::shared_ptr<nn::Flatten> flatten_;
  std::shared_ptr<nn::Linear> fc1_, fc2_, fc3_;
};

class Cnn : public Model {
 public:
  explicit Cnn(fw::Generator& gen) {
    fw::Generator scratch;  // see init_layer
    conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(1, 16, /*kernel=*/3,
                                                                   /*stride=*/1, /*pad=*/1,
                                                                   /*bias=*/true, &scratch));
    conv2_ =
        register_module("conv2", std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1, true, &scratch));
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(32 * 7 * 7, 128, true, &scratch));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(128, 10, true, &scratch));
    relu_ = register_module("relu", std::make_shared<nn::ReLU>());
    pool_ = register_module("pool", std::make_shared<nn::MaxPool2d>(2));
    flatten_ = register_module("flatten", std::make_shared<nn::Flatten>());
    init_layer(*conv1_, kHeGain, gen);
    init_layer(*conv2_, kHeGain, gen);
    init_layer(*fc1_, kHeGain, gen);
    init_layer(*fc2_, kLeCunGain, gen);
  }

  Tensor forward(const Tensor& images) override {
    Tensor h = pool_->forward(relu_->forward(conv1_->forward(images)));  // 16x14x14
    h = pool_->forward(relu_->forward(conv2_->forward(h)));              // 32x7x7
    h = flatten_->forward(h);                                            // 1568
    h = fc1_->forward_relu(h);  // fused on CUDA, as the MLP's
    return fc2_->forward(h);
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::MaxPool2d> pool_;
  std::shared_ptr<nn::Flatten> flatten_;
};

}  // namespace

std::unique_ptr<Model> make_model(ModelKind kind, uint64_t seed, Device device) {
  fw::Generator gen(seed);
  std::unique_ptr<Model> model;
  if (kind == ModelKind::kMlp) {
    model = std::make_unique<Mlp>(gen);
  } else {
    model = std::make_unique<Cnn>(gen);
  }
  // Built and initialised on the CPU, so the values depend on the seed only; then moved (a no-op
  // on the CPU). The parameters stay leaves that require grad.
  model->to(device);
  return model;
}

}  // namespace kolo::example

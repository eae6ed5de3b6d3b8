#include "framework/nn/layers.h"

#include <cmath>
#include <string>

namespace kolo::fw::nn {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error(Status::InvalidArgument(msg)); }

void require_positive(const char* layer, const char* arg, int64_t v) {
  if (v < 1) fail(std::string(layer) + ": " + arg + " must be >= 1, got " + std::to_string(v));
}
Tensor init_uniform(const Shape& shape, int64_t fan_in, Generator* gen) {
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  return Tensor::uniform(shape, -bound, bound, gen);
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, bool bias, Generator* gen) {
  require_positive("Linear", "in_features", in);
  require_positive("Linear", "out_features", out);
  weight_ = &register_parameter("weight", init_uniform({out, in}, in, gen));
  bias_ = bias ? &register_parameter("bias", init_uniform({out}, in, gen)) : &no_bias_;
}
Tensor Linear::forward(const Tensor& x) { return linear(x, *weight_, *bias_); }
Tensor Linear::forward_relu(const Tensor& x) { return linear_relu(x, *weight_, *bias_); }

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad, bool bias,
               Generator* gen)
    : stride_(stride), pad_(pad) {
  require_positive("Conv2d", "in_channels", in);
  require_positive("Conv2d", "out_channels", out);
  require_positive("Conv2d", "kernel", kernel);
  require_positive("Conv2d", "stride", stride);
  if (pad < 0) fail("Conv2d: pad must be >= 0, got " + std::to_string(pad));
  const int64_t fan_in = in * kernel * kernel;
  weight_ = &register_parameter("weight", init_uniform({out, in, kernel, kernel}, fan_in, gen));
  bias_ = bias ? &register_parameter("bias", init_uniform({out}, fan_in, gen)) : &no_bias_;
}
Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, *weight_, *bias_, stride_, pad_); }

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride)
    : kernel_(kernel), stride_(stride == 0 ? kernel : stride) {
  require_positive("MaxPool2d", "kernel", kernel);
}
AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride)
    : kernel_(kernel), stride_(stride == 0 ? kernel : stride) {
  require_positive("AvgPool2d", "kernel", kernel);
}

Tensor Flatten::forward(const Tensor& x) {
  if (x.dim() < 1) fail("Flatten: input must have a batch dimension, got a scalar");
  return x.reshape({x.size(0), -1});
}

Dropout::Dropout(float p, Generator* gen) : p_(p), gen_(gen) {
  if (!(p >= 0.f && p < 1.f)) fail("Dropout: p must be in [0, 1), got " + std::to_string(p));
}

BatchNorm::BatchNorm(int64_t channels, int expected_dims, float eps, float momentum,
                     std::shared_ptr<BatchStatsReducer> reducer)
    : channels_(channels),
      expected_dims_(expected_dims),
      eps_(eps),
      momentum_(momentum),
      reducer_(std::move(reducer)) {
  require_positive("BatchNorm", "channels", channels);
  gamma_ = &register_parameter("weight", Tensor::ones({channels}));
  beta_ = &register_parameter("bias", Tensor::zeros({channels}));
  running_mean_ = &register_buffer("running_mean", Tensor::zeros({channels}));
  running_var_ = &register_buffer("running_var", Tensor::ones({channels}));
}

Tensor BatchNorm::forward(const Tensor& x) {
  if (x.dim() != expected_dims_ || x.size(1) != channels_)
    fail(std::string(expected_dims_ == 2 ? "BatchNorm1d" : "BatchNorm2d") +
         ": expected input [N, " + std::to_string(channels_) +
         (expected_dims_ == 4 ? ", H, W]" : "]") + ", got " + shape_to_string(x.shape()));
  if (!is_training())
    return batch_norm_eval(x, *gamma_, *beta_, *running_mean_, *running_var_, eps_);
  BatchNormStats stats;
  Tensor y = batch_norm_train(x, *gamma_, *beta_, eps_, reducer_.get(), &stats);
  // Running variance uses the unbiased estimate, as PyTorch does.
  const float unbias =
      stats.count > 1 ? static_cast<float>(stats.count) / static_cast<float>(stats.count - 1) : 1.f;
  running_mean_->lerp_(stats.mean, 1.f - momentum_, momentum_);
  running_var_->lerp_(stats.var, 1.f - momentum_, momentum_ * unbias);
  return y;
}

}  // namespace kolo::fw::nn

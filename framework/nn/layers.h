// Standard layers (namespace kolo::fw::nn). Weights are initialised Kaiming-uniform style
// (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as PyTorch does) from the given Generator (the default
// generator when null), so a fixed seed gives identical models on every rank.
// Inputs: Linear [N, in]; Conv2d/pools [N, C, H, W]; BatchNorm1d [N, C]; BatchNorm2d [N, C, H, W].
#pragma once

#include <memory>

#include "framework/functional.h"
#include "framework/nn/module.h"

namespace kolo::fw::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)): functional.h's linear_relu (one fused GEMM on CUDA, the same two ops on
  // the CPU).
  Tensor forward_relu(const Tensor& x);
  Tensor& weight() { return *weight_; }  // [out, in]
  Tensor& bias() { return *bias_; }      // [out]; undefined when built without bias

 private:
  Tensor* weight_;
  Tensor* bias_;
  Tensor no_bias_;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t pad = 0, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  Tensor& weight() { return *weight_; }  // [out, in, k, k]

 private:
  int64_t stride_, pad_;
  Tensor* weight_;
  Tensor* bias_;
  Tensor no_bias_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0);  // stride 0: equal to kernel
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_); }

 private:
  int64_t kernel_, stride_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0);
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_); }

 private:
  int64_t kernel_, stride_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return fw::tanh(x); }
};
// [N, ...] -> [N, prod(...)].
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training(), gen_); }

 private:
  float p_;
  Generator* gen_;
};

// Batch normalisation with learnable gamma ("weight") / beta ("bias") and running statistics
// (buffers "running_mean", "running_var", updated in training with the unbiased variance:
// running = (1 - momentum) * running + momentum * batch). SyncBatchNorm: pass a reducer (see
// BatchStatsReducer in functional.h); it must outlive this module and any graph it built.
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t channels, int expected_dims, float eps, float momentum,
            std::shared_ptr<BatchStatsReducer> reducer);
  Tensor forward(const Tensor& x) override;
  void set_reducer(std::shared_ptr<BatchStatsReducer> reducer) { reducer_ = std::move(reducer); }
  Tensor& running_mean() { return *running_mean_; }
  Tensor& running_var() { return *running_var_; }

 private:
  int64_t channels_;
  int expected_dims_;
  float eps_, momentum_;
  std::shared_ptr<BatchStatsReducer> reducer_;
  Tensor* gamma_;
  Tensor* beta_;
  Tensor* running_mean_;
  Tensor* running_var_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f,
                       std::shared_ptr<BatchStatsReducer> reducer = nullptr)
      : BatchNorm(channels, 2, eps, momentum, std::move(reducer)) {}
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f,
                       std::shared_ptr<BatchStatsReducer> reducer = nullptr)
      : BatchNorm(channels, 4, eps, momentum, std::move(reducer)) {}
};

}  // namespace kolo::fw::nn

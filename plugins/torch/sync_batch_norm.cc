// SyncBatchNorm2d: global batch statistics through a differentiable allreduce.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/utils.h>

#include <atomic>

#include "kolo/torch_sync_batch_norm.h"

namespace kolo::torch {

namespace {

// y = sum over ranks of x; its gradient is the sum over ranks of the outputs' gradients (every
// rank's output depends on every rank's input).
struct AllreduceSum : ::torch::autograd::Function<AllreduceSum> {
  static at::Tensor forward(::torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const std::string& name) {
    ctx->saved_data["name"] = name;
    return allreduce(name + ".fwd", x.contiguous());
  }
  static ::torch::autograd::variable_list backward(::torch::autograd::AutogradContext* ctx,
                                                   ::torch::autograd::variable_list grads) {
    const std::string name = ctx->saved_data["name"].toStringRef();
    return {allreduce(name + ".bwd", grads[0].contiguous()), at::Tensor()};
  }
};

std::atomic<int> modules_built{0};

}  // namespace

SyncBatchNorm2dImpl::SyncBatchNorm2dImpl(::torch::nn::BatchNormOptions o)
    : options(std::move(o)), name_("syncbn" + std::to_string(modules_built++)) {
  reset();
}

void SyncBatchNorm2dImpl::reset() {
  const int64_t c = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", at::ones({c}));
    bias = register_parameter("bias", at::zeros({c}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", at::zeros({c}));
    running_var = register_buffer("running_var", at::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  }
}

at::Tensor SyncBatchNorm2dImpl::forward(const at::Tensor& x) {
  if (x.dim() != 4) {
    throw Error(Status::InvalidArgument(name_ + ": expected a 4-d input [N, C, H, W], got " +
                                        std::to_string(x.dim()) + " dimensions"));
  }
  const int64_t c = options.num_features();
  const double eps = options.eps();
  if (!is_training() && options.track_running_stats()) {
    return at::batch_norm(x, weight, bias, running_mean, running_var, false, 0.0, eps, false);
  }
  // Per channel: sum, sum of squares, and the element count, in one allreduce (float64 keeps
  // E[x^2] - E[x]^2 accurate).
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor count =
      at::full({1}, static_cast<double>(x.numel() / std::max<int64_t>(c, 1)), xd.options());
  const at::Tensor local = at::cat({xd.sum({0, 2, 3}), (xd * xd).sum({0, 2, 3}), count});
  const at::Tensor global = AllreduceSum::apply(local, name_);
  const at::Tensor n = global.slice(0, 2 * c, 2 * c + 1);
  const at::Tensor mean = global.slice(0, 0, c) / n;
  const at::Tensor var = global.slice(0, c, 2 * c) / n - mean * mean;
  const auto shape = std::vector<int64_t>{1, c, 1, 1};
  at::Tensor y = (xd - mean.view(shape)) * at::rsqrt(var + eps).view(shape);
  y = y.to(x.scalar_type());
  if (options.affine()) y = y * weight.view(shape) + bias.view(shape);
  if (options.track_running_stats()) {
    ::torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
    const double m =
        options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item<double>();
    const double total = n.item<double>();
    const at::Tensor unbiased = var * (total / std::max(total - 1.0, 1.0));
    running_mean.mul_(1 - m).add_(mean.to(running_mean.scalar_type()), m);
    running_var.mul_(1 - m).add_(unbiased.to(running_var.scalar_type()), m);
  }
  return y;
}

}  // namespace kolo::torch

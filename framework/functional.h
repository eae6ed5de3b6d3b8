// Differentiable operations on kolo::fw tensors (the building blocks of nn/ layers).
//
// Every function works on CPU and (in a CUDA build) CUDA tensors; all tensor operands must be
// float32 and on the same device (labels: int64). When an input requires grad and grad mode is
// on, the result records a Node (autograd.h). Shape rules are strict (no broadcasting except the
// documented bias forms); a violation throws kolo::Error(kInvalidArgument) naming the function,
// the argument and both shapes.
#pragma once

#include <cstdint>

#include "framework/tensor.h"

namespace kolo::fw {

// Elementwise, same shape.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, float s);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

// Reductions to a one-element tensor of shape {}.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

// a [M, K] x b [K, N] -> [M, N].
Tensor matmul(const Tensor& a, const Tensor& b);
// x [N, in], weight [out, in], bias [out] (may be undefined) -> x weight^T + bias, [N, out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// relu(linear(x, weight, bias)), the same checks and gradients. On the CPU exactly those two ops
// (the same bits). On CUDA with a bias, outside deterministic mode, one cuBLASLt GEMM whose
// epilogue adds the bias and applies the ReLU (cuda_kernels.h, linear_bias_relu), and a backward
// that takes the ReLU's mask from the output; where cuBLASLt has no algorithm for the shape, or in
// deterministic mode (whose documented kernels are the unfused ones), the two ops.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// x [N, C, H, W], weight [OC, C, KH, KW], bias [OC] (may be undefined) -> [N, OC, OH, OW]
// with OH = (H + 2 pad - KH) / stride + 1. CPU: im2col + sgemm per image; CUDA: cuDNN.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t pad);
// Pooling over each plane of x [N, C, H, W], window kernel, given stride, no padding.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride);

// Inverted dropout: in training, zeroes each element with probability p and scales the rest by
// 1/(1-p); the mask is drawn from gen (default generator when null). Identity when !training.
Tensor dropout(const Tensor& x, float p, bool training, Generator* gen = nullptr);

// Hooks through which batch statistics can be combined across processes (SyncBatchNorm).
// The default implementation leaves the local values unchanged (plain BatchNorm).
class BatchStatsReducer {
 public:
  virtual ~BatchStatsReducer() = default;
  // Forward: per-channel sum and sum of squares over the local batch ([C] tensors on the
  // input's device) and the local element count per channel. Replace all three, in place,
  // with the totals over the global batch.
  virtual void reduce_forward(Tensor& sum, Tensor& sum_sq, int64_t& count) {}
  // Backward: per-channel sum(grad_y) and sum(grad_y * x_hat) over the local batch. Replace them
  // with the global totals. (gamma/beta gradients stay local; the optimizer averages them.)
  virtual void reduce_backward(Tensor& sum_gy, Tensor& sum_gy_xhat) {}
};

struct BatchNormStats {
  Tensor mean;        // [C] batch mean used for normalisation
  Tensor var;         // [C] biased batch variance
  int64_t count = 0;  // values per channel the statistics cover (global when reduced)
};

// Training-mode batch norm over x [N, C] or [N, C, H, W] using batch statistics; gamma and beta
// are [C]. reducer (may be null) combines statistics across ranks. stats_out (may be null)
// receives the statistics so the caller can update running averages.
Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        BatchStatsReducer* reducer, BatchNormStats* stats_out);
// Inference-mode batch norm with fixed mean/var ([C], not differentiated).
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                       const Tensor& var, float eps);

// Row-wise log-softmax of x [M, N].
Tensor log_softmax(const Tensor& x);
// Mean cross-entropy of logits [M, N] against int64 labels [M] with values in [0, N); fused
// log-softmax + NLL. Returns a one-element tensor. Labels out of range throw.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
// cross_entropy for a CUDA graph capture (cuda_graph.h): the same loss and gradient with nothing
// read back to the host. The labels are not range-checked (check them on the host before they
// go to the device: check_labels); on CUDA the loss is summed on the device in one block (the
// value cross_entropy gives in deterministic mode, and in any mode for up to 256 rows) and
// backward reads its incoming gradient on the device. On the CPU it is cross_entropy.
Tensor cross_entropy_capturable(const Tensor& logits, const Tensor& labels);
// Throws InvalidArgument naming the first label of `labels` (int64 [M], any device: copied to
// the host) outside [0, classes), as cross_entropy does.
void check_labels(const Tensor& labels, int64_t classes);
// Mean squared error over all elements (same shapes).
Tensor mse_loss(const Tensor& pred, const Tensor& target);

}  // namespace kolo::fw

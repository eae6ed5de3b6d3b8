// --cuda-graph (issue 32): train_fashion_mnist's training step replayed as one CUDA graph.
//
// At batch 64 a step of either model is a few hundred small kernels and cuBLAS/cuDNN calls, and
// launching them one by one from the host costs more than running them. GraphStep captures the
// step once (fw::CudaGraph) and replays it every later step:
// - Captured: zero_grad (in place), forward, the loss (fw::cross_entropy_capturable: nothing read
//   back), backward (adding into the gradients, which exist from the warm-up).
// - Eager, after each replay: the optimizer step, because its learning rate changes every step
//   (warm-up and cosine schedule) and a graph repeats the scalars it was captured with.
// - Eager instead of a replay: the first kWarmupSteps steps (they create the gradients, the
//   cuBLAS/cuDNN handles and the convolution algorithm cache, which a capture cannot), and a
//   batch of another size than the graph's (the last, partial batch of an epoch: run eagerly,
//   not dropped, so every sample trains as without the flag).
// - The batch goes in by copy into static device tensors made before the capture; the loss and
//   logits come out in tensors the graph writes, read on the host after the replay.
// The losses equal the eager step's: the same kernels in the same order, and the capturable loss
// sums in one block as the eager one does for up to 256 rows (and in deterministic mode);
// CudaGraph.TrainingStepMatchesEager (framework/cuda_test.cc) checks it on a GPU.
//
// Only with one rank: DistributedOptimizer's allreduces start inside backward, on Kolo's threads,
// which a graph cannot capture; with one rank there is nothing to reduce and SGD steps directly.
//
// Errors: kolo::Error from the framework (capture failures name the CUDA call). Thread-safety:
// the training thread only.
#pragma once

#include <cstdint>

#include "examples/train_fashion_mnist/models.h"
#include "examples/train_fashion_mnist/train_args.h"
#include "kolo/framework.h"

namespace kolo::example {

// --cuda-graph against what training found: PreconditionFailed naming the flag with more than
// one rank, else Unsupported naming it when `device` is not a CUDA device (--device auto found
// no GPU, or a CPU-only build). Ok without the flag.
Status check_cuda_graph(const TrainArgs& args, int world, Device device);

class GraphStep {
 public:
  static constexpr int kWarmupSteps = 3;

  // Borrows `model` and `sgd` (over the model's parameters), which must outlive it. Batches of
  // `batch_size` samples are replayed; `classes` bounds the labels (checked on the host).
  GraphStep(Model& model, fw::SGD& sgd, Device device, int64_t batch_size, int64_t classes);

  struct Output {
    fw::Tensor loss;    // [] on the device
    fw::Tensor logits;  // [N, classes] on the device, detached
  };
  // One training step on a CPU batch (x [N, 1, 28, 28] float32, y [N] int64) with the learning
  // rate set on the SGD: zero_grad, forward, loss, backward (replayed or eager, above), then the
  // SGD step. The output is valid until the next run().
  Output run(const fw::Tensor& x, const fw::Tensor& y);
  int64_t replays() const { return replays_; }

 private:
  Output eager(const fw::Tensor& x, const fw::Tensor& y);
  void capture();

  Model& model_;
  fw::SGD& sgd_;
  const Device device_;
  const int64_t batch_size_, classes_;
  fw::Tensor static_x_, static_y_;  // the graph's inputs, refilled before each replay
  Output captured_;                 // the graph's outputs
  fw::CudaGraph graph_;
  int64_t steps_ = 0, replays_ = 0;
};

}  // namespace kolo::example

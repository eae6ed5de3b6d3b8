#include "examples/train_fashion_mnist/graph_step.h"

#include <string>

namespace kolo::example {

Status check_cuda_graph(const TrainArgs& args, int world, Device device) {
  if (!args.cuda_graph) return Status::Ok();
  if (world > 1)
    return Status::PreconditionFailed(
        "--cuda-graph: one rank only, got " + std::to_string(world) +
        " (the gradients' allreduces start during backward, on Kolo's threads, which a CUDA "
        "graph cannot capture); drop the flag or run one rank");
  if (!device.is_cuda())
    return Status::Unsupported(
        "--cuda-graph: needs a CUDA device, and none is visible (or this is a CPU-only build); "
        "drop the flag to train on " +
        device.to_string());
  return Status::Ok();
}

GraphStep::GraphStep(Model& model, fw::SGD& sgd, Device device, int64_t batch_size, int64_t classes)
    : model_(model), sgd_(sgd), device_(device), batch_size_(batch_size), classes_(classes) {}

GraphStep::Output GraphStep::eager(const fw::Tensor& x, const fw::Tensor& y) {
  sgd_.zero_grad();
  const fw::Tensor logits = model_.forward(x.to(device_));
  const fw::Tensor loss = fw::cross_entropy(logits, y.to(device_));
  loss.backward();
  return {loss.detach(), logits.detach()};
}

// The static inputs are made (and filled by run()) before the capture; everything the body
// allocates comes from the graph's private pool and keeps its address for every replay.
void GraphStep::capture() {
  graph_.capture(device_, [this] {
    sgd_.zero_grad();
    const fw::Tensor logits = model_.forward(static_x_);
    const fw::Tensor loss = fw::cross_entropy_capturable(logits, static_y_);
    loss.backward();
    captured_ = {loss.detach(), logits.detach()};
  });
}

GraphStep::Output GraphStep::run(const fw::Tensor& x, const fw::Tensor& y) {
  Output out;
  if (steps_++ < kWarmupSteps || x.size(0) != batch_size_) {
    out = eager(x, y);
  } else {
    // On the host, before the labels reach the graph (its loss does not check them).
    fw::check_labels(y, classes_);
    if (!static_x_.defined()) {
      static_x_ = fw::Tensor::empty(x.shape(), device_);
      static_y_ = fw::Tensor::empty(y.shape(), device_, DataType::kInt64);
    }
    // Synchronous copies on the legacy stream: they wait for the previous replay to finish
    // reading the inputs (the graph's stream is a blocking one).
    static_x_.copy_(x);
    static_y_.copy_(y);
    if (!graph_.captured()) capture();  // records only: the replay below runs it
    graph_.replay();
    ++replays_;
    out = captured_;
  }
  sgd_.step();
  return out;
}

}  // namespace kolo::example

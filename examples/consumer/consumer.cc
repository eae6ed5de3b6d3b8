// A small data-parallel training program built against an installed Kolo (see CMakeLists.txt).
//
// Every rank trains the same two-layer MLP on its own shard of a synthetic two-class problem
// (points inside or outside a circle) with SGD wrapped in DistributedOptimizer. It prints the
// final loss and accuracy on rank 0, and checks what data parallelism promises: every rank ends
// with bit-identical parameters, and the model has learned the problem. Exit 0 when both hold,
// 1 otherwise (with the reason).
//
//   kolorun -np 2 ./consumer [--steps N]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kolo/framework.h"

namespace fw = kolo::fw;

namespace {

constexpr int kSamplesPerRank = 256;
constexpr float kRadius = 1.2f;

[[noreturn]] void fail(const std::string& why) {
  if (kolo::is_initialized())
    std::fprintf(stderr, "consumer (rank %d): %s\n", kolo::rank(), why.c_str());
  else
    std::fprintf(stderr, "consumer: %s\n", why.c_str());
  std::exit(1);
}

void check(const kolo::Status& status, const char* what) {
  if (!status.ok()) fail(std::string(what) + ": " + status.to_string());
}

// This rank's shard: points from N(0, 1) in 2-D, labelled 1 outside the circle.
void make_shard(int rank, fw::Tensor* x, fw::Tensor* y) {
  fw::Generator gen(1000 + static_cast<uint64_t>(rank));
  *x = fw::Tensor::randn({kSamplesPerRank, 2}, 0.f, 1.f, &gen);
  std::vector<int64_t> labels(kSamplesPerRank);
  const float* p = x->data<float>();
  for (int i = 0; i < kSamplesPerRank; ++i)
    labels[i] = std::hypot(p[2 * i], p[2 * i + 1]) > kRadius ? 1 : 0;
  *y = fw::Tensor::from_labels(labels);
}

float accuracy(const fw::Tensor& logits, const fw::Tensor& labels) {
  const float* l = logits.data<float>();
  const int64_t* y = labels.data<int64_t>();
  int right = 0;
  for (int i = 0; i < kSamplesPerRank; ++i) right += ((l[2 * i + 1] > l[2 * i]) ? 1 : 0) == y[i];
  return static_cast<float>(right) / kSamplesPerRank;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 300;
  if (argc == 3 && std::strcmp(argv[1], "--steps") == 0) steps = std::atoi(argv[2]);
  if (steps < 1) fail("usage: consumer [--steps N], N >= 1");
  check(kolo::init(), "kolo::init");

  // Each rank seeds its model differently; broadcast_parameters makes rank 0's the start.
  fw::Generator init_gen(7 + static_cast<uint64_t>(kolo::rank()));
  auto model = std::make_shared<fw::nn::Sequential>(std::vector<std::shared_ptr<fw::nn::Module>>{
      std::make_shared<fw::nn::Linear>(2, 16, true, &init_gen), std::make_shared<fw::nn::ReLU>(),
      std::make_shared<fw::nn::Linear>(16, 2, true, &init_gen)});
  fw::broadcast_parameters(model->named_parameters(), /*root=*/0);
  fw::SGD sgd(model->parameters(), {.lr = 0.2, .momentum = 0.9});
  fw::DistributedOptimizer opt(sgd, model->named_parameters());

  fw::Tensor x, y;
  make_shard(kolo::rank(), &x, &y);
  float loss = 0.f;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    opt.set_local_batch_size(kSamplesPerRank);
    fw::Tensor l = fw::cross_entropy(model->forward(x), y);
    l.backward();
    opt.step();
    loss = l.item();
  }

  // The job's accuracy and loss: averaged over the ranks' shards.
  float metrics[2] = {accuracy(model->forward(x), y), loss};
  check(kolo::allreduce("consumer.metrics", kolo::view_of(metrics, {2}),
                        {.op = kolo::ReduceOp::kAverage}),
        "allreduce of the metrics");
  // Identical replicas: the minimum and maximum of every parameter across ranks agree.
  for (auto& [name, param] : model->named_parameters()) {
    std::vector<float> low(param.data<float>(), param.data<float>() + param.numel());
    std::vector<float> high = low;
    const std::vector<int64_t> shape = {param.numel()};
    check(kolo::allreduce("min." + name, kolo::view_of(low.data(), shape),
                          {.op = kolo::ReduceOp::kMin}),
          "allreduce min");
    check(kolo::allreduce("max." + name, kolo::view_of(high.data(), shape),
                          {.op = kolo::ReduceOp::kMax}),
          "allreduce max");
    if (std::memcmp(low.data(), high.data(), low.size() * sizeof(float)) != 0)
      fail("parameter " + name + " differs between ranks");
  }
  if (kolo::rank() == 0)
    std::printf("consumer: %d ranks, %d steps, loss %.4f, accuracy %.3f, replicas identical\n",
                kolo::size(), steps, metrics[1], metrics[0]);
  if (metrics[0] < 0.9f) fail("accuracy " + std::to_string(metrics[0]) + " is below 0.9");
  check(kolo::shutdown(), "kolo::shutdown");
  return 0;
}

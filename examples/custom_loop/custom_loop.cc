// A training loop that uses Kolo's core API directly, without the built-in training stack: the
// way another framework (or a hand-written model) plugs into Kolo.
//
// Each rank fits y = w.x + b to its own shard of synthetic data by gradient descent on the mean
// squared error, with gradients written by hand. Kolo keeps the replicas identical: rank 0's
// initial weights are broadcast, every step's gradients are averaged with asynchronous
// allreduces, and each epoch's per-rank losses are gathered for the log.
//
//   kolorun -np 2 build/bin/custom_loop [--steps 200] [--features 16]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace {

void check(const kolo::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "custom_loop: %s failed: %s\n", what, status.to_string().c_str());
    std::exit(1);
  }
}

struct Args {
  int steps = 200;
  int features = 16;
  int samples_per_rank = 512;
  float lr = 0.1f;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (flag == "--steps" && value > 0) {
      args.steps = value;
    } else if (flag == "--features" && value > 0) {
      args.features = value;
    } else if (flag == "--samples" && value > 0) {
      args.samples_per_rank = value;
    } else {
      std::fprintf(stderr, "usage: custom_loop [--steps N] [--features N] [--samples N]\n");
      std::exit(2);
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  check(kolo::init(), "init");
  const int rank = kolo::rank();
  const int d = args.features;

  // The true model, the same on every rank; the data differ per rank.
  std::mt19937 truth_rng(42);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> true_w(d);
  for (float& v : true_w) v = normal(truth_rng);
  const float true_b = 0.5f;

  std::mt19937 data_rng(1000 + rank);
  const int n = args.samples_per_rank;
  std::vector<float> x(static_cast<size_t>(n) * d), y(n);
  for (int i = 0; i < n; ++i) {
    float dot = true_b;
    for (int j = 0; j < d; ++j) {
      x[i * d + j] = normal(data_rng);
      dot += true_w[j] * x[i * d + j];
    }
    y[i] = dot + 0.01f * normal(data_rng);
  }

  // Different random initialisations per rank, made identical by broadcasting rank 0's.
  std::mt19937 init_rng(7 + rank);
  std::vector<float> w(d), grad_w(d);
  for (float& v : w) v = normal(init_rng);
  float b = 0.f, grad_b = 0.f;
  check(kolo::broadcast("init.w", kolo::view_of(w.data(), {d})), "broadcast w");
  check(kolo::broadcast("init.b", kolo::view_of(&b, {})), "broadcast b");

  float loss = 0.f;
  for (int step = 0; step < args.steps; ++step) {
    loss = 0.f;
    std::fill(grad_w.begin(), grad_w.end(), 0.f);
    grad_b = 0.f;
    for (int i = 0; i < n; ++i) {
      float err = b - y[i];
      for (int j = 0; j < d; ++j) err += w[j] * x[i * d + j];
      loss += err * err / n;
      for (int j = 0; j < d; ++j) grad_w[j] += 2.f * err * x[i * d + j] / n;
      grad_b += 2.f * err / n;
    }
    // Both gradients travel at once; the coordinator may fuse them into one buffer.
    kolo::Handle hw = kolo::allreduce_async("grad.w", kolo::view_of(grad_w.data(), {d}),
                                            {.reduction = {.op = kolo::ReduceOp::kAverage}});
    kolo::Handle hb = kolo::allreduce_async("grad.b", kolo::view_of(&grad_b, {}),
                                            {.reduction = {.op = kolo::ReduceOp::kAverage}});
    check(hw.wait(), "allreduce grad.w");
    check(hb.wait(), "allreduce grad.b");
    for (int j = 0; j < d; ++j) w[j] -= args.lr * grad_w[j];
    b -= args.lr * grad_b;

    if (step % 50 == 0 || step + 1 == args.steps) {
      auto losses = kolo::allgather("loss", kolo::view_of(&loss, {1}));
      check(losses.status(), "allgather loss");
      if (rank == 0) {
        std::printf("step %4d  loss per rank:", step);
        for (int r = 0; r < kolo::size(); ++r) std::printf(" %.5f", losses->data_as<float>()[r]);
        std::printf("\n");
      }
    }
  }
  float max_err = 0.f;
  for (int j = 0; j < d; ++j) max_err = std::max(max_err, std::fabs(w[j] - true_w[j]));
  if (rank == 0) std::printf("max |w - w_true| = %.4f, b = %.4f (true %.2f)\n", max_err, b, true_b);
  check(kolo::shutdown(), "shutdown");
  return max_err < 0.05f ? 0 : 1;
}

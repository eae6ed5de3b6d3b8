// DistributedOptimizer in one process (no kolo::init: a world of one rank): argument errors and
// the local part of the averaging. Multi-rank behaviour is tested through real processes in
// tests/training.
#include "framework/distributed/distributed_optimizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/functional.h"
#include "framework/optim/sgd.h"

namespace kolo::fw {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DistributedOptimizer, BadArgumentsAreNamed) {
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  SGD sgd({w}, {.lr = 0.1});
  EXPECT_NE(error_of([&] {
              DistributedOptimizer(sgd, {{"w", w}}, {.backward_passes_per_step = 0});
            }).find("backward_passes_per_step must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              DistributedOptimizer(sgd, {{"", w}});
            }).find("empty name"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              DistributedOptimizer(sgd, {{"w", w}, {"w", w}});
            }).find("parameter name 'w' appears twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              DistributedOptimizer(sgd, {{"u", Tensor()}});
            }).find("parameter 'u' is undefined"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              DistributedOptimizer(sgd, {{"w", w}}, {.bucket_bytes = -1});
            }).find("bucket_bytes must be >= 0, got -1"),
            std::string::npos);
  DistributedOptimizer opt(sgd, {{"w", w}});
  EXPECT_NE(
      error_of([&] { opt.set_local_batch_size(-4); }).find("local batch size must be >= 0, got -4"),
      std::string::npos);
}

TEST(DistributedOptimizer, AccumulatedPassesAreAveragedOnOneRank) {
  Tensor w = Tensor::from_vector({1.f, 2.f}, {2}).set_requires_grad(true);
  SGD sgd({w}, {.lr = 0.5});
  DistributedOptimizer opt(sgd, {{"w", w}}, {.backward_passes_per_step = 2});
  opt.zero_grad();
  // d/dw sum(w * c) = c: the two passes contribute (2, 4) and (4, 8); their mean is (3, 6).
  sum(mul(w, Tensor::from_vector({2.f, 4.f}, {2}))).backward();
  sum(mul(w, Tensor::from_vector({4.f, 8.f}, {2}))).backward();
  opt.step();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{3.f, 6.f}));
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1.f - 0.5f * 3.f, 2.f - 0.5f * 6.f}));
  EXPECT_EQ(opt.stats().steps, 1);
  EXPECT_EQ(opt.stats().submitted_from_hooks, 1);  // after the second pass
}

// Issue 17: passes inside no_sync() only accumulate (no hook counts them, nothing is
// submitted); the next pass outside makes the summed gradient final, as DDP's no_sync.
TEST(DistributedOptimizer, NoSyncAccumulatesLocallyAndTheNextPassSyncsTheSum) {
  Tensor w = Tensor::from_vector({1.f, 2.f}, {2}).set_requires_grad(true);
  SGD sgd({w}, {.lr = 0.5});
  DistributedOptimizer opt(sgd, {{"w", w}});
  opt.zero_grad();
  {
    NoSyncScope outer = opt.no_sync();
    EXPECT_FALSE(opt.syncing());
    sum(mul(w, Tensor::from_vector({2.f, 4.f}, {2}))).backward();
    {
      NoSyncScope inner = opt.no_sync();  // scopes nest
      sum(mul(w, Tensor::from_vector({1.f, 1.f}, {2}))).backward();
    }
    EXPECT_FALSE(opt.syncing());
    EXPECT_NE(error_of([&] { opt.step(); }).find("step() inside no_sync()"), std::string::npos);
    EXPECT_EQ(opt.stats().submitted_from_hooks, 0);
    EXPECT_TRUE(opt.submitted_handles().empty());
    EXPECT_EQ(w.to_vector(), (std::vector<float>{1.f, 2.f}));  // the failed step changed nothing
  }
  EXPECT_TRUE(opt.syncing());
  sum(mul(w, Tensor::from_vector({4.f, 8.f}, {2}))).backward();
  EXPECT_EQ(opt.stats().submitted_from_hooks, 1);
  opt.step();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{7.f, 13.f}));  // the sum of the 3 passes
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1.f - 0.5f * 7.f, 2.f - 0.5f * 13.f}));
  EXPECT_EQ(opt.stats().steps, 1);
}

TEST(DistributedOptimizer, BucketsPackParametersOutputFirstUpToTheCap) {
  // float32 sizes: a 400 B, b 40 B, c 4000 B, d 40 B, e 400 B (registration = input first).
  auto param = [](int64_t n) { return Tensor::zeros({n}).set_requires_grad(true); };
  std::vector<std::pair<std::string, Tensor>> named = {
      {"a", param(100)}, {"b", param(10)}, {"c", param(1000)}, {"d", param(10)}, {"e", param(100)}};
  std::vector<Tensor> tensors;
  for (auto& [name, t] : named) tensors.push_back(t);
  SGD sgd(tensors, {.lr = 0.1});
  // 500 B: e+d fit (440), c alone exceeds the cap, then b+a (440).
  DistributedOptimizer capped(sgd, named, {.bucket_bytes = 500});
  EXPECT_EQ(capped.bucket_names(),
            (std::vector<std::string>{"grad.bucket0(e..d)", "grad.c", "grad.bucket2(b..a)"}));
  // Compression halves the wire bytes: c (2000 B) now fits with e and d (2220 B).
  DistributedOptimizer compressed(sgd, named,
                                  {.compression = Compression::kFloat16, .bucket_bytes = 2230});
  EXPECT_EQ(compressed.bucket_names(),
            (std::vector<std::string>{"grad.bucket0(e..c)", "grad.bucket1(b..a)"}));
  DistributedOptimizer per_param(sgd, named, {.name_prefix = "g", .bucket_bytes = 0});
  EXPECT_EQ(per_param.bucket_names(),
            (std::vector<std::string>{"g.e", "g.d", "g.c", "g.b", "g.a"}));
  DistributedOptimizer whole(sgd, named);  // the 4 MiB default holds everything
  EXPECT_EQ(whole.bucket_names(), (std::vector<std::string>{"grad.bucket0(e..a)"}));
}

// Elastic: a step that the lost world left half done (one of two passes ran backward) is
// forgotten, so the next step's gradient is the mean of its own two passes only.
TEST(DistributedOptimizer, ResetForNewWorldForgetsTheUnfinishedStep) {
  Tensor w = Tensor::from_vector({1.f, 2.f}, {2}).set_requires_grad(true);
  SGD sgd({w}, {.lr = 0.5});
  DistributedOptimizer opt(sgd, {{"w", w}}, {.backward_passes_per_step = 2});
  opt.zero_grad();
  opt.set_local_batch_size(3);
  sum(mul(w, Tensor::from_vector({100.f, 100.f}, {2}))).backward();  // the lost step's pass
  opt.reset_for_new_world();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{0.f, 0.f}));
  EXPECT_EQ(opt.bucket_names(), (std::vector<std::string>{"grad.w"}));
  sum(mul(w, Tensor::from_vector({2.f, 4.f}, {2}))).backward();
  EXPECT_EQ(opt.stats().submitted_from_hooks, 0);  // one pass of two: not final yet
  sum(mul(w, Tensor::from_vector({4.f, 8.f}, {2}))).backward();
  EXPECT_EQ(opt.stats().submitted_from_hooks, 1);
  opt.step();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{3.f, 6.f}));
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1.f - 0.5f * 3.f, 2.f - 0.5f * 6.f}));
  {
    NoSyncScope scope = opt.no_sync();
    EXPECT_NE(error_of([&] { opt.reset_for_new_world(); }).find("inside no_sync()"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace kolo::fw

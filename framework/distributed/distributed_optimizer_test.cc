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

}  // namespace
}  // namespace kolo::fw

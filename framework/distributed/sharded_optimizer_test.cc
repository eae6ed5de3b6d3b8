// ShardedOptimizer in one process (no kolo::init: a set of one rank, which owns every shard):
// the layout's arithmetic, the sliced updates against the wrapped optimizer's own step, and the
// argument errors. Multi-rank equality runs through real processes (sharded_training_test.cc).
#include "framework/distributed/sharded_optimizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/functional.h"
#include "framework/optim/adam.h"
#include "framework/optim/lars.h"
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

TEST(ShardLayout, ShardsAreContiguousAndBalancedToOneElement) {
  // Sizes 5, 3, 7 (registration order); bucket_bytes 36 holds 9 floats: {7} then {3, 5}.
  const auto layout = make_shard_layout({5, 3, 7}, 36, 3);
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0].params, (std::vector<size_t>{2}));
  EXPECT_EQ(layout[0].counts, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(layout[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(layout[1].param_starts, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(layout[1].counts, (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(layout[1].offsets, (std::vector<int64_t>{0, 3, 6}));
  // Rank 1 owns elements [3, 6) of bucket 1: parameter 0's first three.
  const auto mid = owned_segments(layout[1], 1);
  ASSERT_EQ(mid.size(), 1u);
  EXPECT_EQ(mid[0].param, 0u);
  EXPECT_EQ(mid[0].param_offset, 0);
  EXPECT_EQ(mid[0].bucket_offset, 3);
  EXPECT_EQ(mid[0].length, 3);
  // Rank 2 owns [6, 8): parameter 0's elements 3 and 4.
  const auto last = owned_segments(layout[1], 2);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].param_offset, 3);
  EXPECT_EQ(last[0].length, 2);
  // More ranks than elements: some own nothing.
  const auto tiny = make_shard_layout({2}, 0, 4);
  EXPECT_EQ(tiny[0].counts, (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_TRUE(owned_segments(tiny[0], 3).empty());
}

struct Net {
  Tensor w = Tensor::from_vector({0.5f, -0.25f, 1.f, 0.75f, -1.f, 0.1f}, {2, 3});
  Tensor b = Tensor::from_vector({0.2f, -0.3f}, {2});
  Net() {
    w.set_requires_grad(true);
    b.set_requires_grad(true);
  }
  void backward(int step) {
    const Tensor x = Tensor::from_vector({1.f, 2.f - static_cast<float>(step), 0.5f}, {1, 3});
    const Tensor y = linear(x, w, b);
    sum(mul(y, y)).backward();
  }
};

// One rank owns everything, so each step must equal the wrapped optimizer's own, bit for bit.
template <typename Make>
void expect_same_as_plain(Make make, double max_grad_norm = 0) {
  for (ShardStage stage : {ShardStage::kOptimizerState, ShardStage::kGradients}) {
    Net plain, sharded;
    auto plain_opt = make(std::vector<Tensor>{plain.w, plain.b});
    auto inner = make(std::vector<Tensor>{sharded.w, sharded.b});
    ShardedOptions options;
    options.stage = stage;
    options.max_grad_norm = max_grad_norm;
    options.distributed.bucket_bytes = 8;  // two buckets, b then w
    ShardedOptimizer opt(*inner, {{"w", sharded.w}, {"b", sharded.b}}, options);
    for (int step = 0; step < 4; ++step) {
      plain_opt->zero_grad();
      plain.backward(step);
      if (max_grad_norm > 0) {
        const double total = plain.w.grad().sq_norm() + plain.b.grad().sq_norm();
        const float coef = static_cast<float>(clip_coefficient(total, max_grad_norm));
        if (coef < 1.f) {
          plain.w.grad().mul_(coef);
          plain.b.grad().mul_(coef);
        }
      }
      plain_opt->step();
      opt.zero_grad();
      sharded.backward(step);
      opt.step();
      EXPECT_EQ(sharded.w.to_vector(), plain.w.to_vector()) << plain_opt->name() << " " << step;
      EXPECT_EQ(sharded.b.to_vector(), plain.b.to_vector()) << plain_opt->name() << " " << step;
    }
    EXPECT_EQ(inner->step_count(), 4);
    if (stage == ShardStage::kGradients) {
      EXPECT_FALSE(sharded.w.grad().defined());
    }
  }
}

TEST(ShardedOptimizer, OneRankStepsEqualTheWrappedOptimizersOwn) {
  expect_same_as_plain([](std::vector<Tensor> p) {
    return std::make_unique<SGD>(
        p, SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  });
  expect_same_as_plain([](std::vector<Tensor> p) {
    return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.01});
  });
  expect_same_as_plain([](std::vector<Tensor> p) {
    return std::make_unique<AdamW>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.1});
  });
  expect_same_as_plain(
      [](std::vector<Tensor> p) {
        return std::make_unique<LARS>(p, LarsOptions{.lr = 0.1, .weight_decay = 0.01});
      },
      /*max_grad_norm=*/0.5);
}

class Unshardable : public Optimizer {
 public:
  explicit Unshardable(std::vector<Tensor> p) : Optimizer("Lion", single_group(p), 0.1, {"m"}) {}
  std::string name() const override { return "Lion"; }

 protected:
  void update(int64_t, Tensor&, const Tensor&, double, double, int64_t) override {}
};

TEST(ShardedOptimizer, BadInputIsNamed) {
  Net net;
  Unshardable lion({net.w, net.b});
  EXPECT_NE(error_of([&] {
              ShardedOptimizer(lion, {{"w", net.w}, {"b", net.b}});
            }).find("cannot shard the state of optimizer 'Lion'"),
            std::string::npos);
  SGD sgd({net.w, net.b}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_NE(error_of([&] {
              ShardedOptimizer(sgd, {{"w", net.w}});
            }).find("the optimizer holds 2 parameters but 1 are named"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ShardedOptimizer(sgd, {{"w", net.w}, {"b", net.b}}, {.max_grad_norm = -1});
            }).find("max_grad_norm must be finite and >= 0, got -1"),
            std::string::npos);
  ShardedOptimizer opt(sgd, {{"w", net.w}, {"b", net.b}});
  net.backward(0);
  EXPECT_NE(error_of([&] { sgd.step(); }).find("released to a ShardedOptimizer"),
            std::string::npos);
}

// As DistributedOptimizer's no_sync(): passes inside the scope only accumulate, step() there
// refuses, and the next pass outside makes the sum final.
TEST(ShardedOptimizer, NoSyncAccumulatesAndStepInsideItRefuses) {
  Net net;
  SGD sgd({net.w, net.b}, {.lr = 0.1});
  ShardedOptimizer opt(sgd, {{"w", net.w}, {"b", net.b}});
  opt.zero_grad();
  const std::vector<float> before = net.w.to_vector();
  {
    ShardedNoSyncScope scope = opt.no_sync();
    net.backward(0);
    EXPECT_NE(error_of([&] { opt.step(); }).find("step() inside no_sync()"), std::string::npos);
    EXPECT_EQ(net.w.to_vector(), before);
  }
  const std::vector<float> first = net.w.grad().to_vector();
  net.backward(0);  // the same pass again: the gradient doubles
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(net.w.grad().to_vector()[i], 2 * first[i]);
  opt.step();
  EXPECT_EQ(opt.stats().submitted_from_hooks, 2);  // w and b, after the synced pass only
  EXPECT_EQ(sgd.step_count(), 1);
}

TEST(ShardedOptimizer, MemoryCountsEachCategory) {
  Net net;
  Adam adam({net.w, net.b}, {.lr = 0.01});
  ShardedOptimizer opt(adam, {{"w", net.w}, {"b", net.b}}, {.stage = ShardStage::kGradients});
  net.backward(0);
  opt.step();
  const ShardMemory m = opt.memory();
  EXPECT_EQ(m.current.parameters, 8 * 4);
  EXPECT_EQ(m.current.optimizer_state, 2 * 8 * 4);  // exp_avg and exp_avg_sq, one rank owns all
  EXPECT_EQ(m.current.gradients, 8 * 4);            // the shard only: .grad() was released
  EXPECT_EQ(m.current.communication, 0);            // the flat buffer went once reduced
  EXPECT_EQ(m.peak.communication, 8 * 4);           // it, once .grad() no longer viewed it
}

}  // namespace
}  // namespace kolo::fw

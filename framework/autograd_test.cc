#include "framework/autograd.h"

#include <gtest/gtest.h>

#include "framework/functional.h"
#include "framework/nn/layers.h"

namespace kolo::fw {
namespace {

TEST(AutogradTest, GradientsAccumulateUntilZeroGrad) {
  Tensor w = Tensor::from_vector({1, 2, 3}, {3}).set_requires_grad(true);
  Tensor x = Tensor::from_vector({4, 5, 6}, {3});
  sum(mul(w, x)).backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{4, 5, 6}));
  Tensor buffer = w.grad();
  sum(mul(w, x)).backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{8, 10, 12}));
  EXPECT_TRUE(w.grad().shares_storage(buffer));  // same buffer across passes
  w.zero_grad();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{0, 0, 0}));
}

TEST(AutogradTest, DiamondSumsBothPaths) {
  Tensor w = Tensor::from_vector({3}, {1}).set_requires_grad(true);
  Tensor a = mul(w, w);      // w^2
  Tensor b = scale(w, 4.f);  // 4w
  sum(add(a, b)).backward();
  EXPECT_FLOAT_EQ(w.grad().item(), 2 * 3 + 4);
}

TEST(AutogradTest, HookFiresOncePerPassWithFinalGradAndUnusedIsReported) {
  Tensor w = Tensor::from_vector({2}, {1}).set_requires_grad(true);
  Tensor unused = Tensor::from_vector({1}, {1}).set_requires_grad(true);
  int fired = 0, fired_unused = 0;
  float seen = 0;
  w.register_grad_ready_hook([&](Tensor& g) {
    ++fired;
    seen = g.item();
  });
  unused.register_grad_ready_hook([&](Tensor&) { ++fired_unused; });
  // w is used by three consumers: the hook must wait for all of them.
  Tensor y = add(mul(w, w), add(scale(w, 3.f), w));
  BackwardReport report = backward(sum(y));
  EXPECT_EQ(fired, 1);
  EXPECT_FLOAT_EQ(seen, 2 * 2 + 3 + 1);
  EXPECT_EQ(fired_unused, 0);
  auto un = unused_parameters({w, unused}, report);
  ASSERT_EQ(un.size(), 1u);
  EXPECT_TRUE(un[0].is_same(unused));
  EXPECT_EQ(last_backward_report().pass, report.pass);
  sum(y).backward();
  EXPECT_EQ(fired, 2);
  EXPECT_FLOAT_EQ(seen, 16.f);  // accumulated over two passes
}

TEST(AutogradTest, HooksFireOncePerParameterOfAModel) {
  nn::Sequential model;
  Generator gen(3);
  model.push_back(std::make_shared<nn::Linear>(4, 5, true, &gen));
  model.push_back(std::make_shared<nn::ReLU>());
  model.push_back(std::make_shared<nn::Linear>(5, 2, true, &gen));
  auto named = model.named_parameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "0.weight");
  EXPECT_EQ(named[3].first, "2.bias");
  std::vector<int> counts(named.size(), 0);
  std::vector<std::string> order;
  for (size_t i = 0; i < named.size(); ++i)
    named[i].second.register_grad_ready_hook([&, i](Tensor&) {
      ++counts[i];
      order.push_back(named[i].first);
    });
  Tensor x = Tensor::randn({3, 4}, 0, 1, &gen);
  Tensor loss = cross_entropy(model(x), Tensor::from_labels({0, 1, 1}));
  BackwardReport r = backward(loss);
  EXPECT_EQ(counts, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(r.ready.size(), 4u);
  // The last layer's gradients are final before the first layer's.
  EXPECT_TRUE(order[0] == "2.weight" || order[0] == "2.bias");
  EXPECT_TRUE(unused_parameters(model.parameters(), r).empty());
}

TEST(AutogradTest, ErrorsAreClear) {
  Tensor x = Tensor::ones({2});
  EXPECT_THROW(x.backward(), Error);  // does not require grad
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  EXPECT_THROW(mul(w, w).backward(), Error);  // not a scalar
  Tensor y = mul(w, w);
  EXPECT_THROW(y.set_requires_grad(true), Error);
  EXPECT_THROW(y.register_grad_ready_hook([](Tensor&) {}), Error);
  {
    NoGradGuard guard;
    EXPECT_FALSE(mul(w, w).requires_grad());
  }
}

}  // namespace
}  // namespace kolo::fw

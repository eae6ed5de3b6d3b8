// Optimizer steps against values worked out by hand (the arithmetic is in the comments) and the
// CUDA kernels against the CPU loops.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "framework/optim/adam.h"
#include "framework/optim/lars.h"
#include "framework/optim/sgd.h"
#include "framework/optim/update_kernels.h"

namespace kolo::fw {
namespace {

Tensor param(std::vector<float> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  Tensor p = Tensor::from_vector(v, shape);
  p.set_requires_grad(true);
  return p;
}

void set_grad(const Tensor& p, std::vector<float> g) {
  p.set_grad(Tensor::from_vector(g, p.shape()));
}

float value(const Tensor& t, int64_t i = 0) { return t.to_vector()[static_cast<size_t>(i)]; }

TEST(SGD, PlainStep) {
  Tensor p = param({1.0f, -2.0f});
  SGD opt({p}, {.lr = 0.1});
  set_grad(p, {0.5f, 1.0f});
  opt.step();
  EXPECT_FLOAT_EQ(value(p, 0), 0.95f);  // 1 - 0.1 * 0.5
  EXPECT_FLOAT_EQ(value(p, 1), -2.1f);  // -2 - 0.1 * 1
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(SGD, Momentum) {
  Tensor p = param({1.0f});
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {0.5f});
  opt.step();  // buf = 0.5; p = 1 - 0.05
  EXPECT_FLOAT_EQ(value(p), 0.95f);
  set_grad(p, {0.25f});
  opt.step();  // buf = 0.9 * 0.5 + 0.25 = 0.7; p = 0.95 - 0.07
  EXPECT_FLOAT_EQ(value(p), 0.88f);
}

TEST(SGD, MomentumWithDampening) {
  Tensor p = param({1.0f});
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  set_grad(p, {0.5f});
  opt.step();  // first update: buf = g = 0.5 (no dampening); p = 0.95
  set_grad(p, {0.25f});
  opt.step();  // buf = 0.45 + 0.5 * 0.25 = 0.575; p = 0.95 - 0.0575
  EXPECT_FLOAT_EQ(value(p), 0.8925f);
}

TEST(SGD, Nesterov) {
  Tensor p = param({1.0f});
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  set_grad(p, {0.5f});
  opt.step();  // buf = 0.5; d = 0.5 + 0.45 = 0.95; p = 1 - 0.095
  EXPECT_FLOAT_EQ(value(p), 0.905f);
  set_grad(p, {0.25f});
  opt.step();  // buf = 0.7; d = 0.25 + 0.63 = 0.88; p = 0.905 - 0.088
  EXPECT_FLOAT_EQ(value(p), 0.817f);
}

TEST(SGD, WeightDecay) {
  Tensor p = param({1.0f});
  SGD opt({p}, {.lr = 0.1, .weight_decay = 0.1});
  set_grad(p, {0.5f});
  opt.step();  // g = 0.5 + 0.1 * 1 = 0.6; p = 0.94
  EXPECT_FLOAT_EQ(value(p), 0.94f);
  opt.step();  // g = 0.5 + 0.094 = 0.594; p = 0.94 - 0.0594
  EXPECT_FLOAT_EQ(value(p), 0.8806f);
}

TEST(SGD, GroupsScaleLrAndOverrideDecayAndSkipMissingGrads) {
  Tensor a = param({1.0f}), b = param({1.0f}), c = param({1.0f});
  ParamGroup g1;
  g1.params = {a};
  ParamGroup g2;
  g2.params = {b, c};
  g2.lr_scale = 2.0;
  g2.weight_decay = 0.0;
  SGD opt(std::vector<ParamGroup>{g1, g2}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(a, {1.0f});
  set_grad(b, {1.0f});  // c has no gradient: unchanged
  opt.step();
  EXPECT_FLOAT_EQ(value(a), 0.85f);  // 1 - 0.1 * (1 + 0.5)
  EXPECT_FLOAT_EQ(value(b), 0.8f);   // 1 - 0.2 * 1
  EXPECT_FLOAT_EQ(value(c), 1.0f);
  EXPECT_EQ(opt.state_tensors()[1].second->data<int64_t>()[2], 0);  // c never updated
  opt.set_lr(0.0);
  opt.step();
  EXPECT_FLOAT_EQ(value(a), 0.85f);
}

TEST(SGD, ZeroGradKeepsBuffer) {
  Tensor p = param({1.0f, 2.0f});
  SGD opt({p}, {.lr = 0.1});
  set_grad(p, {3.0f, 4.0f});
  Tensor g = p.grad();
  opt.zero_grad();
  EXPECT_TRUE(p.grad().shares_storage(g));
  EXPECT_EQ(p.grad().to_vector(), (std::vector<float>{0.0f, 0.0f}));
}

TEST(SGD, RejectsBadOptions) {
  Tensor p = param({1.0f});
  try {
    SGD opt({p}, {.lr = 0.1, .momentum = 1.5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("SGD: momentum must be in [0"), std::string::npos)
        << e.what();
    EXPECT_NE(e.status().message().find("got 1.5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SGD({p}, {.lr = -1}), Error);
  EXPECT_THROW(SGD({p}, {.lr = 0.1, .nesterov = true}), Error);  // needs momentum
  EXPECT_THROW(SGD({p, p}, {.lr = 0.1}), Error);                 // duplicate
  EXPECT_THROW(SGD(std::vector<Tensor>{}, {.lr = 0.1}), Error);
  EXPECT_THROW(SGD({Tensor()}, {.lr = 0.1}), Error);
  SGD opt({p}, {.lr = 0.1});
  EXPECT_THROW(opt.set_lr(NAN), Error);
}

TEST(Adam, TwoSteps) {
  Tensor p = param({1.0f});
  Adam opt({p}, {.lr = 0.1});
  set_grad(p, {0.5f});
  opt.step();
  // m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25; p = 1 - 0.1 * 0.5 / (0.5 + 1e-8)
  EXPECT_NEAR(value(p), 0.9f, 1e-6);
  set_grad(p, {0.25f});
  opt.step();
  // m = 0.9 * 0.05 + 0.1 * 0.25 = 0.07; v = 0.999 * 0.00025 + 0.001 * 0.0625 = 0.00031225
  // m^ = 0.07 / 0.19; v^ = 0.00031225 / 0.001999; p = 0.9 - 0.1 * m^ / sqrt(v^)
  const double expected = 0.9 - 0.1 * (0.07 / 0.19) / std::sqrt(0.00031225 / 0.001999);
  EXPECT_NEAR(value(p), expected, 2e-6);  // 0.806782
  auto state = opt.state_tensors();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[2].first, "param.0.exp_avg");
  EXPECT_EQ(state[3].first, "param.0.exp_avg_sq");
  EXPECT_NEAR(value(*state[2].second), 0.07f, 1e-7);
  EXPECT_NEAR(value(*state[3].second), 0.00031225, 1e-8);  // float rounding: ~4e-9
}

TEST(Adam, L2DecayVersusDecoupledAdamW) {
  Tensor a = param({1.0f}), w = param({1.0f});
  Adam adam({a}, {.lr = 0.1, .weight_decay = 0.1});
  AdamW adamw({w}, {.lr = 0.1, .weight_decay = 0.1});
  EXPECT_EQ(adam.name(), "Adam");
  EXPECT_EQ(adamw.name(), "AdamW");
  set_grad(a, {0.5f});
  set_grad(w, {0.5f});
  adam.step();   // g = 0.6: the first Adam step moves by lr * g / |g| = 0.1
  adamw.step();  // p = 1 * (1 - 0.01) - 0.1
  EXPECT_NEAR(value(a), 0.9f, 1e-6);
  EXPECT_NEAR(value(w), 0.89f, 1e-6);
  adam.step();  // g = 0.5 + 0.09 = 0.59
  const double m = 0.9 * 0.06 + 0.1 * 0.59, v = 0.999 * 0.00036 + 0.001 * 0.59 * 0.59;
  const double expected = 0.9 - 0.1 * (m / 0.19) / std::sqrt(v / 0.001999);
  EXPECT_NEAR(value(a), expected, 2e-6);
}

TEST(Adam, RejectsBadOptions) {
  Tensor p = param({1.0f});
  EXPECT_THROW(Adam({p}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(Adam({p}, {.eps = 0}), Error);
  EXPECT_THROW(AdamW({p}, {.weight_decay = -0.1}), Error);
}

TEST(LARS, TrustRatioAndMomentum) {
  Tensor w = param({3.0f, 4.0f}, {1, 2});  // ||w|| = 5
  Tensor bias = param({1.0f});             // 1-D: excluded from adaptation and decay
  LARS opt({w, bias}, {.lr = 1.0, .momentum = 0.9, .weight_decay = 0.1, .trust_coefficient = 0.01});
  set_grad(w, {0.6f, 0.8f});  // ||g|| = 1
  set_grad(bias, {0.5f});
  EXPECT_NEAR(opt.trust_ratio(w, w.grad(), 0.1), 0.05 / 1.5, 1e-9);  // 0.01*5 / (1 + 0.1*5)
  opt.step();
  // g' = (1/30) * ([0.6, 0.8] + 0.1 * [3, 4]) = [0.03, 0.04]; w -= 1.0 * g'
  EXPECT_NEAR(value(w, 0), 2.97f, 1e-6);
  EXPECT_NEAR(value(w, 1), 3.96f, 1e-6);
  EXPECT_NEAR(value(bias), 0.5f, 1e-7);  // 1 - 1.0 * 0.5
  opt.step();
  // ||w|| = 4.95; ratio = 0.0495 / 1.495; g' = ratio * ([0.6, 0.8] + 0.1 * w)
  // buf = 0.9 * [0.03, 0.04] + g'; w -= buf
  const double ratio = 0.0495 / 1.495;
  const double w0 = 2.97 - (0.9 * 0.03 + ratio * (0.6 + 0.297));
  const double w1 = 3.96 - (0.9 * 0.04 + ratio * (0.8 + 0.396));
  EXPECT_NEAR(value(w, 0), w0, 2e-6);
  EXPECT_NEAR(value(w, 1), w1, 2e-6);
  EXPECT_NEAR(value(bias), 0.5f - (0.9f * 0.5f + 0.5f), 1e-6);
}

TEST(LARS, ZeroNormsGiveRatioOne) {
  Tensor w = param({0.0f, 0.0f}, {2, 1});
  LARS opt({w}, {.lr = 0.5, .momentum = 0.0});
  set_grad(w, {1.0f, -1.0f});
  EXPECT_DOUBLE_EQ(opt.trust_ratio(w, w.grad(), 0.0), 1.0);
  opt.step();
  EXPECT_FLOAT_EQ(value(w, 0), -0.5f);
  EXPECT_FLOAT_EQ(value(w, 1), 0.5f);
}

TEST(Optimizer, StateNamesAreStable) {
  Tensor a = param({1.0f}), b = param({1.0f, 2.0f});
  SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  auto state = opt.state_tensors();
  std::vector<std::string> names;
  for (auto& [n, t] : state) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"step", "param_steps", "param.0.momentum",
                                             "param.1.momentum"}));
  EXPECT_EQ(state[3].second->shape(), (Shape{2}));
  EXPECT_EQ(state[0].second->dtype(), DataType::kInt64);
}

TEST(UpdateKernels, SumSquaresCoversLanesAndTail) {
  std::vector<float> x;
  for (int i = 1; i <= 19; ++i) x.push_back(static_cast<float>(i));
  EXPECT_DOUBLE_EQ(kernels::sum_squares(x.data(), 19), 2470.0);  // 19 * 20 * 39 / 6
  EXPECT_DOUBLE_EQ(kernels::sum_squares(x.data(), 16), 1496.0);  // 16 * 17 * 33 / 6
  EXPECT_DOUBLE_EQ(kernels::sum_squares(x.data(), 0), 0.0);
}

// The fused CUDA kernels against the CPU loops, through the optimizers (runs on a GPU build
// with a device; skipped elsewhere).
TEST(CudaUpdate, OptimizersMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Generator gen(11);
  const Tensor w0 = Tensor::randn({37, 29}, 0.f, 1.f, &gen);  // 1073 elements: not a block multiple
  using Make = std::function<std::unique_ptr<Optimizer>(Tensor)>;
  const std::vector<std::pair<std::string, Make>> cases = {
      {"sgd-momentum",
       [](Tensor p) {
         return std::make_unique<SGD>(std::vector<Tensor>{p},
                                      SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
       }},
      {"sgd-nesterov-wd",
       [](Tensor p) {
         return std::make_unique<SGD>(
             std::vector<Tensor>{p},
             SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
      {"adam",
       [](Tensor p) {
         return std::make_unique<Adam>(std::vector<Tensor>{p},
                                       AdamOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
      {"adamw",
       [](Tensor p) {
         return std::make_unique<AdamW>(std::vector<Tensor>{p},
                                        AdamOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
      {"lars",
       [](Tensor p) {
         return std::make_unique<LARS>(
             std::vector<Tensor>{p},
             LarsOptions{.lr = 1.0, .weight_decay = 0.01, .trust_coefficient = 0.02});
       }},
  };
  for (const auto& [name, make] : cases) {
    Tensor cpu = w0.clone(), gpu = w0.to(Device::cuda(0));
    cpu.set_requires_grad(true);
    gpu.set_requires_grad(true);
    auto opt_cpu = make(cpu), opt_gpu = make(gpu);
    for (int step = 0; step < 3; ++step) {
      Tensor g = Tensor::randn({37, 29}, 0.f, 1.f, &gen);
      cpu.set_grad(g);
      gpu.set_grad(g.to(Device::cuda(0)));
      opt_cpu->step();
      opt_gpu->step();
    }
    const std::vector<float> a = cpu.to_vector(), b = gpu.to_vector();
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[i], 1e-5f * (1.f + std::fabs(a[i]))) << name << " element " << i;
    }
  }
}

}  // namespace
}  // namespace kolo::fw

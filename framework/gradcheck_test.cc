// Finite-difference gradient checks for every differentiable op, layer and loss on CPU.
// The scalar checked is sum(f(inputs) * R) with fixed random R so every output element matters.
// Central differences with eps 1e-2 on float32: the truncation error is O(eps^2) and rounding
// error O(1e-7 / eps), so agreement within 1e-2 relative (+ 1e-3 absolute) is expected.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "framework/autograd.h"
#include "framework/functional.h"
#include "framework/nn/layers.h"

namespace kolo::fw {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

double probe_loss(const Fn& f, const std::vector<Tensor>& in, const Tensor& r) {
  NoGradGuard ng;
  Tensor out = f(in);
  if (out.numel() == 1) return out.item();
  std::vector<float> o = out.to_vector(), w = r.to_vector();
  double s = 0;
  for (size_t i = 0; i < o.size(); ++i) s += static_cast<double>(o[i]) * w[i];
  return s;
}

void gradcheck(const Fn& f, std::vector<Tensor> inputs, float eps = 1e-2f) {
  for (auto& t : inputs) t.set_requires_grad(true);
  Tensor out = f(inputs);
  Generator gen(99);
  Tensor r = Tensor::randn(out.shape(), 0, 1, &gen);
  Tensor loss = out.numel() == 1 ? out : sum(mul(out, r));
  loss.backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    ASSERT_TRUE(x.grad().defined()) << "input " << k;
    std::vector<float> analytic = x.grad().to_vector();
    float* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float orig = p[i];
      p[i] = orig + eps;
      const double up = probe_loss(f, inputs, r);
      p[i] = orig - eps;
      const double down = probe_loss(f, inputs, r);
      p[i] = orig;
      const double numeric = (up - down) / (2.0 * eps);
      EXPECT_NEAR(analytic[static_cast<size_t>(i)], numeric, 1e-3 + 1e-2 * std::fabs(numeric))
          << "input " << k << " element " << i;
    }
  }
}

Tensor rnd(const Shape& s, uint64_t seed, float scale = 1.f) {
  Generator g(seed);
  return Tensor::randn(s, 0, scale, &g);
}

TEST(GradCheck, Elementwise) {
  gradcheck([](auto& v) { return add(v[0], v[1]); }, {rnd({5}, 1), rnd({5}, 2)});
  gradcheck([](auto& v) { return sub(v[0], v[1]); }, {rnd({5}, 1), rnd({5}, 2)});
  gradcheck([](auto& v) { return mul(v[0], v[1]); }, {rnd({5}, 1), rnd({5}, 2)});
  gradcheck([](auto& v) { return sigmoid(v[0]); }, {rnd({6}, 3)});
  gradcheck([](auto& v) { return fw::tanh(v[0]); }, {rnd({6}, 4)});
  // relu: values away from the kink so the finite difference is valid.
  gradcheck([](auto& v) { return relu(v[0]); },
            {Tensor::from_vector({-1.f, 0.5f, 2.f, -0.3f, 0.7f}, {5})});
  gradcheck([](auto& v) { return mean(v[0]); }, {rnd({2, 3}, 5)});
  gradcheck([](auto& v) { return v[0].reshape({3, 2}); }, {rnd({2, 3}, 6)});
}

TEST(GradCheck, MatmulAndLinear) {
  gradcheck([](auto& v) { return matmul(v[0], v[1]); }, {rnd({3, 4}, 1), rnd({4, 2}, 2)});
  gradcheck([](auto& v) { return linear(v[0], v[1], v[2]); },
            {rnd({3, 4}, 3), rnd({5, 4}, 4), rnd({5}, 5)});
}

TEST(GradCheck, Conv2d) {
  gradcheck([](auto& v) { return conv2d(v[0], v[1], v[2], 1, 1); },
            {rnd({2, 2, 5, 5}, 1), rnd({3, 2, 3, 3}, 2), rnd({3}, 3)});
  gradcheck([](auto& v) { return conv2d(v[0], v[1], Tensor(), 2, 0); },
            {rnd({1, 2, 6, 6}, 4), rnd({2, 2, 3, 3}, 5)});
}

TEST(GradCheck, Pooling) {
  // Distinct values spaced by more than 2*eps so the max does not switch under perturbation.
  std::vector<float> v(2 * 2 * 4 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % v.size()) * 0.1f;
  gradcheck([](auto& x) { return max_pool2d(x[0], 2, 2); }, {Tensor::from_vector(v, {2, 2, 4, 4})});
  gradcheck([](auto& x) { return avg_pool2d(x[0], 2, 1); }, {rnd({2, 2, 4, 4}, 7)});
}

TEST(GradCheck, BatchNormTrainAndEval) {
  gradcheck([](auto& v) { return batch_norm_train(v[0], v[1], v[2], 1e-5f, nullptr, nullptr); },
            {rnd({4, 3}, 1), rnd({3}, 2), rnd({3}, 3)});
  gradcheck([](auto& v) { return batch_norm_train(v[0], v[1], v[2], 1e-5f, nullptr, nullptr); },
            {rnd({2, 2, 3, 3}, 4), rnd({2}, 5), rnd({2}, 6)});
  Tensor rm = Tensor::from_vector({0.1f, -0.2f}, {2}), rv = Tensor::from_vector({0.5f, 2.f}, {2});
  gradcheck([&](auto& v) { return batch_norm_eval(v[0], v[1], v[2], rm, rv, 1e-5f); },
            {rnd({3, 2, 2, 2}, 7), rnd({2}, 8), rnd({2}, 9)});
}

TEST(GradCheck, SoftmaxAndLosses) {
  gradcheck([](auto& v) { return log_softmax(v[0]); }, {rnd({3, 4}, 1)});
  Tensor labels = Tensor::from_labels({2, 0, 3});
  gradcheck([&](auto& v) { return cross_entropy(v[0], labels); }, {rnd({3, 4}, 2)});
  gradcheck([](auto& v) { return mse_loss(v[0], v[1]); }, {rnd({2, 3}, 3), rnd({2, 3}, 4)});
}

TEST(GradCheck, LayersThroughModules) {
  Generator gen(11);
  auto conv = std::make_shared<nn::Conv2d>(1, 2, 3, 1, 1, true, &gen);
  gradcheck([&](auto& v) { return (*conv)(v[0]); }, {rnd({1, 1, 4, 4}, 1)});
  nn::Flatten flat;
  gradcheck([&](auto& v) { return flat(v[0]); }, {rnd({2, 2, 2}, 2)});
  nn::Dropout drop(0.5f);
  drop.eval();
  Tensor x = rnd({4}, 3);
  EXPECT_TRUE(drop(x).is_same(x));
  // Dropout in training: a fixed mask per generator seed, gradient = mask.
  gradcheck(
      [](auto& v) {
        Generator g(5);
        return dropout(v[0], 0.5f, true, &g);
      },
      {rnd({8}, 4)});
}

TEST(GradCheck, ShapeErrorsNameBothShapes) {
  try {
    linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}), Tensor());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos);
  }
  EXPECT_THROW(cross_entropy(Tensor::zeros({2, 3}), Tensor::from_labels({0, 3})), Error);
  EXPECT_THROW(conv2d(Tensor::zeros({1, 2, 4, 4}), Tensor::zeros({1, 3, 3, 3}), Tensor(), 1, 0),
               Error);
  EXPECT_THROW(max_pool2d(Tensor::zeros({1, 1, 2, 2}), 3, 1), Error);
}

}  // namespace
}  // namespace kolo::fw

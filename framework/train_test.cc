// End-to-end learning checks with plain SGD written inline (optim/ is a separate library).
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "framework/nn/layers.h"
#include "framework/nn/losses.h"

namespace kolo::fw {
namespace {

void sgd_step(nn::Module& m, float lr) {
  for (Tensor& p : m.parameters()) p.add_(p.grad(), -lr);
  m.zero_grad();
}

TEST(TrainTest, MlpLearnsXor) {
  Generator gen(1);
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Linear>(2, 8, true, &gen));
  model.push_back(std::make_shared<nn::Tanh>());
  model.push_back(std::make_shared<nn::Linear>(8, 2, true, &gen));
  Tensor x = Tensor::from_vector({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor y = Tensor::from_labels({0, 1, 1, 0});
  nn::CrossEntropyLoss loss_fn;
  float loss = 0;
  for (int step = 0; step < 500; ++step) {
    Tensor l = loss_fn(model(x), y);
    loss = l.item();
    l.backward();
    sgd_step(model, 0.5f);
  }
  EXPECT_LT(loss, 0.05f);
  std::vector<float> logits = model(x).to_vector();
  for (int i = 0; i < 4; ++i) {
    const int predicted = logits[2 * i + 1] > logits[2 * i] ? 1 : 0;
    EXPECT_EQ(predicted, (i == 1 || i == 2) ? 1 : 0) << "input " << i;
  }
}

TEST(TrainTest, SmallCnnFitsAHandfulOfImages) {
  Generator gen(2);
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, true, &gen));
  model.push_back(std::make_shared<nn::BatchNorm2d>(4));
  model.push_back(std::make_shared<nn::ReLU>());
  model.push_back(std::make_shared<nn::MaxPool2d>(2));
  model.push_back(std::make_shared<nn::Flatten>());
  model.push_back(std::make_shared<nn::Linear>(4 * 4 * 4, 4, true, &gen));
  Tensor x = Tensor::randn({8, 1, 8, 8}, 0, 1, &gen);
  Tensor y = Tensor::from_labels({0, 1, 2, 3, 0, 1, 2, 3});
  nn::CrossEntropyLoss loss_fn;
  float first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Tensor l = loss_fn(model(x), y);
    if (step == 0) first = l.item();
    last = l.item();
    l.backward();
    sgd_step(model, 0.1f);
  }
  EXPECT_LT(last, 0.1f * first);
  model.eval();
  std::vector<float> logits = model(x).to_vector();
  int correct = 0;
  for (int i = 0; i < 8; ++i) {
    int best = 0;
    for (int c = 1; c < 4; ++c)
      if (logits[i * 4 + c] > logits[i * 4 + best]) best = c;
    correct += best == i % 4;
  }
  EXPECT_GE(correct, 7);
}

TEST(TrainTest, BatchNormRunningStatsAndBuffers) {
  nn::BatchNorm1d bn(2, 1e-5f, 1.0f);  // momentum 1: running stats = last batch
  Tensor x = Tensor::from_vector({1, 10, 3, 20}, {2, 2});
  bn(x);
  EXPECT_EQ(bn.running_mean().to_vector(), (std::vector<float>{2, 15}));
  EXPECT_EQ(bn.running_var().to_vector(), (std::vector<float>{2, 50}));  // unbiased
  auto buffers = bn.named_buffers();
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].first, "running_mean");
  EXPECT_THROW(bn(Tensor::zeros({2, 3})), Error);
}

}  // namespace
}  // namespace kolo::fw

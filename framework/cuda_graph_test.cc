// CudaGraph (cuda_graph.h) and the capturable loss. The CPU tests run everywhere: a capture on
// the CPU is refused by name and the capturable loss is exactly cross_entropy there. The GPU
// tests skip without a device; scripts/gpu-check.sh runs them.
#include "framework/cuda_graph.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/functional.h"
#include "framework/nn/layers.h"

namespace kolo::fw {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaGraph, CaptureOnTheCpuIsRefusedAndRunsNothing) {
  CudaGraph graph;
  bool ran = false;
  try {
    graph.capture(Device::cpu(), [&] { ran = true; });
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(e.status().message().find("CudaGraph: capture"), std::string::npos)
        << e.status().message();
  }
  EXPECT_FALSE(ran);
  EXPECT_FALSE(graph.captured());
}

TEST(CudaGraph, ReplayBeforeCaptureIsRefused) {
  CudaGraph graph;
  try {
    graph.replay();
    FAIL() << "expected PreconditionFailed";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kPreconditionFailed);
    EXPECT_EQ(e.status().message(), "CudaGraph: replay() before a successful capture()");
  }
}

// On the CPU the capturable loss is cross_entropy, value and gradient bit for bit.
TEST(CudaGraph, CapturableCrossEntropyOnTheCpuIsCrossEntropy) {
  Generator gen(3);
  const Tensor base = Tensor::randn({7, 5}, 0.f, 1.f, &gen);
  const Tensor y = Tensor::from_labels({0, 4, 2, 1, 3, 3, 0});
  Tensor a = base.clone(), b = base.clone();
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor la = cross_entropy(a, y), lb = cross_entropy_capturable(b, y);
  EXPECT_EQ(la.item(), lb.item());
  la.backward();
  lb.backward();
  EXPECT_TRUE(same_bits(a.grad().to_vector(), b.grad().to_vector()));
}

TEST(CudaGraph, CheckLabelsNamesTheFirstBadLabel) {
  EXPECT_NO_THROW(check_labels(Tensor::from_labels({0, 9, 3}), 10));
  try {
    check_labels(Tensor::from_labels({0, 10, -1}), 10);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e.status().message(), "cross_entropy: label 10 at index 1 is outside [0, 10)");
  }
}

// ---- GPU ----
class CudaGraphGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// A small CNN with every kind of layer the main job's two models use (cuDNN convolution, bias,
// ReLU, max pooling, cuBLAS GEMMs), built the same from one seed.
std::shared_ptr<nn::Sequential> small_cnn(uint64_t seed) {
  Generator g(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, true, &g));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(2));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(4 * 4 * 4, 16, true, &g));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(16, 5, true, &g));
  m->to(Device::cuda(0));
  return m;
}

// Plain SGD, eagerly (framework_test has no optimizer library): zero_grad keeps the buffers.
void zero_grads(nn::Module& m) {
  for (const Tensor& p : m.parameters()) p.zero_grad();
}
void sgd_step(nn::Module& m, float lr) {
  for (Tensor p : m.parameters()) p.add_(p.grad(), -lr);
}

// The same steps (batches, learning rates changing every step) eagerly and with the step
// replayed from a graph after two eager warm-up steps: the same losses and parameters. The
// capturable loss sums in one block as the eager one does for 16 rows, and every other kernel is
// the same call in the same order, so they agree to the bit (a tolerance of 1e-6 leaves room for
// a cuBLAS that picks another kernel on the capture stream).
TEST_F(CudaGraphGpu, TrainingStepMatchesEager) {
  const Device d = Device::cuda(0);
  auto eager_model = small_cnn(5), graph_model = small_cnn(5);
  Generator data(9);
  Tensor static_x = Tensor::empty({16, 1, 8, 8}, d);
  Tensor static_y = Tensor::empty({16}, d, DataType::kInt64);
  Tensor graph_loss;
  CudaGraph graph;
  for (int step = 0; step < 8; ++step) {
    const Tensor x = Tensor::randn({16, 1, 8, 8}, 0.f, 1.f, &data);
    std::vector<int64_t> labels(16);
    for (int i = 0; i < 16; ++i) labels[i] = (i * 7 + step) % 5;
    const Tensor y = Tensor::from_labels(labels);
    const float lr = 0.1f / static_cast<float>(1 + step);
    zero_grads(*eager_model);
    const Tensor le = cross_entropy((*eager_model)(x.to(d)), y.to(d));
    le.backward();
    sgd_step(*eager_model, lr);
    float lg = 0;
    if (step < 2) {  // warm-up: gradients, handles and algorithms exist afterwards
      zero_grads(*graph_model);
      const Tensor l = cross_entropy((*graph_model)(x.to(d)), y.to(d));
      l.backward();
      lg = l.item();
    } else {
      static_x.copy_(x);
      static_y.copy_(y);
      if (!graph.captured())
        graph.capture(d, [&] {
          zero_grads(*graph_model);
          const Tensor l = cross_entropy_capturable((*graph_model)(static_x), static_y);
          l.backward();
          graph_loss = l.detach();
        });
      graph.replay();
      lg = graph_loss.item();
    }
    sgd_step(*graph_model, lr);  // outside the graph: the rate changes every step
    EXPECT_NEAR(le.item(), lg, 1e-6) << "step " << step;
  }
  EXPECT_GT(graph.pool_bytes(), 0u);
  const auto pe = eager_model->named_parameters(), pg = graph_model->named_parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    const std::vector<float> a = pe[i].second.to_vector(), b = pg[i].second.to_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-6) << pe[i].first << j;
  }
}

// A host read inside a capture is refused by name, the capture is closed, and eager work goes on.
TEST_F(CudaGraphGpu, HostReadInsideACaptureIsRefusedByName) {
  const Device d = Device::cuda(0);
  const Tensor t = Tensor::ones({4}, d);
  CudaGraph graph;
  try {
    graph.capture(d, [&] { (void)t.sum(); });
    FAIL() << "expected PreconditionFailed";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kPreconditionFailed);
    EXPECT_NE(e.status().message().find("CUDA graph capture"), std::string::npos)
        << e.status().message();
  }
  EXPECT_FALSE(graph.captured());
  EXPECT_EQ(t.sum(), 4.f);
  CudaGraph again;  // the allocator's capture was closed too
  Tensor out = Tensor::zeros({4}, d);
  again.capture(d, [&] { out.add_(t); });
  again.replay();
  again.replay();
  EXPECT_EQ(out.to_vector(), std::vector<float>(4, 2.f));
}

// One capture at a time (the allocator's pool is process-wide while it is open): a second one
// inside the first is refused by name, and both graphs are left uncaptured.
TEST_F(CudaGraphGpu, ASecondCaptureWhileOneIsOpenIsRefused) {
  const Device d = Device::cuda(0);
  CudaGraph outer, inner;
  try {
    outer.capture(d, [&] { inner.capture(d, [] {}); });
    FAIL() << "expected PreconditionFailed";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kPreconditionFailed);
    EXPECT_NE(e.status().message().find("a CUDA graph capture is already open"), std::string::npos)
        << e.status().message();
  }
  EXPECT_FALSE(outer.captured());
  EXPECT_FALSE(inner.captured());
  EXPECT_EQ(Tensor::ones({3}, d).sum(), 3.f);  // eager work goes on
}

// A block the capture used and freed stays the graph's: eager allocations after the capture get
// other addresses, so a replay cannot overwrite them.
TEST_F(CudaGraphGpu, CaptureTemporariesStayReservedForTheGraph) {
  const Device d = Device::cuda(0);
  const Tensor x = Tensor::ones({1000}, d);
  Tensor out = Tensor::zeros({1000}, d);
  const void* temp_address = nullptr;
  CudaGraph graph;
  graph.capture(d, [&] {
    Tensor temp = x.clone();  // freed at the end of the body
    temp.mul_(3.f);
    temp_address = temp.raw_data();
    out.copy_(temp);
  });
  EXPECT_GE(graph.pool_bytes(), 1000 * sizeof(float));
  std::vector<Tensor> eager;
  for (int i = 0; i < 8; ++i) {
    eager.push_back(Tensor::full({1000}, 5.f, d));
    EXPECT_NE(eager.back().raw_data(), temp_address) << i;
  }
  graph.replay();
  EXPECT_EQ(out.to_vector(), std::vector<float>(1000, 3.f));
  for (const Tensor& e : eager) EXPECT_EQ(e.to_vector(), std::vector<float>(1000, 5.f));
}

}  // namespace
}  // namespace kolo::fw

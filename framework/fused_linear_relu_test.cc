// linear_relu (functional.h): on the CPU exactly relu(linear()); on CUDA the cuBLASLt bias + ReLU
// epilogue, within float rounding of the unfused ops, and the unfused ops themselves in
// deterministic mode. The GPU tests skip without a device; scripts/gpu-check.sh runs them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/functional.h"
#if defined(KOLO_HAVE_CUDA)
#include "framework/kernels/cuda_kernels.h"
#endif

namespace kolo::fw {
namespace {

struct LinearGrads {
  std::vector<float> y, gx, gw, gb;
};

// y = relu(x w^T + b), fused or as two ops, and the gradients of sum(y * r) for a random r. With
// `x_offset`, x is a view starting that many floats into its storage (an unaligned pointer).
LinearGrads run(bool fused, int64_t n, int64_t in, int64_t out, Device dev, int64_t x_offset = 0) {
  Generator gen(11);
  Tensor base = Tensor::randn({n * in + x_offset}, 0.f, 1.f, &gen).to(dev);
  Tensor x = base.slice(x_offset, x_offset + n * in).reshape({n, in}).detach();
  Tensor w = Tensor::randn({out, in}, 0.f, 0.2f, &gen).to(dev);
  Tensor b = Tensor::randn({out}, 0.f, 0.5f, &gen).to(dev);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  const Tensor y = fused ? linear_relu(x, w, b) : relu(linear(x, w, b));
  const Tensor r = Tensor::randn(y.shape(), 0.f, 1.f, &gen).to(dev);
  sum(mul(y, r)).backward();
  return {y.to_vector(), x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
}

TEST(FusedLinearRelu, OnTheCpuIsLinearThenReluBitForBit) {
  const LinearGrads a = run(true, 9, 13, 7, Device::cpu()), b = run(false, 9, 13, 7, Device::cpu());
  EXPECT_EQ(a.y, b.y);  // exact float equality, element by element
  EXPECT_EQ(a.gx, b.gx);
  EXPECT_EQ(a.gw, b.gw);
  EXPECT_EQ(a.gb, b.gb);
}

TEST(FusedLinearRelu, ChecksItsArgumentsAsLinearDoes) {
  const Tensor x = Tensor::randn({4, 3}), w = Tensor::randn({5, 2}), b = Tensor::randn({5});
  try {
    (void)linear_relu(x, w, b);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e.status().message(),
              "linear: x has 3 features (shape [4, 3]) but weight expects 2 (shape [5, 2])");
  }
}

#if defined(KOLO_HAVE_CUDA)
class FusedLinearReluCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  void TearDown() override { kernels::cuda::set_deterministic(false); }
};

void expect_near_rel(const std::vector<float>& a, const std::vector<float>& b, float rel,
                     const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float scale = 1e-6f;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], rel * scale) << what << " " << i;
}

// The main job's Linear + ReLU layers at batch 64 (MLP fc1, fc2; CNN fc1), an odd shape and an
// unaligned input: the epilogue's sum (GEMM + bias in float, then ReLU) against the unfused
// GEMM, bias kernel and ReLU kernel on the same GPU. The ReLU masks agree except where the
// pre-activation is within rounding of 0, which the tolerance covers.
TEST_F(FusedLinearReluCuda, MatchesTheUnfusedOpsOnTheGpu) {
  struct Shape {
    int64_t n, in, out, x_offset;
  };
  for (const Shape& s : {Shape{64, 784, 512, 0}, Shape{64, 512, 256, 0}, Shape{64, 1568, 128, 0},
                         Shape{7, 13, 5, 0}, Shape{6, 10, 9, 1}}) {
    const std::string what = std::to_string(s.n) + "x" + std::to_string(s.in) + "->" +
                             std::to_string(s.out) + " offset " + std::to_string(s.x_offset);
    const LinearGrads f = run(true, s.n, s.in, s.out, Device::cuda(0), s.x_offset);
    const LinearGrads u = run(false, s.n, s.in, s.out, Device::cuda(0), s.x_offset);
    expect_near_rel(f.y, u.y, 1e-5f, what + " y");
    expect_near_rel(f.gx, u.gx, 1e-4f, what + " grad x");
    expect_near_rel(f.gw, u.gw, 1e-4f, what + " grad w");
    expect_near_rel(f.gb, u.gb, 1e-4f, what + " grad b");
  }
}

// Deterministic mode runs the unfused kernels (the ones docs/determinism.md covers): the same
// bits as relu(linear()) there.
TEST_F(FusedLinearReluCuda, InDeterministicModeItIsTheUnfusedOpsBitForBit) {
  kernels::cuda::set_deterministic(true);
  const LinearGrads f = run(true, 64, 784, 512, Device::cuda(0));
  const LinearGrads u = run(false, 64, 784, 512, Device::cuda(0));
  EXPECT_EQ(f.y, u.y);
  EXPECT_EQ(f.gx, u.gx);
  EXPECT_EQ(f.gw, u.gw);
  EXPECT_EQ(f.gb, u.gb);
}
#endif

}  // namespace
}  // namespace kolo::fw

#include "framework/tensor.h"

#include <gtest/gtest.h>

namespace kolo::fw {
namespace {

TEST(TensorTest, FactoriesShapesAndAccess) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.size(-1), 3);
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.f);
  Tensor f = Tensor::full({4}, 2.5f);
  EXPECT_EQ(f.to_vector(), std::vector<float>(4, 2.5f));
  Tensor v = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.data<float>()[4], 5.f);
  EXPECT_THROW(v.data<int64_t>(), Error);
  EXPECT_THROW(Tensor::from_vector({1, 2}, {3}), Error);
}

TEST(TensorTest, RandomIsSeededAndDeterministic) {
  Generator g1(7), g2(7);
  EXPECT_EQ(Tensor::randn({16}, 0, 1, &g1).to_vector(), Tensor::randn({16}, 0, 1, &g2).to_vector());
  Tensor u = Tensor::uniform({1000}, -2.f, 3.f, &g1);
  for (float x : u.to_vector()) {
    EXPECT_GE(x, -2.f);
    EXPECT_LT(x, 3.f);
  }
  Tensor n = Tensor::randn({20000}, 1.f, 2.f, &g1);
  EXPECT_NEAR(n.sum() / 20000.f, 1.f, 0.05f);
}

TEST(TensorTest, ViewsShareStorage) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.to_vector(), (std::vector<float>{2, 3, 4, 5}));
  s.fill_(9.f);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 1, 9, 9, 9, 9}));
  Tensor r = t.reshape({-1});
  EXPECT_TRUE(r.shares_storage(t));
  EXPECT_EQ(r.shape(), (Shape{6}));
  EXPECT_THROW(t.reshape({4}), Error);
  EXPECT_THROW(t.slice(2, 4), Error);
  try {
    t.reshape({5, -1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos);
  }
}

TEST(TensorTest, InPlaceOps) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3});
  Tensor b = Tensor::from_vector({4, 5, 6}, {3});
  a.add_(b, 2.f);
  EXPECT_EQ(a.to_vector(), (std::vector<float>{9, 12, 15}));
  a.mul_(0.5f);
  EXPECT_EQ(a.to_vector(), (std::vector<float>{4.5f, 6, 7.5f}));
  a.lerp_(b, 0.f, 1.f);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  a.addcmul_(b, b, 1.f);  // 4+16, 5+25, 6+36
  EXPECT_EQ(a.to_vector(), (std::vector<float>{20, 30, 42}));
  Tensor c = Tensor::from_vector({0, 0}, {2});
  c.addcdiv_sqrt_(Tensor::from_vector({2, 3}, {2}), Tensor::from_vector({4, 9}, {2}), 1.f, 0.f);
  EXPECT_EQ(c.to_vector(), (std::vector<float>{1, 1}));
  EXPECT_FLOAT_EQ(b.sum(), 15.f);
  EXPECT_FLOAT_EQ(b.sq_norm(), 77.f);
  EXPECT_THROW(a.add_(Tensor::zeros({2})), Error);
}

TEST(TensorTest, HalfAndBfloat16RoundTrip) {
  Tensor a = Tensor::from_vector({1.f, -2.5f, 0.333251953125f, 65504.f}, {4});
  Tensor h = a.to(DataType::kFloat16);
  EXPECT_EQ(h.dtype(), DataType::kFloat16);
  EXPECT_EQ(h.nbytes(), 8u);
  EXPECT_EQ(h.to(DataType::kFloat32).to_vector(), a.to_vector());  // exactly representable
  Tensor b = Tensor::from_vector({1.f, -2.5f, 3.140625f}, {3}).to(DataType::kBFloat16);
  EXPECT_EQ(b.to(DataType::kFloat32).to_vector(), (std::vector<float>{1.f, -2.5f, 3.140625f}));
  EXPECT_THROW(Tensor::zeros({2}, Device::cpu(), DataType::kInt64).to(DataType::kFloat16), Error);
}

TEST(TensorTest, CudaWithoutDeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device exists";
  EXPECT_THROW(Tensor::zeros({2}, Device::cuda(0)), Error);
}

}  // namespace
}  // namespace kolo::fw

#include "examples/train_fashion_mnist/models.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "framework/functional.h"

namespace kolo::example {
namespace {

using fw::Shape;
using fw::Tensor;

struct ParamSpec {
  std::string name;
  Shape shape;
  float gain;  // weights: std sqrt(gain / fan_in); 0 for biases (zeros)
};

const std::vector<ParamSpec>& mlp_spec() {
  static const std::vector<ParamSpec> spec = {
      {"fc1.weight", {512, 784}, 2.f}, {"fc1.bias", {512}, 0.f},
      {"fc2.weight", {256, 512}, 2.f}, {"fc2.bias", {256}, 0.f},
      {"fc3.weight", {10, 256}, 1.f},  {"fc3.bias", {10}, 0.f},
  };
  return spec;
}

const std::vector<ParamSpec>& cnn_spec() {
  static const std::vector<ParamSpec> spec = {
      {"conv1.weight", {16, 1, 3, 3}, 2.f},  {"conv1.bias", {16}, 0.f},
      {"conv2.weight", {32, 16, 3, 3}, 2.f}, {"conv2.bias", {32}, 0.f},
      {"fc1.weight", {128, 1568}, 2.f},      {"fc1.bias", {128}, 0.f},
      {"fc2.weight", {10, 128}, 1.f},        {"fc2.bias", {10}, 0.f},
  };
  return spec;
}

const std::vector<ParamSpec>& spec_of(ModelKind kind) {
  return kind == ModelKind::kMlp ? mlp_spec() : cnn_spec();
}

std::vector<std::vector<float>> values_of(const Model& model) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.to_vector());
  return out;
}

float std_of(const std::vector<float>& v) {
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size());
  const double mean = sum / n;
  return static_cast<float>(std::sqrt(sq / n - mean * mean));
}

class ModelsTest : public ::testing::TestWithParam<ModelKind> {};

TEST_P(ModelsTest, NamedParametersHaveTheFixedNamesShapesAndOrder) {
  const auto model = make_model(GetParam(), 1, Device::cpu());
  const NamedParameters params = model->named_parameters();
  const std::vector<ParamSpec>& spec = spec_of(GetParam());
  ASSERT_EQ(params.size(), spec.size());
  int64_t total = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    SCOPED_TRACE(spec[i].name);
    EXPECT_EQ(params[i].first, spec[i].name);
    EXPECT_EQ(params[i].second.shape(), spec[i].shape);
    EXPECT_TRUE(params[i].second.requires_grad());
    EXPECT_EQ(params[i].second.device(), Device::cpu());
    EXPECT_EQ(params[i].second.dtype(), DataType::kFloat32);
    EXPECT_TRUE(params[i].second.is_same(model->parameters()[i]));
    total += fw::shape_numel(spec[i].shape);
  }
  EXPECT_EQ(model->num_elements(), total);
  EXPECT_EQ(model->num_elements(), GetParam() == ModelKind::kMlp ? 535818 : 206922);
}

TEST_P(ModelsTest, SameSeedGivesBitIdenticalParametersAndAnotherSeedOthers) {
  const auto a = values_of(*make_model(GetParam(), 42, Device::cpu()));
  const auto b = values_of(*make_model(GetParam(), 42, Device::cpu()));
  const auto c = values_of(*make_model(GetParam(), 43, Device::cpu()));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(spec_of(GetParam())[i].name);
    EXPECT_EQ(a[i], b[i]);  // bit-identical floats
    if (spec_of(GetParam())[i].gain > 0) {
      EXPECT_NE(a[i], c[i]);
    }
  }
}

// The values are exactly the normal draws N(0, gain / fan_in) of a Generator seeded with the
// seed, layer by layer from input to output, and zero biases: the initialisation the example
// documents (and had before it moved to nn layers), independent of the layers' own scheme.
TEST_P(ModelsTest, ParametersAreTheSeededDrawsInInputToOutputOrder) {
  constexpr uint64_t kSeed = 7;
  const auto model = make_model(GetParam(), kSeed, Device::cpu());
  const NamedParameters params = model->named_parameters();
  fw::Generator gen(kSeed);
  const std::vector<ParamSpec>& spec = spec_of(GetParam());
  ASSERT_EQ(params.size(), spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    SCOPED_TRACE(spec[i].name);
    const int64_t fan_in = fw::shape_numel(spec[i].shape) / spec[i].shape[0];
    const Tensor expected =
        spec[i].gain > 0 ? Tensor::randn(spec[i].shape, 0.f,
                                         std::sqrt(spec[i].gain / static_cast<float>(fan_in)), &gen)
                         : Tensor::zeros(spec[i].shape);
    EXPECT_EQ(params[i].second.to_vector(), expected.to_vector());
  }
}

TEST_P(ModelsTest, InitialisationStdFollowsHeAndLeCun) {
  const auto model = make_model(GetParam(), 3, Device::cpu());
  const NamedParameters params = model->named_parameters();
  const std::vector<ParamSpec>& spec = spec_of(GetParam());
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i].gain == 0) continue;
    // conv1 has only 144 weights: too few for a 10% bound on the sample std.
    if (params[i].second.numel() < 1000) continue;
    SCOPED_TRACE(spec[i].name);
    const int64_t fan_in = fw::shape_numel(spec[i].shape) / spec[i].shape[0];
    const float want = std::sqrt(spec[i].gain / static_cast<float>(fan_in));
    EXPECT_NEAR(std_of(params[i].second.to_vector()), want, 0.1f * want);
  }
}

TEST_P(ModelsTest, Fc1WeightStdIsHe) {
  const auto model = make_model(GetParam(), 11, Device::cpu());
  const NamedParameters params = model->named_parameters();
  for (const auto& [name, p] : params) {
    if (name != "fc1.weight") continue;
    const float want = std::sqrt(2.f / static_cast<float>(p.size(1)));
    EXPECT_NEAR(std_of(p.to_vector()), want, 0.1f * want);
    return;
  }
  FAIL() << "no fc1.weight";
}

TEST_P(ModelsTest, ForwardGivesLogitsAndBackwardReachesEveryParameter) {
  const auto model = make_model(GetParam(), 5, Device::cpu());
  fw::Generator gen(99);
  const Tensor images = Tensor::randn({4, 1, 28, 28}, 0.f, 1.f, &gen);
  const Tensor logits = model->forward(images);
  EXPECT_EQ(logits.shape(), (Shape{4, 10}));
  // He/LeCun keep the logits of a unit-variance input at an O(1) scale.
  for (float v : logits.to_vector()) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_LT(std::fabs(v), 20.f);
  }
  fw::cross_entropy(logits, Tensor::from_labels({0, 3, 7, 9})).backward();
  for (const auto& [name, p] : model->named_parameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().shape(), p.shape());
    EXPECT_GT(p.grad().sq_norm(), 0.f);
  }
}

TEST_P(ModelsTest, ForwardRejectsAWrongInputShape) {
  const auto model = make_model(GetParam(), 5, Device::cpu());
  EXPECT_THROW(model->forward(Tensor::zeros({4, 1, 27, 28})), Error);
}

TEST_P(ModelsTest, CudaModelHoldsTheSameValuesAsTheCpuOne) {
  if (fw::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto cpu = make_model(GetParam(), 21, Device::cpu());
  const auto gpu = make_model(GetParam(), 21, Device::cuda(0));
  const NamedParameters p = gpu->named_parameters();
  for (const auto& [name, t] : p) {
    EXPECT_EQ(t.device(), Device::cuda(0)) << name;
    EXPECT_TRUE(t.requires_grad()) << name;
  }
  EXPECT_EQ(values_of(*cpu), values_of(*gpu));
  fw::Generator gen(1);
  const Tensor images = Tensor::randn({4, 1, 28, 28}, 0.f, 1.f, &gen);
  const std::vector<float> want = cpu->forward(images).to_vector();
  const std::vector<float> got = gpu->forward(images.to(Device::cuda(0))).to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3f) << i;
}

INSTANTIATE_TEST_SUITE_P(Kinds, ModelsTest, ::testing::Values(ModelKind::kMlp, ModelKind::kCnn),
                         [](const ::testing::TestParamInfo<ModelKind>& info) {
                           return std::string(model_name(info.param));
                         });

}  // namespace
}  // namespace kolo::example

#include "framework/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "framework/optim/lr_scaling.h"
#include "kolo/status.h"

namespace kolo::fw {
namespace {

TEST(LrSchedule, ConstantIsConstant) {
  ConstantLr s(0.3);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.3);
  EXPECT_DOUBLE_EQ(s.lr(123456), 0.3);
}

TEST(LrSchedule, StepDecaysEveryStepSize) {
  StepLr s(1.0, 10, 0.1);
  EXPECT_DOUBLE_EQ(s.lr(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr(10), 0.1);
  EXPECT_NEAR(s.lr(25), 0.01, 1e-15);
}

TEST(LrSchedule, StepDecaysAtMilestones) {
  StepLr s(2.0, std::vector<int64_t>{5, 8}, 0.5);
  EXPECT_DOUBLE_EQ(s.lr(4), 2.0);
  EXPECT_DOUBLE_EQ(s.lr(5), 1.0);
  EXPECT_DOUBLE_EQ(s.lr(7), 1.0);
  EXPECT_DOUBLE_EQ(s.lr(8), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(1000), 0.5);
}

TEST(LrSchedule, CosineValues) {
  CosineLr s(1.0, 100, 0.0);
  EXPECT_DOUBLE_EQ(s.lr(0), 1.0);
  EXPECT_NEAR(s.lr(25), (1 + std::cos(std::numbers::pi / 4)) / 2, 1e-15);  // 0.853553...
  EXPECT_NEAR(s.lr(50), 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(100), 0.0);
  EXPECT_DOUBLE_EQ(s.lr(150), 0.0);
  CosineLr floor(1.0, 10, 0.1);
  EXPECT_NEAR(floor.lr(5), 0.55, 1e-15);
  EXPECT_DOUBLE_EQ(floor.lr(10), 0.1);
}

TEST(LrSchedule, WarmupThenCosine) {
  WarmupLr s(10, std::make_shared<CosineLr>(1.0, 100, 0.0));
  EXPECT_DOUBLE_EQ(s.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr(5), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(9), 0.9);
  EXPECT_DOUBLE_EQ(s.lr(10), 1.0);    // cosine starts after warm-up
  EXPECT_NEAR(s.lr(60), 0.5, 1e-15);  // cosine step 50
  EXPECT_DOUBLE_EQ(s.lr(110), 0.0);
}

TEST(LrSchedule, WarmupStartFactorAndUnshiftedInner) {
  WarmupLr s(4, std::make_shared<StepLr>(0.8, 4, 0.5), 0.25, /*shift_inner=*/false);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.4 * 0.25);  // target is inner.lr(4) = 0.4
  EXPECT_DOUBLE_EQ(s.lr(2), 0.4 * (0.25 + 0.75 * 0.5));
  EXPECT_DOUBLE_EQ(s.lr(4), 0.4);
  EXPECT_DOUBLE_EQ(s.lr(8), 0.2);
}

TEST(LrSchedule, RejectsBadArguments) {
  try {
    CosineLr s(1.0, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(e.status().message(), "CosineLr: total_steps must be > 0, got 0");
  }
  EXPECT_THROW(StepLr(1.0, 0, 0.1), Error);
  EXPECT_THROW(StepLr(1.0, std::vector<int64_t>{5, 5}, 0.1), Error);
  EXPECT_THROW(ConstantLr(-1.0), Error);
  EXPECT_THROW(ConstantLr(NAN), Error);
  EXPECT_THROW(WarmupLr(5, nullptr), Error);
  EXPECT_THROW(WarmupLr(-1, std::make_shared<ConstantLr>(1.0)), Error);
  EXPECT_THROW(ConstantLr(1.0).lr(-1), Error);
}

TEST(LrScaling, LinearAndSqrt) {
  EXPECT_DOUBLE_EQ(scale_lr_linear(0.1, 8), 0.8);
  EXPECT_DOUBLE_EQ(scale_lr_sqrt(0.1, 4), 0.2);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 16, LrScaling::kSqrt), 0.4);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 16, LrScaling::kLinear), 1.6);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 16, LrScaling::kNone), 0.1);
  EXPECT_DOUBLE_EQ(scale_lr_linear(0.1, 1), 0.1);
  try {
    scale_lr_linear(0.1, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().message(), "scale_lr_linear: workers must be >= 1, got 0");
  }
  EXPECT_THROW(scale_lr_sqrt(-0.1, 2), Error);
}

}  // namespace
}  // namespace kolo::fw

#include "coordinator/fusion.h"

#include <gtest/gtest.h>

namespace kolo::coord {
namespace {

Response ar(const std::string& name, int64_t n, DataType dt = DataType::kFloat32,
            ReduceOp op = ReduceOp::kSum) {
  Response p;
  p.name = name;
  p.type = OpType::kAllreduce;
  p.dtype = dt;
  p.reduction.op = op;
  p.shapes = {{n}};
  return p;
}

TEST(FusionTest, FusesCompatibleResponsesUpToTheThreshold) {
  // 4-byte floats: 10 elements = 40 bytes.
  std::vector<Response> rs = {ar("a", 10), ar("b", 10), ar("c", 10), ar("d", 10)};
  auto plan = plan_fusion(rs, 80);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(plan[1], (std::vector<size_t>{2, 3}));
}

TEST(FusionTest, LooksAheadPastIncompatibleResponses) {
  Response bc = ar("bcast", 1);
  bc.type = OpType::kBroadcast;
  std::vector<Response> rs = {ar("a", 10), ar("i", 10, DataType::kInt32), bc,
                              ar("m", 10, DataType::kFloat32, ReduceOp::kMax), ar("b", 10)};
  auto plan = plan_fusion(rs, 1 << 20);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0], (std::vector<size_t>{0, 4}));
  EXPECT_EQ(plan[1], (std::vector<size_t>{1}));
  EXPECT_EQ(plan[2], (std::vector<size_t>{2}));
  EXPECT_EQ(plan[3], (std::vector<size_t>{3}));
}

TEST(FusionTest, ThresholdZeroDisablesFusionAndOversizeRunsAlone) {
  std::vector<Response> rs = {ar("a", 10), ar("b", 10)};
  EXPECT_EQ(plan_fusion(rs, 0).size(), 2u);
  std::vector<Response> big = {ar("big", 1000), ar("s", 1), ar("t", 1)};
  auto plan = plan_fusion(big, 100);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0], (std::vector<size_t>{0}));
  EXPECT_EQ(plan[1], (std::vector<size_t>{1, 2}));
}

TEST(FusionTest, ErrorsAndDifferentScalesDoNotFuse) {
  Response err = ar("e", 1);
  err.kind = Response::Kind::kError;
  Response scaled = ar("s", 1);
  scaled.reduction.postscale = 0.5;
  std::vector<Response> rs = {ar("a", 1), err, scaled, ar("b", 1)};
  auto plan = plan_fusion(rs, 1 << 20);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0], (std::vector<size_t>{0, 3}));
}

}  // namespace
}  // namespace kolo::coord

// The nccl backend's empty-collective decision (Note [Empty collectives] in nccl_plan.h): pure,
// so it runs without a GPU; NcclOneRankTest.EmptyTensorsCompleteWithoutNccl confirms on one.
#include "backends/nccl/nccl_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace kolo::nccl {
namespace {

void expect_part(const RankPart& got, bool empty, bool equal, int64_t input, int64_t output) {
  EXPECT_EQ(got.empty, empty);
  EXPECT_EQ(got.equal, equal);
  EXPECT_EQ(got.input, input);
  EXPECT_EQ(got.output, output);
}

TEST(NcclPlanTest, AllreduceAndBroadcastAreEmptyExactlyAtZeroElements) {
  expect_part(plan_allreduce(0), true, true, 0, 0);
  expect_part(plan_allreduce(1), false, true, 1, 1);
  expect_part(plan_allreduce(1 << 20), false, true, 1 << 20, 1 << 20);
}

TEST(NcclPlanTest, AFusedBatchIsEmptyOnlyWhenEveryPieceIs) {
  int a = 0;
  expect_part(plan_allreduce_pieces({}), true, true, 0, 0);
  expect_part(plan_allreduce_pieces({{nullptr, nullptr, 0}, {nullptr, nullptr, 0}}), true, true, 0,
              0);
  // Empty pieces (null pointers) beside a full one: the batch goes to NCCL with 5 elements.
  expect_part(plan_allreduce_pieces({{nullptr, nullptr, 0}, {&a, &a, 5}, {nullptr, nullptr, 0}}),
              false, true, 5, 5);
}

TEST(NcclPlanTest, AllgatherWithPerRankCounts) {
  expect_part(plan_allgather({0, 0, 0}, 1), true, true, 0, 0);
  expect_part(plan_allgather({4, 4, 4}, 2), false, true, 4, 12);
  // Rank 1 contributes nothing but receives the others' blocks: not empty, not equal.
  expect_part(plan_allgather({3, 0, 2}, 1), false, false, 0, 5);
  expect_part(plan_allgather({3, 0, 2}, 0), false, false, 3, 5);
  expect_part(plan_allgather({0}, 0), true, true, 0, 0);
}

TEST(NcclPlanTest, AlltoallIsEmptyOnThisRanksOwnCounts) {
  expect_part(plan_alltoall({0, 0}, {0, 0}), true, false, 0, 0);
  // Sends only, receives only: this rank takes part.
  expect_part(plan_alltoall({0, 0, 7}, {0, 0, 0}), false, false, 7, 0);
  expect_part(plan_alltoall({0, 0, 0}, {2, 0, 0}), false, false, 0, 2);
  expect_part(plan_alltoall({1, 2}, {3, 4}), false, false, 3, 7);
}

TEST(NcclPlanTest, ReducescatterWithAnEmptyBlockOfThisRank) {
  expect_part(plan_reducescatter({0, 0}, 0), true, true, 0, 0);
  expect_part(plan_reducescatter({6, 6}, 1), false, true, 12, 6);
  // Rank 0 keeps nothing but its input still feeds rank 1's block.
  expect_part(plan_reducescatter({0, 6}, 0), false, false, 6, 0);
  expect_part(plan_reducescatter({0, 6}, 1), false, false, 6, 6);
}

TEST(NcclPlanTest, AnEmptyBufferIsReplacedByTheStandIn) {
  int stand_in = 0, data = 0;
  EXPECT_EQ(buffer_or<int>(nullptr, 0, &stand_in), &stand_in);
  EXPECT_EQ(buffer_or<int>(&data, 0, &stand_in), &stand_in);
  EXPECT_EQ(buffer_or<int>(&data, 3, &stand_in), &data);
  EXPECT_EQ(buffer_or<const int>(&data, 1, &stand_in), &data);
}

}  // namespace
}  // namespace kolo::nccl

// The one-rank backend: every collective is the identity on its own input, with the backend's
// scaling rules, and it takes host memory only.
#include "backends/local_backend.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kolo {
namespace {

TEST(LocalBackendTest, EveryCollectiveOfOneRank) {
  std::unique_ptr<Backend> b = make_local_backend("tcp");
  EXPECT_EQ(b->name(), "tcp");
  EXPECT_EQ(b->rank(), 0);
  EXPECT_EQ(b->size(), 1);
  EXPECT_TRUE(b->supports(Device::cpu()));
  EXPECT_FALSE(b->supports(Device::cuda(0)));

  std::vector<float> in = {1, 2, 3}, out(3, -1);
  ASSERT_TRUE(
      b->allreduce(in.data(), out.data(), 3, DataType::kFloat32, {ReduceOp::kAverage, 2.0, 0.5})
          .ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));  // (x * 2) / 1 * 0.5

  std::vector<int32_t> g = {7, 8}, gathered(2, 0);
  ASSERT_TRUE(b->allgather(g.data(), gathered.data(), DataType::kInt32, {2}).ok());
  EXPECT_EQ(gathered, g);

  std::vector<double> bc = {4, 5};
  ASSERT_TRUE(b->broadcast(bc.data(), 2, DataType::kFloat64, 0).ok());
  EXPECT_EQ(bc, (std::vector<double>{4, 5}));

  std::vector<int64_t> a2a = {9, 10, 11}, a2a_out(3, 0);
  ASSERT_TRUE(b->alltoall(a2a.data(), a2a_out.data(), DataType::kInt64, {3}, {3}).ok());
  EXPECT_EQ(a2a_out, a2a);

  std::vector<float> rs = {1, 2}, rs_out(2, 0);
  ASSERT_TRUE(b->reducescatter(rs.data(), rs_out.data(), DataType::kFloat32,
                               {ReduceOp::kSum, 3.0, 1.0}, {2})
                  .ok());
  EXPECT_EQ(rs_out, (std::vector<float>{3, 6}));

  EXPECT_TRUE(b->barrier().ok());
}

TEST(LocalBackendTest, BadArgumentsAreNamed) {
  std::unique_ptr<Backend> b = make_local_backend("local");
  std::vector<float> v(2);
  Status st = b->allreduce(v.data(), v.data(), -3, DataType::kFloat32, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "allreduce: count of input must be >= 0, got -3");
  // Rank 0 of 1 has no rank 1 to broadcast from.
  st = b->broadcast(v.data(), 2, DataType::kFloat32, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "broadcast: root must be in [0, 1), got 1");
}

}  // namespace
}  // namespace kolo

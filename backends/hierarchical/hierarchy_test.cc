#include "backends/hierarchical/hierarchy.h"

#include <gtest/gtest.h>

namespace kolo {
namespace {

Hierarchy plan(const std::vector<int>& host_of, int rank) {
  Result<Hierarchy> h = plan_hierarchy(host_of, rank);
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  return h.ok() ? *h : Hierarchy{};
}

// kolorun's layout: node k holds ranks k*N .. k*N+N-1.
TEST(PlanHierarchy, ContiguousHostsMakeAGrid) {
  const std::vector<int> host_of = {0, 0, 0, 1, 1, 1};
  Hierarchy h = plan(host_of, 4);
  EXPECT_EQ(h.intra_ranks, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(h.intra_rank, 1);
  EXPECT_EQ(h.cross_ranks, (std::vector<int>{1, 4}));
  EXPECT_EQ(h.cross_rank, 1);
  EXPECT_FALSE(h.trivial());
  Hierarchy first = plan(host_of, 0);
  EXPECT_EQ(first.intra_ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(first.cross_ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(first.cross_rank, 0);
}

// mpirun's round-robin layout: hosts alternate; a rank's position on its host is its order
// among the host's ranks, and the cross group is ascending in world rank.
TEST(PlanHierarchy, InterleavedHostsGroupByHostAndPosition) {
  const std::vector<int> host_of = {1, 0, 1, 0};
  Hierarchy h = plan(host_of, 2);
  EXPECT_EQ(h.intra_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(h.intra_rank, 1);
  EXPECT_EQ(h.cross_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(h.cross_rank, 0);
  Hierarchy other = plan(host_of, 3);
  EXPECT_EQ(other.intra_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(other.cross_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(other.cross_rank, 1);
}

TEST(PlanHierarchy, OneHostOrOneRankPerHostIsTrivial) {
  Hierarchy one_host = plan({0, 0, 0}, 1);
  EXPECT_TRUE(one_host.trivial());
  EXPECT_EQ(one_host.cross_ranks, (std::vector<int>{1}));
  Hierarchy one_each = plan({0, 1, 2}, 1);
  EXPECT_TRUE(one_each.trivial());
  EXPECT_EQ(one_each.intra_ranks, (std::vector<int>{1}));
  EXPECT_EQ(one_each.cross_ranks, (std::vector<int>{0, 1, 2}));
}

TEST(PlanHierarchy, UnequalHostsAreNamedWithTheirRanks) {
  for (int rank = 0; rank < 4; ++rank) {
    Result<Hierarchy> h = plan_hierarchy({0, 0, 1, 0}, rank);
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(h.status().message(),
              "hosts hold different numbers of ranks: host 0 has 3 (ranks 0, 1, 3), host 1 has 1 "
              "(rank 2)");
  }
}

TEST(PlanHierarchy, RankOutOfRangeIsRefused) {
  Result<Hierarchy> h = plan_hierarchy({0, 1}, 2);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "plan_hierarchy: rank must be in [0, 2), got 2");
}

}  // namespace
}  // namespace kolo

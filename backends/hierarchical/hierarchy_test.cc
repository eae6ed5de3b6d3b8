#include "backends/hierarchical/hierarchy.h"

#include <gtest/gtest.h>

#include <numeric>

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

TEST(PlanHierarchy, EveryHostsRanksAndEachRanksHost) {
  Hierarchy h = plan({1, 0, 1, 0}, 0);
  EXPECT_EQ(h.hosts, (std::vector<std::vector<int>>{{1, 3}, {0, 2}}));
  EXPECT_EQ(h.host_index, (std::vector<int>{1, 0, 1, 0}));
}

// The hierarchical allgather's four steps carried out on every rank's plan in memory, each
// allgather a concatenation of its group's contributions in the group's order: the output of
// every rank is the flat allgather's, element for element, and every element is written.
void expect_allgather_plans_equal_flat(const std::vector<int>& host_of,
                                       const std::vector<int64_t>& counts) {
  const size_t size = host_of.size();
  std::vector<std::vector<int64_t>> data(size);
  std::vector<int64_t> flat;
  for (size_t r = 0; r < size; ++r)
    for (int64_t e = 0; e < counts[r]; ++e) {
      data[r].push_back(static_cast<int64_t>(r) * 1000 + e);
      flat.push_back(data[r].back());
    }
  std::vector<Hierarchy> h(size);
  std::vector<AllgatherPlan> p(size);
  for (size_t r = 0; r < size; ++r) {
    h[r] = plan(host_of, static_cast<int>(r));
    p[r] = plan_allgather(h[r], static_cast<int>(r), counts);
    ASSERT_EQ(p[r].total, static_cast<int64_t>(flat.size()));
  }
  auto concat = [](const std::vector<std::vector<int64_t>>& parts) {
    std::vector<int64_t> out;
    for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
    return out;
  };
  std::vector<std::vector<int64_t>> host_block(size), shard(size), cross(size), gathered(size);
  for (size_t r = 0; r < size; ++r) {  // 1. within the host
    std::vector<std::vector<int64_t>> parts;
    for (int m : h[r].intra_ranks) parts.push_back(data[static_cast<size_t>(m)]);
    for (size_t j = 0; j < parts.size(); ++j)
      ASSERT_EQ(p[r].host_counts[j], static_cast<int64_t>(parts[j].size()));
    host_block[r] = concat(parts);
    ASSERT_EQ(p[r].host_total, static_cast<int64_t>(host_block[r].size()));
    ASSERT_LE(p[r].shard_offset + p[r].shard_count, p[r].host_total);
    shard[r].assign(host_block[r].begin() + p[r].shard_offset,
                    host_block[r].begin() + p[r].shard_offset + p[r].shard_count);
  }
  for (size_t r = 0; r < size; ++r) {  // 2. across hosts
    std::vector<std::vector<int64_t>> parts;
    for (int m : h[r].cross_ranks) parts.push_back(shard[static_cast<size_t>(m)]);
    for (size_t c = 0; c < parts.size(); ++c)
      ASSERT_EQ(p[r].cross_counts[c], static_cast<int64_t>(parts[c].size()));
    cross[r] = concat(parts);
    ASSERT_EQ(p[r].cross_total, static_cast<int64_t>(cross[r].size()));
  }
  for (size_t r = 0; r < size; ++r) {  // 3. within the host, then 4. unpack
    std::vector<std::vector<int64_t>> parts;
    for (int m : h[r].intra_ranks) parts.push_back(cross[static_cast<size_t>(m)]);
    for (size_t j = 0; j < parts.size(); ++j)
      ASSERT_EQ(p[r].gather_counts[j], static_cast<int64_t>(parts[j].size()));
    gathered[r] = concat(parts);
    std::vector<int64_t> out(flat.size(), -1);
    int64_t written = 0;
    for (const auto& run : p[r].unpack) {
      for (int64_t e = 0; e < run.count; ++e)
        out[static_cast<size_t>(run.to + e)] = gathered[r][static_cast<size_t>(run.from + e)];
      written += run.count;
    }
    EXPECT_EQ(written, static_cast<int64_t>(flat.size())) << "rank " << r;
    EXPECT_EQ(out, flat) << "rank " << r;
  }
}

TEST(PlanAllgather, ContiguousHostsEqualTheFlatAllgather) {
  expect_allgather_plans_equal_flat({0, 0, 1, 1}, {3, 5, 7, 2});
  expect_allgather_plans_equal_flat({0, 0, 0, 1, 1, 1}, {1, 0, 4, 9, 2, 2});
  expect_allgather_plans_equal_flat({0, 0, 1, 1, 2, 2}, {6, 6, 6, 6, 6, 6});
}

TEST(PlanAllgather, InterleavedHostsEqualTheFlatAllgather) {
  expect_allgather_plans_equal_flat({1, 0, 1, 0}, {3, 5, 7, 2});
  expect_allgather_plans_equal_flat({0, 1, 2, 2, 1, 0}, {4, 1, 0, 7, 3, 5});
}

// Empty blocks, a host with nothing at all, and blocks shorter than the ranks per host (so
// that some shards are empty and some span several ranks' blocks).
TEST(PlanAllgather, EmptyAndTinyBlocksEqualTheFlatAllgather) {
  expect_allgather_plans_equal_flat({0, 0, 1, 1}, {0, 0, 0, 0});
  expect_allgather_plans_equal_flat({0, 0, 1, 1}, {0, 0, 5, 1});
  expect_allgather_plans_equal_flat({0, 0, 0, 1, 1, 1}, {1, 0, 0, 0, 1, 0});
  expect_allgather_plans_equal_flat({0, 0, 0, 1, 1, 1, 2, 2, 2}, {2, 0, 1, 0, 0, 0, 9, 0, 1});
}

// Contiguous hosts with equal counts unpack in one run per shard and host.
TEST(PlanAllgather, ContiguousRunsAreMerged) {
  const Hierarchy h = plan({0, 0, 1, 1}, 1);
  const AllgatherPlan p = plan_allgather(h, 1, {4, 4, 4, 4});
  EXPECT_EQ(p.host_counts, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(p.shard_offset, 4);
  EXPECT_EQ(p.shard_count, 4);
  EXPECT_EQ(p.cross_counts, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(p.gather_counts, (std::vector<int64_t>{8, 8}));
  ASSERT_EQ(p.unpack.size(), 4u);  // shard 0 of hosts 0 and 1, then shard 1 of each
  EXPECT_EQ(p.unpack[0].from, 0);
  EXPECT_EQ(p.unpack[0].to, 0);
  EXPECT_EQ(p.unpack[1].from, 4);
  EXPECT_EQ(p.unpack[1].to, 8);
  EXPECT_EQ(p.unpack[2].from, 8);
  EXPECT_EQ(p.unpack[2].to, 4);
}

TEST(PlanHierarchy, RankOutOfRangeIsRefused) {
  Result<Hierarchy> h = plan_hierarchy({0, 1}, 2);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "plan_hierarchy: rank must be in [0, 2), got 2");
}

}  // namespace
}  // namespace kolo

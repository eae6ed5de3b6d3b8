#include "framework/distributed/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "kolo/status.h"

namespace kolo::fw {
namespace {

using Tail = DistributedSampler::Tail;

std::vector<std::vector<int64_t>> shards(int64_t size, int world, Tail tail, int64_t epoch,
                                         bool shuffle = true) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler sampler(size, r, world, /*seed=*/9, shuffle, tail);
    out.push_back(sampler.indices(epoch));
    EXPECT_EQ(static_cast<int64_t>(out.back().size()), sampler.shard_size());
  }
  return out;
}

TEST(DistributedSampler, UnevenShardsAreDisjointAndCoverEverySampleOnce) {
  for (int world : {1, 2, 3, 4, 7}) {
    for (int64_t size : {0, 1, 6, 10, 101}) {
      auto all = shards(size, world, Tail::kUneven, /*epoch=*/3);
      std::multiset<int64_t> seen;
      for (const auto& shard : all) seen.insert(shard.begin(), shard.end());
      ASSERT_EQ(static_cast<int64_t>(seen.size()), size) << "world " << world;
      for (int64_t i = 0; i < size; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
      // Shard sizes differ by at most one, larger shards first.
      for (int r = 1; r < world; ++r) EXPECT_LE(all[r].size(), all[r - 1].size());
      EXPECT_LE(all.front().size() - all.back().size(), 1u);
    }
  }
}

TEST(DistributedSampler, PadGivesEqualShardsCoveringEverySample) {
  auto all = shards(10, 4, Tail::kPad, 0);
  std::map<int64_t, int> count;
  for (const auto& shard : all) {
    EXPECT_EQ(shard.size(), 3u);
    for (int64_t i : shard) ++count[i];
  }
  EXPECT_EQ(count.size(), 10u);  // every sample at least once
  int repeated = 0;
  for (auto& [index, n] : count) repeated += n - 1;
  EXPECT_EQ(repeated, 2);  // 12 slots for 10 samples
}

TEST(DistributedSampler, DropGivesEqualDisjointShards) {
  auto all = shards(10, 4, Tail::kDrop, 0);
  std::set<int64_t> seen;
  for (const auto& shard : all) {
    EXPECT_EQ(shard.size(), 2u);
    for (int64_t i : shard) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(DistributedSampler, ReshufflesPerEpochTheSameWayOnEveryRank) {
  DistributedSampler a(50, 1, 3, 5), b(50, 1, 3, 5);
  EXPECT_EQ(a.indices(2), b.indices(2));  // a pure function of (seed, epoch)
  EXPECT_NE(a.indices(0), a.indices(1));
  DistributedSampler other_seed(50, 1, 3, 6);
  EXPECT_NE(a.indices(0), other_seed.indices(0));
}

TEST(DistributedSampler, WithoutShuffleShardsAreStrided) {
  auto all = shards(7, 3, Tail::kUneven, 0, /*shuffle=*/false);
  EXPECT_EQ(all[0], (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(all[1], (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(all[2], (std::vector<int64_t>{2, 5}));
}

TEST(DistributedSampler, BadArgumentsAreNamed) {
  auto message = [](auto make) {
    try {
      make();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { DistributedSampler(-1, 0, 1); }).find("size must be >= 0, got -1"),
            std::string::npos);
  EXPECT_NE(message([] { DistributedSampler(4, 2, 2); }).find("rank must be in [0, 2), got 2"),
            std::string::npos);
  EXPECT_NE(message([] { DistributedSampler(4, 0, 0); }).find("world must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(
      message([] { DistributedSampler(4, 0, 1).indices(-2); }).find("epoch must be >= 0, got -2"),
      std::string::npos);
}

}  // namespace
}  // namespace kolo::fw

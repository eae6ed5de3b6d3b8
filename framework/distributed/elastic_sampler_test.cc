// ElasticSampler (Note [Elastic order]): the ranks' shares of each step, the epoch's tail, a
// change of world at any step, the position as State counters, bad input.
#include "framework/distributed/elastic_sampler.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "framework/data/data_loader.h"
#include "framework/distributed/distributed_sampler.h"
#include "kolo/kolo.h"

namespace kolo::fw {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// One step of the whole world: the global batch in position order, rebuilt from the ranks'
// shares (rank r's j-th sample is at position r + world * j of the step), then every rank's
// sampler advanced. Checks that the shares fill the global batch exactly.
std::vector<int64_t> global_step(std::vector<ElasticSampler>& ranks) {
  const int world = static_cast<int>(ranks.size());
  const int64_t g = ranks[0].global_batch();
  std::vector<int64_t> batch(static_cast<size_t>(g), -1);
  int64_t taken = 0;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(ranks[r].global_batch(), g);
    const std::vector<int64_t> local = ranks[r].next_local();
    EXPECT_EQ(static_cast<int64_t>(local.size()), ranks[r].local_count());
    for (size_t j = 0; j < local.size(); ++j) batch[r + world * j] = local[j];
    taken += static_cast<int64_t>(local.size());
    ranks[r].advance();
  }
  EXPECT_EQ(taken, g);
  return batch;
}

std::vector<ElasticSampler> world_of(ElasticSampler::Options options, int world, int64_t epoch,
                                     int64_t consumed) {
  std::vector<ElasticSampler> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back(options, r, world);
    ranks.back().set_position(epoch, consumed);
  }
  return ranks;
}

// The epoch as the committed history trains on it: step by step, switching from `before` to
// `after` ranks after `switch_step` steps (never when switch_step is past the epoch).
std::vector<int64_t> run_epoch(ElasticSampler::Options options, int before, int after,
                               int64_t switch_step, int64_t epoch) {
  std::vector<ElasticSampler> ranks = world_of(options, before, epoch, 0);
  std::vector<int64_t> history;
  for (int64_t step = 0; ranks[0].epoch() == epoch; ++step) {
    if (step == switch_step) ranks = world_of(options, after, epoch, ranks[0].consumed());
    const std::vector<int64_t> batch = global_step(ranks);
    EXPECT_LE(static_cast<int64_t>(batch.size()), options.batch_size * ranks.size());
    history.insert(history.end(), batch.begin(), batch.end());
  }
  return history;
}

TEST(ElasticSampler, AChangeOfWorldAtAnyStepKeepsTheEpochsOrderAndUsesEachSampleOnce) {
  const ElasticSampler::Options options{.size = 37, .batch_size = 3, .seed = 5};
  const std::vector<int64_t> permutation = seeded_permutation(37, 5, /*epoch=*/2);
  for (auto [before, after] : {std::pair{4, 3}, {3, 2}, {2, 5}, {1, 4}, {5, 1}}) {
    for (int64_t s = 0; s <= 13; ++s) {
      EXPECT_EQ(run_epoch(options, before, after, s, /*epoch=*/2), permutation)
          << before << " -> " << after << " ranks at step " << s;
    }
  }
}

TEST(ElasticSampler, UnevenTailsGiveTheFirstRanksOneMoreAndSomeRanksNone) {
  // 10 samples, batch 3, 3 ranks: steps of 9 then 1; in the last, rank 0 takes one sample.
  const ElasticSampler::Options options{.size = 10, .batch_size = 3, .shuffle = false};
  std::vector<ElasticSampler> ranks = world_of(options, 3, 0, 0);
  EXPECT_EQ(ranks[0].steps_per_epoch(), 2);
  EXPECT_EQ(ranks[1].next_local(), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(global_step(ranks), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(ranks[0].steps_left_in_epoch(), 1);
  EXPECT_EQ(ranks[0].step_in_epoch(), 1);
  EXPECT_EQ(ranks[0].local_count(), 1);
  EXPECT_EQ(ranks[1].local_count(), 0);
  EXPECT_TRUE(ranks[2].next_local().empty());
  EXPECT_TRUE(ranks[2].remaining_local().empty());
  EXPECT_EQ(global_step(ranks), (std::vector<int64_t>{9}));
  EXPECT_EQ(ranks[0].epoch(), 1);  // rolled over
  EXPECT_EQ(ranks[0].consumed(), 0);
  // Every size and world: the tail's shares differ by at most one, larger first.
  for (int64_t size : {1, 2, 7, 11, 64}) {
    for (int world : {1, 2, 3, 5, 8}) {
      std::vector<ElasticSampler> w = world_of({.size = size, .batch_size = 2}, world, 0, 0);
      while (w[0].steps_left_in_epoch() > 1) global_step(w);
      for (int r = 1; r < world; ++r) {
        EXPECT_LE(w[r].local_count(), w[r - 1].local_count());
        EXPECT_LE(w[0].local_count() - w[r].local_count(), 1);
      }
    }
  }
}

TEST(ElasticSampler, AFixedWorldGivesTheBatchesOfADistributedSamplerCutIntoBatches) {
  for (int world : {1, 2, 3, 4}) {
    const int64_t size = 60, batch = 4;
    for (int r = 0; r < world; ++r) {
      ElasticSampler elastic({.size = size, .batch_size = batch, .seed = 42}, r, world);
      elastic.set_position(/*epoch=*/1, 0);
      const std::vector<int64_t> shard =
          DistributedSampler(size, r, world, 42, true, DistributedSampler::Tail::kPad).indices(1);
      EXPECT_EQ(elastic.remaining_local(), shard);
      for (size_t start = 0; start < shard.size(); start += batch) {
        const size_t end = std::min(shard.size(), start + batch);
        EXPECT_EQ(elastic.next_local(),
                  std::vector<int64_t>(shard.begin() + start, shard.begin() + end));
        elastic.advance();
      }
      EXPECT_EQ(elastic.epoch(), 2);
    }
  }
}

TEST(ElasticSampler, TheLoaderSamplerGivesTheRemainingShareThenWholeLaterEpochs) {
  ElasticSampler sampler({.size = 20, .batch_size = 2, .seed = 3}, 1, 2);
  sampler.advance();  // 4 consumed
  std::unique_ptr<Sampler> loader = sampler.loader_sampler();
  EXPECT_EQ(loader->indices(0), sampler.remaining_local());
  EXPECT_EQ(loader->indices(0).size(), 8u);
  ElasticSampler fresh({.size = 20, .batch_size = 2, .seed = 3}, 1, 2);
  fresh.set_position(4, 0);
  EXPECT_EQ(loader->indices(4), fresh.remaining_local());
  sampler.set_position(1, 0);
  EXPECT_NE(error_of([&] { loader->indices(0); }).find("epoch 0 has ended"), std::string::npos);
}

// Example i holds the value i, so that a batch shows which samples it took.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    return {Tensor::from_vector({static_cast<float>(index)}, {1}), index};
  }

 private:
  int64_t n_;
};

// What train_fashion_mnist --elastic relies on: a DataLoader over loader_sampler() gives, step
// by step, exactly next_local(), also after the world changed mid-epoch (the loader's epoch
// started again), and nothing for a rank whose share of the last step is empty.
TEST(ElasticSampler, ADataLoaderOverItGivesEachStepsShareAcrossAWorldChange) {
  const IndexDataset data(32);
  const ElasticSampler::Options options{.size = 32, .batch_size = 3, .seed = 4};
  for (int r = 0; r < 4; ++r) {
    ElasticSampler sampler(options, r % 3, 3);
    DataLoader loader(data, {.batch_size = 3}, sampler.loader_sampler());
    loader.start_epoch(0);
    for (int step = 0; step < 2; ++step) {  // 18 samples on 3 ranks
      std::optional<Batch> batch = loader.next();
      ASSERT_TRUE(batch.has_value());
      EXPECT_EQ(batch->indices, sampler.next_local());
      sampler.advance();
    }
    sampler.set_world(r, 4);  // 14 remain: 3 each, then 1 each for ranks 0 and 1 only
    loader.start_epoch(0);
    int64_t empty_steps = 0;
    while (sampler.epoch() == 0) {
      empty_steps += sampler.local_count() == 0;
      if (sampler.local_count() > 0) {
        std::optional<Batch> batch = loader.next();
        ASSERT_TRUE(batch.has_value()) << "rank " << r;
        EXPECT_EQ(batch->indices, sampler.next_local());
        EXPECT_EQ(batch->y.size(0), sampler.local_count());
      }
      sampler.advance();
    }
    EXPECT_FALSE(loader.next().has_value()) << "rank " << r;
    EXPECT_EQ(empty_steps, r >= 2 ? 1 : 0);
  }
}

TEST(ElasticSampler, BadInputIsNamed) {
  auto make = [](int64_t size, int64_t batch, int rank, int world) {
    return error_of([&] { ElasticSampler({.size = size, .batch_size = batch}, rank, world); });
  };
  EXPECT_EQ(make(0, 1, 0, 1), "InvalidArgument: ElasticSampler: size must be >= 1, got 0");
  EXPECT_EQ(make(5, 0, 0, 1), "InvalidArgument: ElasticSampler: batch_size must be >= 1, got 0");
  EXPECT_EQ(make(5, 1, 0, 0), "InvalidArgument: ElasticSampler: world must be >= 1, got 0");
  EXPECT_EQ(make(5, 1, 2, 2), "InvalidArgument: ElasticSampler: rank must be in [0, 2), got 2");
  EXPECT_EQ(make(5, 1, -1, 2), "InvalidArgument: ElasticSampler: rank must be in [0, 2), got -1");
  ElasticSampler sampler({.size = 5, .batch_size = 1}, 0, 1);
  EXPECT_EQ(error_of([&] { sampler.set_world(3, 3); }),
            "InvalidArgument: ElasticSampler: rank must be in [0, 3), got 3");
  EXPECT_EQ(error_of([&] { sampler.set_position(0, 5); }),
            "InvalidArgument: ElasticSampler: consumed must be in [0, 5), got 5");
  EXPECT_EQ(error_of([&] { sampler.set_position(-1, 0); }),
            "InvalidArgument: ElasticSampler: epoch must be >= 0, got -1");
  EXPECT_EQ(sampler.rank(), 0);  // a rejected world or position changes nothing
  EXPECT_EQ(sampler.world(), 1);
}

// The position lives in State counters: restore() rolls it back and the permutation follows the
// restored epoch.
TEST(ElasticSampler, ThePositionIsStateCountersThatRestoreRollsBack) {
  ASSERT_TRUE(kolo::init().ok());
  ElasticSampler sampler({.size = 9, .batch_size = 2, .seed = 1}, 0, 1);
  elastic::State state("sampler_test");
  ASSERT_TRUE(sampler.add_to(state).ok());
  EXPECT_EQ(sampler.add_to(state).code(), StatusCode::kInvalidArgument);  // keys taken
  sampler.advance();
  sampler.advance();  // epoch 0, 4 consumed
  const std::vector<int64_t> committed = sampler.next_local();
  ASSERT_TRUE(state.commit().ok());
  for (int i = 0; i < 5; ++i) sampler.advance();  // into epoch 1
  EXPECT_EQ(sampler.epoch(), 1);
  EXPECT_NE(sampler.next_local(), committed);
  ASSERT_TRUE(state.restore().ok());
  EXPECT_EQ(sampler.epoch(), 0);
  EXPECT_EQ(sampler.consumed(), 4);
  EXPECT_EQ(sampler.next_local(), committed);
  EXPECT_TRUE(kolo::shutdown().ok());
}

}  // namespace
}  // namespace kolo::fw

#include "framework/data/data_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>

#include "framework/data/sampler.h"

namespace kolo::fw {
namespace {

// Example i is x = [i, -i] with label i; optionally fails or changes shape at one index.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t bad = -1, bool throw_at_bad = true)
      : n_(n), bad_(bad), throw_at_bad_(throw_at_bad) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    ++calls;
    if (i == bad_ && throw_at_bad_)
      throw Error(Status::IoError("disk gone at " + std::to_string(i)));
    const float v = static_cast<float>(i);
    if (i == bad_) return {Tensor::from_vector({v}, {1}), i};
    return {Tensor::from_vector({v, -v}, {2}), i};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, bad_;
  bool throw_at_bad_;
};

std::vector<int64_t> epoch_order(DataLoader& loader, int64_t epoch, int64_t* batches = nullptr) {
  loader.start_epoch(epoch);
  std::vector<int64_t> order;
  int64_t count = 0;
  while (auto b = loader.next()) {
    ++count;
    const std::vector<float> x = b->x.to_vector();
    const int64_t* y = b->y.data<int64_t>();
    for (int64_t k = 0; k < b->y.numel(); ++k) {
      // The batch rows are the examples of the listed indices, in order.
      EXPECT_EQ(y[k], b->indices[static_cast<size_t>(k)]);
      EXPECT_EQ(x[static_cast<size_t>(2 * k)], static_cast<float>(y[k]));
      EXPECT_EQ(x[static_cast<size_t>(2 * k + 1)], -static_cast<float>(y[k]));
      order.push_back(y[k]);
    }
  }
  if (batches) *batches = count;
  return order;
}

TEST(Sampler, SequentialAndSeededPermutation) {
  SequentialSampler seq(4);
  EXPECT_EQ(seq.indices(3), (std::vector<int64_t>{0, 1, 2, 3}));
  RandomSampler a(100, 7), b(100, 7), c(100, 8);
  std::vector<int64_t> e0 = a.indices(0);
  EXPECT_EQ(e0, b.indices(0));
  EXPECT_NE(e0, a.indices(1));
  EXPECT_NE(e0, c.indices(0));
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_TRUE(RandomSampler(0, 1).indices(0).empty());
  EXPECT_THROW(RandomSampler(-1, 1), Error);
  EXPECT_THROW(seq.indices(-1), Error);
}

TEST(DataLoader, SequentialBatchesWithLastPartial) {
  CountingDataset ds(10);
  DataLoader loader(ds, {.batch_size = 4});
  int64_t batches = 0;
  EXPECT_EQ(epoch_order(loader, 0, &batches), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(loader.num_batches(), 3);
  EXPECT_FALSE(loader.next().has_value());  // stays finished
}

TEST(DataLoader, ShuffleVisitsEverySampleOnceDeterministicallyAndDiffersAcrossEpochs) {
  CountingDataset ds(37);
  for (int64_t prefetch : {0, 1, 3}) {
    DataLoader a(ds, {.batch_size = 5, .shuffle = true, .seed = 42, .prefetch = prefetch});
    DataLoader b(ds, {.batch_size = 5, .shuffle = true, .seed = 42, .prefetch = 2});
    std::vector<int64_t> e0 = epoch_order(a, 0), e1 = epoch_order(a, 1);
    EXPECT_EQ(e0, epoch_order(b, 0));
    EXPECT_EQ(e1, epoch_order(b, 1));
    EXPECT_NE(e0, e1);
    EXPECT_EQ(e0, RandomSampler(37, 42).indices(0));
    std::set<int64_t> seen(e0.begin(), e0.end());
    EXPECT_EQ(seen.size(), 37u);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), 36);
  }
}

TEST(DataLoader, DropLast) {
  CountingDataset ds(10);
  DataLoader loader(ds, {.batch_size = 4, .drop_last = true});
  int64_t batches = 0;
  EXPECT_EQ(epoch_order(loader, 0, &batches), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(batches, 2);
  DataLoader exact(ds, {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(epoch_order(exact, 0).size(), 10u);
}

TEST(DataLoader, RangeForRunsSuccessiveEpochs) {
  CountingDataset ds(6);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 3});
  std::vector<int64_t> seen;
  for (Batch& b : loader) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  EXPECT_EQ(loader.epoch(), 0);
  EXPECT_EQ(seen, RandomSampler(6, 3).indices(0));
  seen.clear();
  for (Batch& b : loader) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(seen, RandomSampler(6, 3).indices(1));
}

class FixedSampler : public Sampler {
 public:
  explicit FixedSampler(std::vector<int64_t> idx) : idx_(std::move(idx)) {}
  std::vector<int64_t> indices(int64_t) override { return idx_; }

 private:
  std::vector<int64_t> idx_;
};

TEST(DataLoader, CustomSamplerDecidesTheIndices) {
  CountingDataset ds(10);
  DataLoader loader(ds, {.batch_size = 2},
                    std::make_unique<FixedSampler>(std::vector<int64_t>{9, 3, 3}));
  EXPECT_EQ(epoch_order(loader, 0), (std::vector<int64_t>{9, 3, 3}));
}

TEST(DataLoader, PrefetchThreadStopsWhenEpochAbandonedOrLoaderDestroyed) {
  CountingDataset ds(1000);
  {
    DataLoader loader(ds, {.batch_size = 10, .prefetch = 2});
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    // Restarting joins the old thread, which is blocked on a full queue.
    loader.start_epoch(1);
    ASSERT_TRUE(loader.next().has_value());
  }  // destroyed mid-epoch with a full queue: must join, not hang
  // At most (taken + queued + one in progress) batches per epoch were built, far from 100.
  EXPECT_LT(ds.calls.load(), 2 * 10 * 5);
}

TEST(DataLoader, ErrorsFromTheDatasetReachTheCaller) {
  for (int64_t prefetch : {0, 2}) {
    CountingDataset ds(10, /*bad=*/5);
    DataLoader loader(ds, {.batch_size = 2, .prefetch = prefetch});
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next().has_value());  // 0, 1
    ASSERT_TRUE(loader.next().has_value());  // 2, 3
    try {
      loader.next();  // 4, 5
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), StatusCode::kIoError);
      EXPECT_EQ(e.status().message(), "disk gone at 5");
    }
    EXPECT_FALSE(loader.next().has_value());
  }
}

TEST(DataLoader, MismatchedExampleShapesAndBadIndices) {
  CountingDataset ds(4, /*bad=*/1, /*throw_at_bad=*/false);
  DataLoader loader(ds, {.batch_size = 4});
  loader.start_epoch(0);
  try {
    loader.next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().message(),
              "DataLoader: example 1 has shape [1], but the batch's first example 0 has shape [2]");
  }
  CountingDataset ok(4);
  DataLoader out_of_range(ok, {.batch_size = 4},
                          std::make_unique<FixedSampler>(std::vector<int64_t>{0, 4}));
  out_of_range.start_epoch(2);
  try {
    out_of_range.next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().message(),
              "DataLoader: sampler index 4 (epoch 2, batch 0) is outside the dataset [0, 4)");
  }
}

TEST(DataLoader, RejectsBadOptionsAndMisuse) {
  CountingDataset ds(4);
  try {
    DataLoader loader(ds, {.batch_size = 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().message(), "DataLoader: batch_size must be >= 1, got 0");
  }
  EXPECT_THROW(DataLoader(ds, {.prefetch = -1}), Error);
  DataLoader loader(ds, {});
  try {
    loader.next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kPreconditionFailed);
  }
  EXPECT_THROW(loader.start_epoch(-1), Error);
}

}  // namespace
}  // namespace kolo::fw

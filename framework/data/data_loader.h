// DataLoader: turns a Dataset into batches, one epoch at a time, with a background thread that
// prepares the next batches while the caller trains on the current one.
//
//   DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .seed = 1});
//   for (int64_t e = 0; e < epochs; ++e) {
//     loader.start_epoch(e);
//     while (auto batch = loader.next()) train(batch->x, batch->y);
//   }
// or `for (Batch& b : loader)`, which starts the epoch after the last one started.
//
// Order: the sampler's indices(epoch) (default: SequentialSampler, or RandomSampler(seed) when
// shuffle) are cut into consecutive batches of batch_size; the last, shorter batch is dropped
// when drop_last. So each sample of the epoch's index list appears exactly once, the order is a
// function of (seed, epoch) only, and the prefetch thread cannot change it.
//
// Threading: with prefetch > 0 one thread per epoch calls Dataset::get and stacks batches into a
// queue holding at most `prefetch` batches; next() takes from it. start_epoch() and the
// destructor stop and join that thread (it checks for stop between examples), so an epoch
// abandoned half-way costs no more than one example's work. The DataLoader itself is used from
// one thread. The Dataset and the Sampler must outlive the DataLoader.
//
// Errors: the constructor throws kolo::Error(InvalidArgument) for batch_size < 1 or
// prefetch < 0. An error while building a batch (a Dataset::get failure, examples of differing
// shapes, a sampler index out of range) reaches the caller once, from next(), after the batches
// made before it, as a kolo::Error with the original Status (other exceptions become Internal);
// the epoch then ends. next() without start_epoch() throws PreconditionFailed.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "framework/data/dataset.h"
#include "framework/data/sampler.h"

namespace kolo::fw {

struct DataLoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = false;  // only used when no sampler is given
  uint64_t seed = 0;     // for shuffle
  bool drop_last = false;
  int64_t prefetch = 2;  // batches prepared ahead; 0 builds each batch inside next()
};

struct Batch {
  Tensor x;                      // float32 [B, example shape...]
  Tensor y;                      // int64 [B]
  std::vector<int64_t> indices;  // the dataset indices in the batch, in order
};

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, DataLoaderOptions options,
             std::unique_ptr<Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins epoch `epoch` (>= 0), abandoning what is left of the previous one.
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch, or nullopt when the epoch is done.
  std::optional<Batch> next();
  // Batches in the epoch last started.
  int64_t num_batches() const { return static_cast<int64_t>(plan_.size()); }
  int64_t epoch() const { return epoch_; }

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(DataLoader* loader) : loader_(loader) { ++*this; }
    Batch& operator*() { return *current_; }
    Iterator& operator++() {
      current_ = loader_->next();
      if (!current_) loader_ = nullptr;
      return *this;
    }
    bool operator==(const Iterator& o) const { return loader_ == o.loader_; }

   private:
    DataLoader* loader_ = nullptr;
    std::optional<Batch> current_;
  };
  // Starts the next epoch (0 first, then one after the last started) and iterates it.
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  Batch build(size_t batch_index) const;
  void produce();  // prefetch thread body
  void stop_thread();
  void fail_epoch(Status status);

  // Constant after construction.
  const Dataset& dataset_;
  const DataLoaderOptions options_;
  std::unique_ptr<Sampler> sampler_;

  // Owned by the caller's thread; read-only for the prefetch thread while it runs.
  std::vector<std::vector<int64_t>> plan_;  // the epoch's batches of indices
  int64_t epoch_ = -1;
  size_t next_batch_ = 0;  // synchronous mode: next batch to build
  size_t taken_ = 0;       // batches handed out this epoch

  // The queue between the prefetch thread and next(), defined in data_loader.cc where its
  // locking is annotated for Clang's thread-safety analysis (this header is installed, the
  // annotation macros are not).
  struct Prefetch;
  std::unique_ptr<Prefetch> prefetch_;
  std::thread thread_;
};

}  // namespace kolo::fw

// DistributedSampler: gives each rank a disjoint shard of a dataset, reshuffled every epoch from
// a seed that all ranks share, so the shards of one epoch cover the data set exactly once (or
// with a few samples repeated, see Tail) without any communication.
//
// Every epoch: the indices 0..size-1 are permuted from (seed, epoch) (or left in order when
// shuffle is off), the tail is handled as chosen, and rank r takes positions r, r+world,
// r+2*world, ... of the result. Strided shards keep each rank's share of every region of the
// permutation equal.
//
// Errors: the constructor throws kolo::Error(InvalidArgument) naming the argument for a negative
// size, world < 1, or rank outside [0, world).
// Thread-safety: immutable after construction; indices() may be called concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/data/sampler.h"

namespace kolo::fw {

class DistributedSampler : public Sampler {
 public:
  // What to do when size is not a multiple of world.
  enum class Tail {
    // Repeat samples from the start of the epoch's order until every shard has
    // ceil(size / world) samples. Every sample is seen; a few twice. All shards equal.
    kPad,
    // Drop the last size % world samples of the epoch's order. All shards equal.
    kDrop,
    // No padding, no dropping: the first size % world ranks get one sample more. Every sample
    // exactly once; local batches may then differ between ranks, which DistributedOptimizer's
    // sample-count weighting averages exactly.
    kUneven,
  };

  DistributedSampler(int64_t size, int rank, int world, uint64_t seed = 0, bool shuffle = true,
                     Tail tail = Tail::kPad);

  std::vector<int64_t> indices(int64_t epoch) override;

  // Samples this rank gets per epoch.
  int64_t shard_size() const;

 private:
  int64_t size_;
  int rank_;
  int world_;
  uint64_t seed_;
  bool shuffle_;
  Tail tail_;
};

}  // namespace kolo::fw

// Samplers decide which dataset indices an epoch visits and in what order. The DataLoader asks
// its sampler for the whole epoch's index list up front, so a sampler is a pure function of the
// epoch number: every rank (and a resumed job) computes the same order without communication.
// A DistributedSampler (framework glue) implements the same interface to give each rank its
// own shard.
//
// Errors: constructors throw kolo::Error(InvalidArgument) for a negative size; indices() throws
// for a negative epoch.
// Thread-safety: the samplers here are immutable; indices() may be called concurrently.
#pragma once

#include <cstdint>
#include <vector>

namespace kolo::fw {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices to visit in epoch `epoch` (>= 0), in order. Each in [0, dataset size).
  virtual std::vector<int64_t> indices(int64_t epoch) = 0;
};

// 0, 1, ..., size-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size);
  std::vector<int64_t> indices(int64_t epoch) override;

 private:
  int64_t size_;
};

// A permutation of 0..size-1 drawn from (seed, epoch): the same for the same pair on every
// platform (mt19937_64 and our own Fisher-Yates, not std::shuffle, whose algorithm the standard
// leaves open), different from one epoch to the next.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t size, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) override;

 private:
  int64_t size_;
  uint64_t seed_;
};

// The permutation RandomSampler uses, for samplers that shuffle before sharding.
std::vector<int64_t> seeded_permutation(int64_t size, uint64_t seed, int64_t epoch);

}  // namespace kolo::fw

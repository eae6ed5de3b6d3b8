#include "framework/distributed/distributed_sampler.h"

#include <numeric>
#include <string>

#include "kolo/status.h"

namespace kolo::fw {

DistributedSampler::DistributedSampler(int64_t size, int rank, int world, uint64_t seed,
                                       bool shuffle, Tail tail)
    : size_(size), rank_(rank), world_(world), seed_(seed), shuffle_(shuffle), tail_(tail) {
  if (size < 0) {
    throw Error(Status::InvalidArgument("DistributedSampler: size must be >= 0, got " +
                                        std::to_string(size)));
  }
  if (world < 1) {
    throw Error(Status::InvalidArgument("DistributedSampler: world must be >= 1, got " +
                                        std::to_string(world)));
  }
  if (rank < 0 || rank >= world) {
    throw Error(Status::InvalidArgument("DistributedSampler: rank must be in [0, " +
                                        std::to_string(world) + "), got " + std::to_string(rank)));
  }
}

int64_t DistributedSampler::shard_size() const {
  switch (tail_) {
    case Tail::kPad:
      return (size_ + world_ - 1) / world_;
    case Tail::kDrop:
      return size_ / world_;
    case Tail::kUneven:
      return size_ / world_ + (rank_ < size_ % world_ ? 1 : 0);
  }
  return 0;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) {
  if (epoch < 0) {
    throw Error(Status::InvalidArgument("DistributedSampler: epoch must be >= 0, got " +
                                        std::to_string(epoch)));
  }
  std::vector<int64_t> order;
  if (shuffle_) {
    order = seeded_permutation(size_, seed_, epoch);
  } else {
    order.resize(static_cast<size_t>(size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  int64_t total = size_;
  if (tail_ == Tail::kPad) {
    total = ((size_ + world_ - 1) / world_) * world_;
  } else if (tail_ == Tail::kDrop) {
    total = (size_ / world_) * world_;
  }
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(shard_size()));
  for (int64_t position = rank_; position < total; position += world_) {
    // Padding wraps around to the start of the epoch's order.
    shard.push_back(order[static_cast<size_t>(position % size_)]);
  }
  return shard;
}

}  // namespace kolo::fw

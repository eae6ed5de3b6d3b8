#include "framework/data/sampler.h"

#include <numeric>
#include <random>
#include <string>

#include "kolo/status.h"

namespace kolo::fw {
namespace {

void check_size(const char* cls, int64_t size) {
  if (size < 0) {
    throw Error(Status::InvalidArgument(std::string(cls) + ": size must be >= 0, got " +
                                        std::to_string(size)));
  }
}

void check_epoch(const char* cls, int64_t epoch) {
  if (epoch < 0) {
    throw Error(Status::InvalidArgument(std::string(cls) + ": epoch must be >= 0, got " +
                                        std::to_string(epoch)));
  }
}

// splitmix64 finaliser: spreads (seed, epoch) so neighbouring epochs get unrelated streams.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) without modulo bias (rejection on the top partial range).
uint64_t bounded(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do {
    r = rng();
  } while (r >= limit);
  return r % bound;
}

}  // namespace

std::vector<int64_t> seeded_permutation(int64_t size, uint64_t seed, int64_t epoch) {
  check_size("seeded_permutation", size);
  check_epoch("seeded_permutation", epoch);
  std::vector<int64_t> out(static_cast<size_t>(size));
  std::iota(out.begin(), out.end(), int64_t{0});
  std::mt19937_64 rng(mix(seed ^ mix(static_cast<uint64_t>(epoch))));
  for (int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(bounded(rng, static_cast<uint64_t>(i) + 1));
    std::swap(out[static_cast<size_t>(i)], out[static_cast<size_t>(j)]);
  }
  return out;
}

SequentialSampler::SequentialSampler(int64_t size) : size_(size) {
  check_size("SequentialSampler", size);
}

std::vector<int64_t> SequentialSampler::indices(int64_t epoch) {
  check_epoch("SequentialSampler", epoch);
  std::vector<int64_t> out(static_cast<size_t>(size_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {
  check_size("RandomSampler", size);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) {
  return seeded_permutation(size_, seed_, epoch);
}

}  // namespace kolo::fw

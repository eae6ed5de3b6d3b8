#include "framework/distributed/shard_layout.h"

#include <algorithm>

namespace kolo::fw {

std::vector<ShardBucket> make_shard_layout(const std::vector<int64_t>& numels, int64_t bucket_bytes,
                                           int ranks) {
  std::vector<ShardBucket> buckets;
  const int64_t cap = bucket_bytes;
  int64_t bytes = 0;
  for (size_t i = numels.size(); i-- > 0;) {
    const int64_t size = numels[i] * static_cast<int64_t>(sizeof(float));
    if (buckets.empty() || bytes + size > cap) {
      buckets.emplace_back();
      bytes = 0;
    }
    ShardBucket& b = buckets.back();
    b.params.push_back(i);
    b.param_starts.push_back(b.numel);
    b.numel += numels[i];
    bytes += size;
  }
  for (ShardBucket& b : buckets) {
    int64_t offset = 0;
    for (int r = 0; r < ranks; ++r) {
      const int64_t count = b.numel / ranks + (r < b.numel % ranks ? 1 : 0);
      b.counts.push_back(count);
      b.offsets.push_back(offset);
      offset += count;
    }
  }
  return buckets;
}

std::vector<Segment> owned_segments(const ShardBucket& bucket, int rank) {
  const int64_t lo = bucket.offsets[static_cast<size_t>(rank)];
  const int64_t hi = lo + bucket.counts[static_cast<size_t>(rank)];
  std::vector<Segment> out;
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const int64_t start = bucket.param_starts[k];
    const int64_t end = k + 1 < bucket.params.size() ? bucket.param_starts[k + 1] : bucket.numel;
    const int64_t from = std::max(lo, start), to = std::min(hi, end);
    if (from >= to) continue;
    out.push_back({bucket.params[k], from - start, from, to - from});
  }
  return out;
}

std::vector<Segment> all_segments(const ShardBucket& bucket, const std::vector<int64_t>& numels) {
  std::vector<Segment> out;
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const size_t p = bucket.params[k];
    out.push_back({p, 0, bucket.param_starts[k], numels[p]});
  }
  return out;
}

}  // namespace kolo::fw

// The layout of ZeRO's sharding (Note [Shard layout]): which parameters form each bucket, where
// each parameter sits in its bucket's flat buffer, and which contiguous range of that buffer
// each rank owns.
//
// Note [Shard layout]. Buckets are packed as DistributedOptimizer packs them (Note [Buckets] in
// distributed_optimizer.h: reverse registration order, at most bucket_bytes of float32 each, a
// larger parameter alone), then each bucket is viewed as the concatenation of its parameters'
// elements, E of them. Rank r of N owns elements [offset_r, offset_r + count_r) with
// count_r = E / N plus one when r < E % N: contiguous and balanced to one element, so a rank's
// state for a bucket is at most ceil(E / N) elements and the whole model's at most the 1/N share
// plus one element per bucket. Contiguous shards are what reducescatter (recv_counts) and
// allgather (ranks in order) produce, so no permutation is needed on either side. A shard may
// cut a parameter: a Segment is the part of one parameter inside one rank's shard.
// The layout depends only on the parameters' sizes, bucket_bytes and N, so every rank computes
// the same one without communicating.
//
// Thread-safety: plain values; the functions share no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kolo::fw {

// Elements [param_offset, param_offset + length) of parameter `param` (an index into the list
// the layout was built from), which sit at `bucket_offset` of the bucket's flat buffer.
struct Segment {
  size_t param = 0;
  int64_t param_offset = 0;
  int64_t bucket_offset = 0;
  int64_t length = 0;
};

struct ShardBucket {
  std::vector<size_t> params;         // indices, in bucket order
  std::vector<int64_t> param_starts;  // each parameter's offset in the flat buffer
  int64_t numel = 0;                  // E
  std::vector<int64_t> counts;        // per rank, summing to numel
  std::vector<int64_t> offsets;       // per rank, prefix sums of counts
};

// Packs parameters of the given element counts into buckets of at most bucket_bytes of float32
// (0: one parameter per bucket) and splits each bucket over `ranks` ranks. ranks >= 1,
// bucket_bytes >= 0, numels >= 0 (the caller validates).
std::vector<ShardBucket> make_shard_layout(const std::vector<int64_t>& numels, int64_t bucket_bytes,
                                           int ranks);

// The parts of parameters inside rank `rank`'s shard of `bucket`, in bucket order.
std::vector<Segment> owned_segments(const ShardBucket& bucket, int rank);

// Every parameter of `bucket` as one segment (what a rank copies out of a gathered bucket).
std::vector<Segment> all_segments(const ShardBucket& bucket, const std::vector<int64_t>& numels);

}  // namespace kolo::fw

// Reduce-scatter with per-rank result sizes: the ring reduce-scatter of allreduce_ring on a
// copy of the input (the input is const; the copy also applies the prescale for free).
#include <algorithm>
#include <cstring>

#include "ops/collectives.h"
#include "ops/detail.h"
#include "ops/deterministic.h"
#include "ops/reduce.h"
#include "ops/ring.h"

namespace kolo::ops {

Status reducescatter(Channel& channel, const void* input, void* output,
                     const std::vector<int64_t>& counts, DataType dtype, const Reduction& reduction,
                     Workspace& workspace, bool rank_order) {
  constexpr const char* kOp = "reducescatter";
  const int p = channel.size();
  const int r = channel.rank();
  KOLO_ENFORCE(static_cast<int>(counts.size()) == p, "counts.size() " << counts.size());
  const int64_t total = sum_of(counts);
  KOLO_ENFORCE((input != nullptr || total == 0) && (output != nullptr || counts[r] == 0));
  if (total == 0) return Status::Ok();

  const size_t es = dtype_size(dtype);
  const std::vector<int64_t> offsets = offsets_of(counts);
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  const int64_t segment = std::min(segment_elems(default_segment_bytes(), es), largest);
  const size_t copy_bytes = static_cast<size_t>(total) * es;
  // The rank-order reduce-scatter keeps a pair of segment slots per rank, the ring one pair.
  const size_t slots = rank_order ? 2 * static_cast<size_t>(p) : 2;
  char* buf =
      static_cast<char*>(workspace.get(copy_bytes + slots * static_cast<size_t>(segment) * es));
  scale_copy(dtype, buf, input, total, reduction.prescale);
  if (rank_order) {
    KOLO_RETURN_IF_ERROR(rank_order_reduce_scatter(channel, buf, offsets, counts, dtype,
                                                   reduction.op, buf + copy_bytes, segment, kOp));
  } else {
    KOLO_RETURN_IF_ERROR(ring_reduce_scatter(channel, buf, offsets, counts, dtype, reduction.op,
                                             buf + copy_bytes, segment, kOp));
  }
  if (counts[r] > 0)
    std::memcpy(output, buf + offsets[r] * es, static_cast<size_t>(counts[r]) * es);
  finish_reduction(dtype, reduction, output, counts[r], p);
  return Status::Ok();
}

}  // namespace kolo::ops

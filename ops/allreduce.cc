#include "ops/collectives.h"
#include "ops/detail.h"

namespace kolo::ops {

Status allreduce(Channel& channel, void* data, int64_t count, DataType dtype,
                 const Reduction& reduction, Workspace& workspace, const AllreduceTuning& tuning) {
  KOLO_ENFORCE(tuning.segment_bytes > 0);
  // Every rank sees the same count and tuning, so every rank picks the same algorithm.
  if (tuning.rank_order)
    return allreduce_rank_order(channel, data, count, dtype, reduction, workspace, tuning);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  if (bytes <= tuning.small_message_bytes)
    return allreduce_recursive_doubling(channel, data, count, dtype, reduction, workspace);
  return allreduce_ring(channel, data, count, dtype, reduction, workspace, tuning.segment_bytes);
}

}  // namespace kolo::ops

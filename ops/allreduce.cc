#include "ops/collectives.h"
#include "ops/validate.h"

namespace kolo::ops {

Status allreduce(Channel& channel, void* data, int64_t count, const ReduceSpec& spec,
                 Workspace& workspace, const AllreduceTuning& tuning) {
  KOLO_RETURN_IF_ERROR(check_spec("allreduce", spec));
  KOLO_RETURN_IF_ERROR(check_buffer("allreduce", "data", data, count));
  if (tuning.segment_bytes == 0)
    return Status::InvalidArgument("allreduce: tuning.segment_bytes must be > 0, got 0");
  // Every rank sees the same count and tuning, so every rank picks the same algorithm.
  const size_t bytes = static_cast<size_t>(count) * dtype_size(spec.dtype);
  if (bytes <= tuning.small_message_bytes)
    return allreduce_recursive_doubling(channel, data, count, spec, workspace);
  return allreduce_ring(channel, data, count, spec, workspace, tuning.segment_bytes);
}

}  // namespace kolo::ops

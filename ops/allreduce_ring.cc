// Ring allreduce = ring reduce-scatter + ring allgather over P nearly equal blocks of the
// buffer (Note [Ring schedule] in ring.cc). Each rank sends 2(P-1)/P of the data.
#include <algorithm>

#include "ops/collectives.h"
#include "ops/detail.h"
#include "ops/reduce.h"
#include "ops/ring.h"

namespace kolo::ops {

Status allreduce_ring(Channel& channel, void* data, int64_t count, DataType dtype,
                      const Reduction& reduction, Workspace& workspace, size_t segment_bytes) {
  constexpr const char* kOp = "allreduce_ring";
  KOLO_ENFORCE(count >= 0 && (data != nullptr || count == 0), "count " << count);
  KOLO_ENFORCE(segment_bytes > 0);
  if (count == 0) return Status::Ok();
  const int p = channel.size();
  const size_t es = dtype_size(dtype);

  scale(dtype, data, count, reduction.prescale);
  if (p > 1) {
    const std::vector<int64_t> counts = split_evenly(count, p);
    const std::vector<int64_t> offsets = offsets_of(counts);
    // A segment larger than the largest block would only waste scratch memory.
    const int64_t segment =
        std::min(segment_elems(segment_bytes, es), std::max<int64_t>(counts[0], 1));
    char* scratch = static_cast<char*>(workspace.get(2 * static_cast<size_t>(segment) * es));
    char* buf = static_cast<char*>(data);
    KOLO_RETURN_IF_ERROR(ring_reduce_scatter(channel, buf, offsets, counts, dtype, reduction.op,
                                             scratch, segment, kOp));
    KOLO_RETURN_IF_ERROR(ring_allgather(channel, buf, offsets, counts, es, segment, kOp));
  }
  finish_reduction(dtype, reduction, data, count, p);
  return Status::Ok();
}

}  // namespace kolo::ops

#include <cstring>

#include "ops/collectives.h"
#include "ops/detail.h"
#include "ops/ring.h"

namespace kolo::ops {

Status allgatherv(Channel& channel, const void* input, void* output,
                  const std::vector<int64_t>& counts, DataType dtype) {
  constexpr const char* kOp = "allgatherv";
  const int p = channel.size();
  const int r = channel.rank();
  KOLO_ENFORCE(static_cast<int>(counts.size()) == p, "counts.size() " << counts.size());
  const int64_t total = sum_of(counts);
  KOLO_ENFORCE((input != nullptr || counts[r] == 0) && (output != nullptr || total == 0));
  if (total == 0) return Status::Ok();

  const size_t es = dtype_size(dtype);
  const std::vector<int64_t> offsets = offsets_of(counts);
  char* buf = static_cast<char*>(output);
  char* own = buf + offsets[r] * es;
  // memmove: the input may be this rank's own slot of the output (then this is a no-op).
  if (counts[r] > 0 && own != input) std::memmove(own, input, static_cast<size_t>(counts[r]) * es);
  return ring_allgather(channel, buf, offsets, counts, es,
                        segment_elems(default_segment_bytes(), es), kOp);
}

}  // namespace kolo::ops

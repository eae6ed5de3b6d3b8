#include "backends/exact_allreduce.h"

#include <algorithm>

#include "ops/exact.h"

namespace kolo {

Status exact_allreduce(Backend& backend, void* data, int64_t count, DataType dtype, int64_t divisor,
                       ops::Workspace& acc) {
  const int limbs = ops::exact_limbs(dtype);
  const size_t esize = dtype_size(dtype);
  char* bytes = static_cast<char*>(data);
  const int64_t chunk =
      std::max<int64_t>(1, static_cast<int64_t>(kExactChunkBytes / (sizeof(int64_t) * limbs)));
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t n = std::min(chunk, count - first);
    auto* a = static_cast<int64_t*>(acc.get(static_cast<size_t>(n * limbs) * sizeof(int64_t)));
    ops::exact_encode(dtype, bytes + first * esize, n, a);
    KOLO_RETURN_IF_ERROR(
        backend.allreduce(a, a, n * limbs, DataType::kInt64, Reduction{ReduceOp::kSum}));
    ops::exact_round(dtype, a, n, divisor, bytes + first * esize);
  }
  return Status::Ok();
}

}  // namespace kolo

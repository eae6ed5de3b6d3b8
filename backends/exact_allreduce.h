// KOLO_REDUCTION=exact over any backend (Note [Exact reduction] in ops/exact.cc): the one loop
// that the executor (coordinator/executor_exact.cc) and kolo-bench both run.
#pragma once

#include <cstdint>

#include "backends/backend.h"
#include "kolo/status.h"
#include "kolo/types.h"
#include "ops/collectives.h"

namespace kolo {

// Accumulators per backend call: a float32 chunk is 16 MiB / 56 B = 299593 elements, so memory
// stays bounded whatever the count, and each call is large enough to run at full bandwidth.
inline constexpr size_t kExactChunkBytes = size_t{16} << 20;

// data[0..count) (host memory, a dtype with ops::exact_dtype) := the exact sum over the
// backend's ranks of every rank's data, divided by `divisor` (>= 1), rounded once. Every rank
// calls it with the same count, dtype and divisor; the caller has checked ops::exact_supported.
// Per chunk: encode into `acc` (grown as needed, reused), one int64 sum allreduce of the
// accumulators through `backend`, round back into data. Errors: the backend's, data then
// partly rounded. One thread at a time per backend (its contract).
Status exact_allreduce(Backend& backend, void* data, int64_t count, DataType dtype, int64_t divisor,
                       ops::Workspace& acc);

}  // namespace kolo

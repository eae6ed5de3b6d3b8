// Exact-result checks of every Backend collective, run by every rank of a real multi-process
// job (collectives_worker). Inputs are small integers chosen so that every dtype (uint8 up to
// float64, float16 and bfloat16 included) represents every input, partial result and final
// result exactly, whatever order the backend combines ranks in; so results are compared for
// equality, not within a tolerance.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "kolo/status.h"

namespace kolo::testing {

// Runs every collective x dtype x reduce op x shape (`counts` elements, by default 0, 1, 7 and
// 1031; per-rank patterns of each of them, uneven and empty per-rank splits, in-place and
// out-of-place, pre/post-scaling) and the argument checks; allreduce_pieces too, with each
// count cut into pieces differently on each rank (or its Unsupported error, where the backend
// lacks it).
// All ranks must call it together. Returns the number of checks passed, or the first failure:
// a Status naming the collective, dtype, op, shape, element index, expected and actual value.
Result<int> run_collective_checks(Backend& backend, std::vector<int64_t> counts = {});

}  // namespace kolo::testing

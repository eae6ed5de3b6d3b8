// --check: deterministic inputs per rank and the count of output elements that differ from
// the exact result. Values are small integers, so sums and products stay exact in every
// dtype (within tolerance() for floating types).
#pragma once

#include <cstdint>

#include "bench/bench_case.h"

namespace kolo::bench {

// Writes rank `rank`'s input for the case (and, for broadcast, the root's data or zeros).
void fill_inputs(const BenchCase& c, int rank);
// Number of elements of this rank's output that are wrong.
int64_t count_wrong(const BenchCase& c, int rank);

}  // namespace kolo::bench

// Reading and writing one element of any DataType as a double, for the benchmark's --check
// mode (deterministic inputs, verified outputs). Not for hot loops.
#pragma once

#include <cstdint>

#include "kolo/types.h"

namespace kolo::bench {

void store_value(DataType dtype, void* base, int64_t index, double value);
double load_value(DataType dtype, const void* base, int64_t index);

// How far a result may be from the exact value and still count as right: 0 for exact
// integer results, a few units in the last place for floating types (relative to |expected|).
double tolerance(DataType dtype, ReduceOp op, double expected);

}  // namespace kolo::bench

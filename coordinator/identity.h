// The identity element of each reduction, which a joined rank contributes in its place.
#pragma once

#include <cstdint>

#include "kolo/types.h"

namespace kolo::coord {

// Fills count elements with op's identity: 0 for sum and average, 1 for product, the
// largest value (+inf for floating types) for min and the lowest (-inf) for max.
void fill_identity(DataType dtype, ReduceOp op, void* data, int64_t count);

}  // namespace kolo::coord

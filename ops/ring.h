// The two halves of every ring algorithm, over a buffer divided into one block per rank
// (internal to ops/). Block i spans counts[i] elements from offsets[i]; blocks may be empty.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"
#include "ops/channel.h"
#include "ops/collectives.h"

namespace kolo::ops {

// Ring reduce-scatter in place. On entry `buf` holds this rank's contribution to every block;
// on success block rank() holds the reduction (op, no scaling) over all ranks. Other
// blocks hold partial results. `scratch` must hold 2 * segment elements.
Status ring_reduce_scatter(Channel& channel, char* buf, const std::vector<int64_t>& offsets,
                           const std::vector<int64_t>& counts, DataType dtype, ReduceOp op,
                           char* scratch, int64_t segment, std::string_view what);

// Ring allgather in place. On entry block rank() of `buf` is valid; on success every block
// holds its owner's data.
Status ring_allgather(Channel& channel, char* buf, const std::vector<int64_t>& offsets,
                      const std::vector<int64_t>& counts, size_t elem_size, int64_t segment,
                      std::string_view op);

}  // namespace kolo::ops

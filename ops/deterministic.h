// The rank-order reductions of KOLO_DETERMINISTIC (internal to ops/; Note [Deterministic
// reduction] in deterministic.cc). Contracts as collectives.h's.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"
#include "ops/channel.h"
#include "ops/collectives.h"

namespace kolo::ops {

// Reduce-scatter in place over blocks (offsets[i], counts[i]) of `buf`, as ring_reduce_scatter
// (ring.h), but each element of block rank() is the left fold of the ranks' contributions in
// rank order; other blocks are left as they were. `scratch` must hold 2 * size() * segment
// elements.
Status rank_order_reduce_scatter(Channel& channel, char* buf, const std::vector<int64_t>& offsets,
                                 const std::vector<int64_t>& counts, DataType dtype, ReduceOp op,
                                 char* scratch, int64_t segment, std::string_view what);

}  // namespace kolo::ops

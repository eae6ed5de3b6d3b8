// Argument checks for the ops/ collectives. Each returns OK or InvalidArgument naming the
// operation, the argument, what was expected and what was given, e.g.
// "allreduce: count must be >= 0, got -3". Internal to ops/ (backends have their own
// validate_* helpers in backends/backend.h, which run before these).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"
#include "ops/collectives.h"

namespace kolo::ops {

Status check_dtype(std::string_view op, DataType dtype);
Status check_spec(std::string_view op, const ReduceSpec& spec);
// count >= 0, and data non-null when count > 0.
Status check_buffer(std::string_view op, std::string_view arg, const void* data, int64_t count);
// One non-negative entry per rank.
Status check_counts(std::string_view op, std::string_view arg, const std::vector<int64_t>& counts,
                    int size);
Status check_root(std::string_view op, int root, int size);

int64_t sum_of(const std::vector<int64_t>& counts);

// Adds "<op>: <verb> rank <peer>" to a transport error so that it names the peer.
Status with_peer(Status status, std::string_view op, std::string_view verb, int peer);

}  // namespace kolo::ops

// Fusion planning: which responses of a cycle run together in one backend call.
//
// Only allreduces fuse, and only with responses that agree in dtype, device, reduce op,
// scale factors and joined ranks (so one backend call with one set of options serves all).
// A batch holds responses up to `threshold` bytes in total, looking ahead past responses that
// do not fit or do not agree; batches run in the order of their first response. A grouped
// allreduce (several shapes in one response) is never split, even beyond the threshold.
// The plan depends only on the response list and the threshold, so every rank computes the
// same one.
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/message.h"

namespace kolo::coord {

// Bytes of all tensors of a response.
uint64_t response_bytes(const Response& response);
// Whether two responses may share one fused allreduce.
bool fusable(const Response& a, const Response& b);
// Batches of indices into `responses`; threshold 0 disables fusion.
std::vector<std::vector<size_t>> plan_fusion(const std::vector<Response>& responses,
                                             uint64_t threshold);

}  // namespace kolo::coord

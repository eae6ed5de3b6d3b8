#include "coordinator/fusion.h"

namespace kolo::coord {

uint64_t response_bytes(const Response& response) {
  uint64_t elements = 0;
  for (const auto& shape : response.shapes) elements += static_cast<uint64_t>(num_elements(shape));
  return elements * dtype_size(response.dtype);
}

bool fusable(const Response& a, const Response& b) {
  return a.kind == Response::Kind::kExecute && b.kind == Response::Kind::kExecute &&
         a.type == OpType::kAllreduce && b.type == OpType::kAllreduce && a.dtype == b.dtype &&
         a.device == b.device && a.reduction == b.reduction && a.joined == b.joined;
}

std::vector<std::vector<size_t>> plan_fusion(const std::vector<Response>& responses,
                                             uint64_t threshold) {
  std::vector<std::vector<size_t>> batches;
  std::vector<bool> used(responses.size(), false);
  for (size_t i = 0; i < responses.size(); ++i) {
    if (used[i]) continue;
    used[i] = true;
    batches.push_back({i});
    const Response& head = responses[i];
    if (threshold == 0 || head.kind != Response::Kind::kExecute || head.type != OpType::kAllreduce)
      continue;
    uint64_t bytes = response_bytes(head);
    for (size_t j = i + 1; j < responses.size() && bytes < threshold; ++j) {
      if (used[j] || !fusable(head, responses[j])) continue;
      uint64_t b = response_bytes(responses[j]);
      if (bytes + b > threshold) continue;
      bytes += b;
      used[j] = true;
      batches.back().push_back(j);
    }
  }
  return batches;
}

}  // namespace kolo::coord

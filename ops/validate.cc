#include "ops/validate.h"

#include <cmath>
#include <numeric>
#include <string>

namespace kolo::ops {
namespace {
std::string str(std::string_view v) { return std::string(v); }
}  // namespace

Status check_dtype(std::string_view op, DataType dtype) {
  if (is_valid_dtype(static_cast<int>(dtype))) return Status::Ok();
  return Status::InvalidArgument(str(op) +
                                 ": dtype must be one of uint8, int8, int32, int64, float16, "
                                 "bfloat16, float32, float64, got enum value " +
                                 std::to_string(static_cast<int>(dtype)));
}

Status check_spec(std::string_view op, const ReduceSpec& spec) {
  KOLO_RETURN_IF_ERROR(check_dtype(op, spec.dtype));
  if (!is_valid_reduce_op(static_cast<int>(spec.op)))
    return Status::InvalidArgument(str(op) +
                                   ": reduce op must be one of sum, average, min, max, product, "
                                   "got enum value " +
                                   std::to_string(static_cast<int>(spec.op)));
  if (!std::isfinite(spec.prescale))
    return Status::InvalidArgument(str(op) + ": prescale must be finite, got " +
                                   std::to_string(spec.prescale));
  if (!std::isfinite(spec.postscale))
    return Status::InvalidArgument(str(op) + ": postscale must be finite, got " +
                                   std::to_string(spec.postscale));
  return Status::Ok();
}

Status check_buffer(std::string_view op, std::string_view arg, const void* data, int64_t count) {
  if (count < 0)
    return Status::InvalidArgument(str(op) + ": count of " + str(arg) + " must be >= 0, got " +
                                   std::to_string(count));
  if (data == nullptr && count > 0)
    return Status::InvalidArgument(str(op) + ": " + str(arg) +
                                   " must be non-null when its count is > 0, got null with "
                                   "count " +
                                   std::to_string(count));
  return Status::Ok();
}

Status check_counts(std::string_view op, std::string_view arg, const std::vector<int64_t>& counts,
                    int size) {
  if (static_cast<int64_t>(counts.size()) != size)
    return Status::InvalidArgument(str(op) + ": " + str(arg) + " must have one entry per rank (" +
                                   std::to_string(size) + "), got " +
                                   std::to_string(counts.size()));
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] < 0)
      return Status::InvalidArgument(str(op) + ": " + str(arg) + "[" + std::to_string(i) +
                                     "] must be >= 0, got " + std::to_string(counts[i]));
  return Status::Ok();
}

Status check_root(std::string_view op, int root, int size) {
  if (root >= 0 && root < size) return Status::Ok();
  return Status::InvalidArgument(str(op) + ": root must be in [0, " + std::to_string(size) +
                                 "), got " + std::to_string(root));
}

int64_t sum_of(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

Status with_peer(Status status, std::string_view op, std::string_view verb, int peer) {
  if (status.ok()) return status;
  return status.with_context(str(op) + ": " + str(verb) + " rank " + std::to_string(peer));
}

}  // namespace kolo::ops

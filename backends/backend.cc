#include "backends/backend.h"

#include <numeric>
#include <string>

namespace kolo {

namespace {
std::string s(std::string_view v) { return std::string(v); }
}  // namespace

Status Backend::unsupported(std::string_view op) const {
  return Status::Unsupported("backend " + s(name()) + " does not support " + s(op));
}

Status Backend::allreduce(const void*, void*, int64_t, DataType, const AllreduceOptions&) {
  return unsupported("allreduce");
}
Status Backend::allgather(const void*, void*, DataType, const AllgatherOptions&) {
  return unsupported("allgather");
}
Status Backend::broadcast(void*, int64_t, DataType, const BroadcastOptions&) {
  return unsupported("broadcast");
}
Status Backend::alltoall(const void*, void*, DataType, const AlltoallOptions&) {
  return unsupported("alltoall");
}
Status Backend::reducescatter(const void*, void*, DataType, const ReducescatterOptions&) {
  return unsupported("reducescatter");
}
Status Backend::barrier() { return unsupported("barrier"); }

Status validate_dtype(std::string_view op, DataType dtype) {
  if (is_valid_dtype(static_cast<int>(dtype))) return Status::Ok();
  return Status::InvalidArgument(s(op) + ": dtype must be one of uint8, int8, int32, int64, "
                                 "float16, bfloat16, float32, float64, got enum value " +
                                 std::to_string(static_cast<int>(dtype)));
}

Status validate_reduce_op(std::string_view op, ReduceOp reduce) {
  if (is_valid_reduce_op(static_cast<int>(reduce))) return Status::Ok();
  return Status::InvalidArgument(s(op) + ": reduce op must be one of sum, average, min, max, "
                                 "product, got enum value " +
                                 std::to_string(static_cast<int>(reduce)));
}

Status validate_buffer(std::string_view op, std::string_view arg, const void* data,
                       int64_t count) {
  if (count < 0)
    return Status::InvalidArgument(s(op) + ": count of " + s(arg) + " must be >= 0, got " +
                                   std::to_string(count));
  if (data == nullptr && count > 0)
    return Status::InvalidArgument(s(op) + ": " + s(arg) + " is null but its count is " +
                                   std::to_string(count));
  return Status::Ok();
}

Status validate_counts(std::string_view op, std::string_view arg,
                       const std::vector<int64_t>& counts, int size) {
  if (static_cast<int>(counts.size()) != size)
    return Status::InvalidArgument(s(op) + ": " + s(arg) + " must have one entry per rank (" +
                                   std::to_string(size) + "), got " +
                                   std::to_string(counts.size()));
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] < 0)
      return Status::InvalidArgument(s(op) + ": " + s(arg) + "[" + std::to_string(i) +
                                     "] must be >= 0, got " + std::to_string(counts[i]));
  return Status::Ok();
}

static int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

Status validate_allreduce(int, const void* input, const void* output, int64_t count,
                          DataType dtype, const AllreduceOptions& options) {
  KOLO_RETURN_IF_ERROR(validate_dtype("allreduce", dtype));
  KOLO_RETURN_IF_ERROR(validate_reduce_op("allreduce", options.op));
  KOLO_RETURN_IF_ERROR(validate_buffer("allreduce", "input", input, count));
  return validate_buffer("allreduce", "output", output, count);
}

Status validate_allgather(int rank, int size, const void* input, const void* output,
                          DataType dtype, const AllgatherOptions& options) {
  KOLO_RETURN_IF_ERROR(validate_dtype("allgather", dtype));
  KOLO_RETURN_IF_ERROR(validate_counts("allgather", "counts", options.counts, size));
  KOLO_RETURN_IF_ERROR(validate_buffer("allgather", "input", input, options.counts[rank]));
  return validate_buffer("allgather", "output", output, total(options.counts));
}

Status validate_broadcast(int size, const void* data, int64_t count, DataType dtype,
                          const BroadcastOptions& options) {
  KOLO_RETURN_IF_ERROR(validate_dtype("broadcast", dtype));
  if (options.root < 0 || options.root >= size)
    return Status::InvalidArgument("broadcast: root must be in [0, " + std::to_string(size) +
                                   "), got " + std::to_string(options.root));
  return validate_buffer("broadcast", "data", data, count);
}

Status validate_alltoall(int size, const void* input, const void* output, DataType dtype,
                         const AlltoallOptions& options) {
  KOLO_RETURN_IF_ERROR(validate_dtype("alltoall", dtype));
  KOLO_RETURN_IF_ERROR(validate_counts("alltoall", "send_counts", options.send_counts, size));
  KOLO_RETURN_IF_ERROR(validate_counts("alltoall", "recv_counts", options.recv_counts, size));
  KOLO_RETURN_IF_ERROR(validate_buffer("alltoall", "input", input, total(options.send_counts)));
  return validate_buffer("alltoall", "output", output, total(options.recv_counts));
}

Status validate_reducescatter(int rank, int size, const void* input, const void* output,
                              DataType dtype, const ReducescatterOptions& options) {
  KOLO_RETURN_IF_ERROR(validate_dtype("reducescatter", dtype));
  KOLO_RETURN_IF_ERROR(validate_reduce_op("reducescatter", options.op));
  KOLO_RETURN_IF_ERROR(validate_counts("reducescatter", "counts", options.counts, size));
  KOLO_RETURN_IF_ERROR(validate_buffer("reducescatter", "input", input, total(options.counts)));
  return validate_buffer("reducescatter", "output", output, options.counts[rank]);
}

}  // namespace kolo

#include "backends/backend.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace kolo {

namespace {

std::string s(std::string_view v) { return std::string(v); }

int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

}  // namespace

Status Backend::allreduce(const void* input, void* output, int64_t count, DataType dtype,
                          const Reduction& reduction) {
  KOLO_RETURN_IF_ERROR(validate_dtype("allreduce", dtype));
  KOLO_RETURN_IF_ERROR(validate_reduction("allreduce", reduction));
  KOLO_RETURN_IF_ERROR(validate_buffer("allreduce", "input", input, count));
  KOLO_RETURN_IF_ERROR(validate_buffer("allreduce", "output", output, count));
  return do_allreduce(input, output, count, dtype, reduction);
}

Status Backend::allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                 const Reduction& reduction) {
  KOLO_RETURN_IF_ERROR(validate_dtype("allreduce_pieces", dtype));
  KOLO_RETURN_IF_ERROR(validate_reduction("allreduce_pieces", reduction));
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const AllreducePiece& p = pieces[i];
    const bool valid = p.count == 0 || (p.count > 0 && p.input && p.output);
    if (valid && p.count <= std::numeric_limits<int64_t>::max() - total) {
      total += p.count;
      continue;
    }
    // The names are built only for the message: the loop runs per fused batch.
    const std::string piece = "pieces[" + std::to_string(i) + "]";
    KOLO_RETURN_IF_ERROR(validate_buffer("allreduce_pieces", piece + ".input", p.input, p.count));
    KOLO_RETURN_IF_ERROR(validate_buffer("allreduce_pieces", piece + ".output", p.output, p.count));
    return Status::InvalidArgument("allreduce_pieces: the total count must fit in int64, got " +
                                   std::to_string(total) + " before " + piece + " of " +
                                   std::to_string(p.count));
  }
  return do_allreduce_pieces(pieces, dtype, reduction);
}

Status Backend::allgather(const void* input, void* output, DataType dtype,
                          const std::vector<int64_t>& counts) {
  KOLO_RETURN_IF_ERROR(validate_dtype("allgather", dtype));
  KOLO_RETURN_IF_ERROR(validate_counts("allgather", "counts", counts, size()));
  KOLO_RETURN_IF_ERROR(validate_buffer("allgather", "input", input, counts[rank()]));
  KOLO_RETURN_IF_ERROR(validate_buffer("allgather", "output", output, total(counts)));
  return do_allgather(input, output, dtype, counts);
}

Status Backend::broadcast(void* data, int64_t count, DataType dtype, int root) {
  KOLO_RETURN_IF_ERROR(validate_dtype("broadcast", dtype));
  KOLO_RETURN_IF_ERROR(validate_root("broadcast", root, size()));
  KOLO_RETURN_IF_ERROR(validate_buffer("broadcast", "data", data, count));
  return do_broadcast(data, count, dtype, root);
}

Status Backend::alltoall(const void* input, void* output, DataType dtype,
                         const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& recv_counts) {
  KOLO_RETURN_IF_ERROR(validate_dtype("alltoall", dtype));
  KOLO_RETURN_IF_ERROR(validate_counts("alltoall", "send_counts", send_counts, size()));
  KOLO_RETURN_IF_ERROR(validate_counts("alltoall", "recv_counts", recv_counts, size()));
  const int r = rank();
  if (send_counts[r] != recv_counts[r])
    return Status::InvalidArgument(
        "alltoall: send_counts[" + std::to_string(r) + "] (what rank " + std::to_string(r) +
        " keeps for itself) must equal recv_counts[" + std::to_string(r) +
        "] = " + std::to_string(recv_counts[r]) + ", got " + std::to_string(send_counts[r]));
  KOLO_RETURN_IF_ERROR(validate_buffer("alltoall", "input", input, total(send_counts)));
  KOLO_RETURN_IF_ERROR(validate_buffer("alltoall", "output", output, total(recv_counts)));
  return do_alltoall(input, output, dtype, send_counts, recv_counts);
}

Status Backend::reducescatter(const void* input, void* output, DataType dtype,
                              const Reduction& reduction, const std::vector<int64_t>& counts) {
  KOLO_RETURN_IF_ERROR(validate_dtype("reducescatter", dtype));
  KOLO_RETURN_IF_ERROR(validate_reduction("reducescatter", reduction));
  KOLO_RETURN_IF_ERROR(validate_counts("reducescatter", "counts", counts, size()));
  KOLO_RETURN_IF_ERROR(validate_buffer("reducescatter", "input", input, total(counts)));
  KOLO_RETURN_IF_ERROR(validate_buffer("reducescatter", "output", output, counts[rank()]));
  return do_reducescatter(input, output, dtype, reduction, counts);
}

Status Backend::unsupported(std::string_view op) const {
  return Status::Unsupported("backend " + s(name()) + " does not support " + s(op));
}

Status Backend::do_allreduce(const void*, void*, int64_t, DataType, const Reduction&) {
  return unsupported("allreduce");
}
Status Backend::do_allreduce_pieces(const std::vector<AllreducePiece>&, DataType,
                                    const Reduction&) {
  return unsupported("allreduce_pieces");
}
Status Backend::do_allgather(const void*, void*, DataType, const std::vector<int64_t>&) {
  return unsupported("allgather");
}
Status Backend::do_broadcast(void*, int64_t, DataType, int) { return unsupported("broadcast"); }
Status Backend::do_alltoall(const void*, void*, DataType, const std::vector<int64_t>&,
                            const std::vector<int64_t>&) {
  return unsupported("alltoall");
}
Status Backend::do_reducescatter(const void*, void*, DataType, const Reduction&,
                                 const std::vector<int64_t>&) {
  return unsupported("reducescatter");
}
Status Backend::do_barrier() { return unsupported("barrier"); }

namespace {

// "uint8, int8, ..." and "sum, average, ...": the names of kolo/types.h, so that the messages
// follow when an enumerator is added.
template <typename Enum>
std::string enum_names(int count, std::string_view (*name)(Enum)) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    out += i == 0 ? "" : ", ";
    out += name(static_cast<Enum>(i));
  }
  return out;
}

}  // namespace

Status validate_dtype(std::string_view context, DataType dtype) {
  if (is_valid_dtype(static_cast<int>(dtype))) return Status::Ok();
  return Status::InvalidArgument(s(context) + ": dtype must be one of " +
                                 enum_names(kNumDataTypes, dtype_name) + ", got enum value " +
                                 std::to_string(static_cast<int>(dtype)));
}

bool is_valid_reduction(const Reduction& reduction) {
  return is_valid_reduce_op(static_cast<int>(reduction.op)) && std::isfinite(reduction.prescale) &&
         std::isfinite(reduction.postscale);
}

Status validate_reduction(std::string_view context, const Reduction& reduction) {
  if (is_valid_reduction(reduction)) return Status::Ok();
  if (!is_valid_reduce_op(static_cast<int>(reduction.op)))
    return Status::InvalidArgument(s(context) + ": reduce op must be one of " +
                                   enum_names(kNumReduceOps, reduce_op_name) + ", got enum value " +
                                   std::to_string(static_cast<int>(reduction.op)));
  if (!std::isfinite(reduction.prescale))
    return Status::InvalidArgument(s(context) + ": prescale must be finite, got " +
                                   std::to_string(reduction.prescale));
  if (!std::isfinite(reduction.postscale))
    return Status::InvalidArgument(s(context) + ": postscale must be finite, got " +
                                   std::to_string(reduction.postscale));
  return Status::Ok();
}

Status validate_buffer(std::string_view context, std::string_view arg, const void* data,
                       int64_t count) {
  if (count < 0)
    return Status::InvalidArgument(s(context) + ": count of " + s(arg) + " must be >= 0, got " +
                                   std::to_string(count));
  if (data == nullptr && count > 0)
    return Status::InvalidArgument(s(context) + ": " + s(arg) +
                                   " must be non-null when its count is > 0, got null with "
                                   "count " +
                                   std::to_string(count));
  return Status::Ok();
}

Status validate_counts(std::string_view context, std::string_view arg,
                       const std::vector<int64_t>& counts, int size) {
  if (static_cast<int64_t>(counts.size()) != size)
    return Status::InvalidArgument(s(context) + ": " + s(arg) + " must have one entry per rank (" +
                                   std::to_string(size) + "), got " +
                                   std::to_string(counts.size()));
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] < 0)
      return Status::InvalidArgument(s(context) + ": " + s(arg) + "[" + std::to_string(i) +
                                     "] must be >= 0, got " + std::to_string(counts[i]));
  return Status::Ok();
}

Status validate_root(std::string_view context, int root, int size) {
  if (root >= 0 && root < size) return Status::Ok();
  return Status::InvalidArgument(s(context) + ": root must be in [0, " + std::to_string(size) +
                                 "), got " + std::to_string(root));
}

}  // namespace kolo

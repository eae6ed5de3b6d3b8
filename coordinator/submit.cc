#include "coordinator/submit.h"

#include <numeric>
#include <sstream>

#include "backends/backend.h"
#include "coordinator/cuda_staging.h"

namespace kolo::coord {

namespace {

std::string prefix(OpType type, const std::string& name) {
  return std::string(op_type_name(type)) + " '" + name + "'";
}

// Whether check_view() passes a CPU view, without building its messages: every submission
// checks its views, and the strings cost as much as the rest of a submission.
bool valid_cpu_view(const TensorView& v) {
  if (!is_valid_dtype(static_cast<int>(v.dtype)) || !v.device.is_cpu()) return false;
  for (int64_t d : v.shape)
    if (d < 0) return false;
  return v.data != nullptr || v.num_elements() == 0;
}

Status check_view(OpType type, const std::string& name, const char* arg, const TensorView& v) {
  if (valid_cpu_view(v)) return Status::Ok();
  const std::string where = prefix(type, name) + ": " + arg;
  KOLO_RETURN_IF_ERROR(validate_dtype(where, v.dtype));
  for (size_t i = 0; i < v.shape.size(); ++i)
    if (v.shape[i] < 0)
      return Status::InvalidArgument(where + " dimension " + std::to_string(i) +
                                     " must be >= 0, got " + std::to_string(v.shape[i]) +
                                     " in shape " + shape_string(v.shape));
  if (v.data == nullptr && v.num_elements() > 0)
    return Status::InvalidArgument(where + " data is null but shape " + shape_string(v.shape) +
                                   " has " + std::to_string(v.num_elements()) + " elements");
  // "allreduce input: tensor 'x' is on cuda:0 but this Kolo build has no CUDA support"
  return check_device(std::string(op_type_name(type)) + " " + arg, name, v.device);
}

// Allgather, alltoall and reducescatter split or join along the first dimension.
Status check_has_rows(OpType type, const std::string& name, const TensorView& input) {
  if (input.shape.empty())
    return Status::InvalidArgument(prefix(type, name) +
                                   ": input must have at least 1 dimension, got a scalar");
  return Status::Ok();
}

Status check_name(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("operation name must not be empty");
  if (name.starts_with(kInternalNamePrefix))
    return Status::InvalidArgument("operation name '" + name + "': names starting with '" +
                                   std::string(kInternalNamePrefix) +
                                   "' are reserved for Kolo's own operations");
  return Status::Ok();
}

std::unique_ptr<Entry> new_entry(std::string name, OpType type) {
  auto e = std::make_unique<Entry>();
  e->request.name = std::move(name);
  e->request.type = type;
  e->state = std::make_shared<detail::OpState>(e->request.name);
  return e;
}

void describe(Entry& e, const TensorView& v) {
  e.request.dtype = v.dtype;
  e.request.device = v.device;
  e.request.shapes = {v.shape};
  e.inputs = {v};
}

}  // namespace

Status check_input_view(OpType type, const std::string& name, const char* arg,
                        const TensorView& view) {
  return check_view(type, name, arg, view);
}

Result<std::unique_ptr<Entry>> build_allreduce(std::string name, TensorView input,
                                               TensorView output, const AllreduceOptions& opts) {
  KOLO_RETURN_IF_ERROR(check_name(name));
  const OpType t = OpType::kAllreduce;
  KOLO_RETURN_IF_ERROR(check_view(t, name, "input", input));
  KOLO_RETURN_IF_ERROR(check_view(t, name, "output", output));
  if (output.shape != input.shape || output.dtype != input.dtype || output.device != input.device)
    return Status::InvalidArgument(
        prefix(t, name) + ": output must match input: expected " + shape_string(input.shape) + " " +
        std::string(dtype_name(input.dtype)) + " on " + input.device.to_string() + ", got " +
        shape_string(output.shape) + " " + std::string(dtype_name(output.dtype)) + " on " +
        output.device.to_string());
  Result<Reduction> reduction = effective_reduction(opts);
  if (!reduction.ok()) return reduction.status().with_context(prefix(t, name));
  if (!is_valid_reduction(*reduction)) return validate_reduction(prefix(t, name), *reduction);
  auto e = new_entry(std::move(name), t);
  describe(*e, input);
  e->outputs = {output};
  e->request.reduction = *reduction;
  return e;
}

Result<std::unique_ptr<Entry>> build_grouped_allreduce(std::string name,
                                                       std::vector<TensorView> tensors,
                                                       const AllreduceOptions& opts) {
  KOLO_RETURN_IF_ERROR(check_name(name));
  const OpType t = OpType::kAllreduce;
  if (tensors.empty())
    return Status::InvalidArgument(prefix(t, name) +
                                   ": a grouped allreduce needs >= 1 tensor, got 0");
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string member = name + "[" + std::to_string(i) + "]";
    KOLO_RETURN_IF_ERROR(check_view(t, member, "tensor", tensors[i]));
    if (tensors[i].dtype != tensors[0].dtype || tensors[i].device != tensors[0].device)
      return Status::InvalidArgument(
          prefix(t, member) + ": every tensor of a group must have dtype " +
          std::string(dtype_name(tensors[0].dtype)) + " on " + tensors[0].device.to_string() +
          ", got " + std::string(dtype_name(tensors[i].dtype)) + " on " +
          tensors[i].device.to_string());
  }
  KOLO_ASSIGN_OR_RETURN(auto e, build_allreduce(name, tensors[0], tensors[0], opts));
  e->request.shapes.clear();
  for (const auto& v : tensors) e->request.shapes.push_back(v.shape);
  e->inputs = tensors;
  e->outputs = std::move(tensors);
  return e;
}

Result<std::unique_ptr<Entry>> build_allgather(std::string name, TensorView input,
                                               AllgatherOptions opts) {
  KOLO_RETURN_IF_ERROR(check_name(name));
  const OpType t = OpType::kAllgather;
  KOLO_RETURN_IF_ERROR(check_view(t, name, "input", input));
  KOLO_RETURN_IF_ERROR(check_has_rows(t, name, input));
  auto e = new_entry(std::move(name), t);
  describe(*e, input);
  e->allocator = std::move(opts.allocator);
  return e;
}

Result<std::unique_ptr<Entry>> build_broadcast(std::string name, TensorView tensor,
                                               const BroadcastOptions& opts, int size) {
  KOLO_RETURN_IF_ERROR(check_name(name));
  const OpType t = OpType::kBroadcast;
  KOLO_RETURN_IF_ERROR(check_view(t, name, "tensor", tensor));
  KOLO_RETURN_IF_ERROR(validate_root(prefix(t, name), opts.root, size));
  auto e = new_entry(std::move(name), t);
  describe(*e, tensor);
  e->request.root = opts.root;
  return e;
}

Result<std::unique_ptr<Entry>> build_alltoall(std::string name, TensorView input,
                                              AlltoallOptions opts, int size) {
  KOLO_RETURN_IF_ERROR(check_name(name));
  const OpType t = OpType::kAlltoall;
  KOLO_RETURN_IF_ERROR(check_view(t, name, "input", input));
  KOLO_RETURN_IF_ERROR(check_has_rows(t, name, input));
  const int64_t rows = input.shape[0];
  if (opts.splits.empty()) {
    if (rows % size != 0)
      return Status::InvalidArgument(prefix(t, name) +
                                     ": without splits, shape[0] must divide by " +
                                     std::to_string(size) + " ranks, got " + std::to_string(rows));
    opts.splits.assign(size, rows / size);
  }
  KOLO_RETURN_IF_ERROR(validate_counts(prefix(t, name), "splits", opts.splits, size));
  int64_t sum = std::accumulate(opts.splits.begin(), opts.splits.end(), int64_t{0});
  if (sum != rows)
    return Status::InvalidArgument(prefix(t, name) + ": splits must sum to shape[0] = " +
                                   std::to_string(rows) + ", got " + std::to_string(sum));
  auto e = new_entry(std::move(name), t);
  describe(*e, input);
  e->request.splits = std::move(opts.splits);
  e->allocator = std::move(opts.allocator);
  return e;
}

Result<std::unique_ptr<Entry>> build_reducescatter(std::string name, TensorView input,
                                                   ReducescatterOptions opts, int size) {
  KOLO_RETURN_IF_ERROR(check_name(name));
  const OpType t = OpType::kReducescatter;
  KOLO_RETURN_IF_ERROR(check_view(t, name, "input", input));
  KOLO_RETURN_IF_ERROR(check_has_rows(t, name, input));
  KOLO_RETURN_IF_ERROR(validate_reduction(prefix(t, name), opts.reduction));
  if (!opts.recv_counts.empty()) {
    KOLO_RETURN_IF_ERROR(validate_counts(prefix(t, name), "recv_counts", opts.recv_counts, size));
    const int64_t sum =
        std::accumulate(opts.recv_counts.begin(), opts.recv_counts.end(), int64_t{0});
    if (sum != input.shape[0])
      return Status::InvalidArgument(prefix(t, name) + ": recv_counts " +
                                     shape_string(opts.recv_counts) +
                                     " must sum to shape[0] = " + std::to_string(input.shape[0]) +
                                     ", got " + std::to_string(sum));
  }
  auto e = new_entry(std::move(name), t);
  describe(*e, input);
  e->request.reduction = opts.reduction;
  e->request.splits = std::move(opts.recv_counts);
  e->allocator = std::move(opts.allocator);
  return e;
}

Result<std::unique_ptr<Entry>> build_barrier(std::string name) {
  KOLO_RETURN_IF_ERROR(check_name(name));
  return new_entry(std::move(name), OpType::kBarrier);
}

Result<std::unique_ptr<Entry>> build_join() {
  return new_entry(std::string(kJoinName), OpType::kJoin);
}

Result<std::unique_ptr<Entry>> build_internal_allgather(std::string name, TensorView input) {
  KOLO_ASSIGN_OR_RETURN(auto e, build_allgather("internal", input, {}));
  e->request.name = name;
  e->state = std::make_shared<detail::OpState>(std::move(name));
  return e;
}

}  // namespace kolo::coord

namespace kolo {

namespace {

// "{op average, prescale 0.5, postscale 1}"; an op outside the enum (not yet validated) by value.
std::string reduction_string(const Reduction& r) {
  std::ostringstream out;
  out << "{op ";
  if (is_valid_reduce_op(static_cast<int>(r.op)))
    out << reduce_op_name(r.op);
  else
    out << "enum value " << static_cast<int>(r.op);
  out << ", prescale " << r.prescale << ", postscale " << r.postscale << "}";
  return out.str();
}

}  // namespace

Result<Reduction> effective_reduction(const AllreduceOptions& opts) {
  if (!opts.op.set() && !opts.prescale.set() && !opts.postscale.set()) return opts.reduction;
  const Reduction flat{opts.op.value(), opts.prescale.value(), opts.postscale.value()};
  // `reduction` at its default is taken as unset: 0.2's programs never touch it.
  if (opts.reduction == Reduction{} || opts.reduction == flat) return flat;
  return Status::InvalidArgument(
      "AllreduceOptions sets the reduction twice, differently: .reduction is " +
      reduction_string(opts.reduction) + " but the deprecated flat members .op/.prescale/" +
      ".postscale say " + reduction_string(flat) + "; set only .reduction");
}

using coord::submit_global;

Handle allreduce_async(std::string name, TensorView tensor, AllreduceOptions opts) {
  return allreduce_async(std::move(name), tensor, tensor, opts);
}
Handle allreduce_async(std::string name, TensorView input, TensorView output,
                       AllreduceOptions opts) {
  std::string n = name;
  return submit_global(coord::build_allreduce(std::move(name), input, output, opts), n,
                       opts.process_set);
}
Handle grouped_allreduce_async(std::string name, std::vector<TensorView> tensors,
                               AllreduceOptions opts) {
  std::string n = name;
  return submit_global(coord::build_grouped_allreduce(std::move(name), std::move(tensors), opts), n,
                       opts.process_set);
}
Handle allgather_async(std::string name, TensorView input, AllgatherOptions opts) {
  std::string n = name;
  ProcessSet set = opts.process_set;
  return submit_global(coord::build_allgather(std::move(name), input, std::move(opts)), n, set);
}
Handle broadcast_async(std::string name, TensorView tensor, BroadcastOptions opts) {
  std::string n = name;
  return submit_global(
      coord::build_broadcast(std::move(name), tensor, opts, opts.process_set.size()), n,
      opts.process_set);
}
Handle alltoall_async(std::string name, TensorView input, AlltoallOptions opts) {
  std::string n = name;
  ProcessSet set = opts.process_set;
  const int size = set.size();
  return submit_global(coord::build_alltoall(std::move(name), input, std::move(opts), size), n,
                       set);
}
Handle reducescatter_async(std::string name, TensorView input, ReducescatterOptions opts) {
  std::string n = name;
  ProcessSet set = opts.process_set;
  return submit_global(
      coord::build_reducescatter(std::move(name), input, std::move(opts), set.size()), n, set);
}
Handle barrier_async(std::string name) { return barrier_async(std::move(name), ProcessSet{}); }
Handle barrier_async(std::string name, const ProcessSet& process_set) {
  std::string n = name;
  return submit_global(coord::build_barrier(std::move(name)), n, process_set);
}
Handle join_async() { return submit_global(coord::build_join(), std::string(coord::kJoinName)); }

namespace {
Result<HostTensor> output_of(const Handle& h) {
  KOLO_RETURN_IF_ERROR(h.wait());
  return h.take_output();
}

// A blocking call's operation: submitted without waking the background thread, then waited on
// by its caller, who runs the cycle itself when it can (Note [Waiter drives] in runtime.cc).
Status submit_and_wait(Result<std::unique_ptr<coord::Entry>> entry, const std::string& name,
                       const ProcessSet& process_set) {
  if (entry.ok()) (*entry)->caller_waits = true;
  return submit_global(std::move(entry), name, process_set).wait();
}
}  // namespace

Status allreduce(std::string name, TensorView tensor, AllreduceOptions opts) {
  return allreduce(std::move(name), tensor, tensor, opts);
}
Status allreduce(std::string name, TensorView input, TensorView output, AllreduceOptions opts) {
  std::string n = name;
  return submit_and_wait(coord::build_allreduce(std::move(name), input, output, opts), n,
                         opts.process_set);
}
Status grouped_allreduce(std::string name, std::vector<TensorView> tensors, AllreduceOptions opts) {
  std::string n = name;
  return submit_and_wait(coord::build_grouped_allreduce(std::move(name), std::move(tensors), opts),
                         n, opts.process_set);
}
Result<HostTensor> allgather(std::string name, TensorView input, const ProcessSet& process_set) {
  return output_of(allgather_async(std::move(name), input, {.process_set = process_set}));
}
Status broadcast(std::string name, TensorView tensor, int root, const ProcessSet& process_set) {
  std::string n = name;
  const BroadcastOptions opts{.root = root, .process_set = process_set};
  return submit_and_wait(coord::build_broadcast(std::move(name), tensor, opts, process_set.size()),
                         n, process_set);
}
Result<AlltoallResult> alltoall(std::string name, TensorView input, std::vector<int64_t> splits,
                                const ProcessSet& process_set) {
  Handle h = alltoall_async(std::move(name), input,
                            {.splits = std::move(splits), .process_set = process_set});
  KOLO_ASSIGN_OR_RETURN(HostTensor output, output_of(h));
  return AlltoallResult{std::move(output), h.received_splits()};
}
Result<HostTensor> reducescatter(std::string name, TensorView input, ReducescatterOptions opts) {
  return output_of(reducescatter_async(std::move(name), input, std::move(opts)));
}
Status barrier(std::string name) { return barrier(std::move(name), ProcessSet{}); }
Status barrier(std::string name, const ProcessSet& process_set) {
  std::string n = name;
  return submit_and_wait(coord::build_barrier(std::move(name)), n, process_set);
}
Result<int> join() {
  Handle h = join_async();
  KOLO_RETURN_IF_ERROR(h.wait());
  return h.last_joined_rank();
}

}  // namespace kolo

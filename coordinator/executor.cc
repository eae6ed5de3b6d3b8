#include "coordinator/executor.h"

#include <algorithm>
#include <cstring>

#include "common/text.h"
#include "coordinator/fusion.h"
#include "coordinator/identity.h"
#include "ops/reduce.h"
#include "timeline/trace_format.h"

namespace kolo::coord {

namespace {

int64_t row_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

}  // namespace

TimelineArgs operation_args(const std::vector<std::vector<int64_t>>& shapes, DataType dtype) {
  int64_t elements = 0;
  for (const auto& shape : shapes) elements += num_elements(shape);
  TimelineArgs args = {
      {"bytes", std::to_string(elements * static_cast<int64_t>(dtype_size(dtype)))},
      {"dtype", std::string(dtype_name(dtype))}};
  if (shapes.size() == 1) {
    args.emplace_back("shape", shape_string(shapes[0]));
  } else {
    args.emplace_back("members", std::to_string(shapes.size()));
  }
  return args;
}

Executor::Executor(Backend& backend, Timeline& timeline, std::string rows, Backend* gpu)
    : backend_(backend),
      timeline_(timeline),
      rows_(std::move(rows)),
      callbacks_row_(rows_ + std::string(trace_format::kCallbacksRow)),
      gpu_(gpu),
      device_(gpu && gpu->supports(Device::cuda(0)) ? dynamic_cast<DeviceBackend*>(gpu) : nullptr) {
}

std::string Executor::op_span(OpType type) const {
  return to_upper(backend().name()) + "_" + to_upper(op_type_name(type));
}

void Executor::begin(const std::vector<BatchItem>& batch, const std::string& phase,
                     TimelineArgs args) {
  if (!timeline_.active()) return;
  if (batch_spans_) {
    const BatchItem* first = nullptr;
    int tensors = 0;
    for (const auto& item : batch)
      if (item.entry && tensors++ == 0) first = &item;
    if (!first) return;
    args.emplace_back("tensors", std::to_string(tensors));
    timeline_.begin(first->entry->trace, phase, std::move(args));
    return;
  }
  for (const auto& item : batch)
    if (item.entry) timeline_.begin(item.entry->trace, phase, args);
}

void Executor::end(const std::vector<BatchItem>& batch, const Status& status) {
  // A device operation's spans end when the device finished it (finish_on_device).
  if (!timeline_.active() || deferred_) return;
  // Only a failed phase says so: the operation's span carries the final status anyway.
  const TimelineArgs args = status.ok() ? TimelineArgs{} : timeline_status_args(status);
  for (const auto& item : batch) {
    if (!item.entry) continue;
    timeline_.end(item.entry->trace, args);
    if (batch_spans_) return;  // begin() opened it in the first entry only
  }
}

void Executor::finish(const std::vector<BatchItem>& batch, const Status& outcome) {
  const Status status = !outcome.ok() && namer_ ? namer_(outcome) : outcome;
  if (deferred_) {
    finish_on_device(batch, status);
    return;
  }
  // Each operation's span ends before its handle completes: completing wakes the waiters and
  // runs the callbacks, which may begin the tensor's next operation at once, and what they do
  // is the caller's time, not Kolo's. Their time is a CALLBACK span on this Runtime's row of
  // callbacks, where completions follow one another (this thread runs them all).
  const bool traced = timeline_.active();
  if (traced) {
    const TimelineArgs outcome_args = timeline_status_args(status);
    const TimelineArgs batch_args = batch_span_args(batch);
    for (const auto& item : batch) {
      if (!item.entry) continue;
      TimelineArgs args = op_span_args(item, batch_args);
      args.insert(args.end(), outcome_args.begin(), outcome_args.end());
      timeline_.end_all(item.entry->trace, {}, args);
    }
  }
  for (const auto& item : batch) {
    if (!item.entry) continue;
    Entry& e = *item.entry;
    const uint64_t callback =
        traced && e.trace != 0
            ? timeline_.begin_op(callbacks_row_, trace_format::kCallbackPhase,
                                 {{std::string(trace_format::kTensorArg), rows_ + e.request.name},
                                  {std::string(trace_format::kOperationArg), e.trace_kind}})
            : 0;
    e.state->complete(status);
    timeline_.end(callback);
  }
}

TimelineArgs Executor::batch_span_args(const std::vector<BatchItem>& batch) const {
  TimelineArgs args = {{"backend", std::string(backend().name())},
                       {"fused", std::to_string(batch.size())}};
  if (batch.size() > 1) {
    uint64_t bytes = 0;
    for (const auto& b : batch) bytes += response_bytes(*b.response);
    args.emplace_back("fused_bytes", std::to_string(bytes));
  }
  return args;
}

TimelineArgs Executor::op_span_args(const BatchItem& item, const TimelineArgs& batch_args) {
  const Response& p = *item.response;
  TimelineArgs args = operation_args(p.shapes, p.dtype);
  args.insert(args.end(), batch_args.begin(), batch_args.end());
  return args;
}

void* Executor::allocate_output(Entry& entry, const std::vector<int64_t>& shape, DataType dtype,
                                Status& alloc_status) {
  size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  if (entry.allocator) {
    void* p = entry.allocator(shape, dtype);
    if (p == nullptr && bytes > 0)
      alloc_status = Status::InvalidArgument(
          std::string(op_type_name(entry.request.type)) + " '" + entry.request.name +
          "': the output allocator returned null for shape " + shape_string(shape));
    // On a device backend the output is checked and a failed one stands in on the device.
    if (deferred_ && bytes > 0) {
      void* out = device_output(entry, p, bytes, alloc_status);
      if (out == p) entry.state->set_output(shape, p);
      return out;
    }
    if (p == nullptr && bytes > 0)
      return scratch_.get(bytes);  // still take part, so the other ranks are not stranded
    entry.state->set_output(shape, p);
    return p;
  }
  HostTensor t;
  t.shape = shape;
  t.dtype = dtype;
  t.bytes.resize(bytes);
  entry.state->set_owned_output(std::move(t));  // moving a vector keeps its buffer
  return entry.state->output_data();
}

Status Executor::run(const std::vector<BatchItem>& batch) {
  const Response& head = *batch.front().response;
  active_ = gpu_ && head.device.is_cuda() ? gpu_ : &backend_;
  deferred_ = false;
  batch_spans_ = false;
  fence_status_ = Status::Ok();
  Status st = dispatch(batch);
  // A device operation that could not be launched in full strands the peers like a failed
  // call: the runtime must stop (device_backend.h, fence).
  return st.ok() ? fence_status_ : st;
}

Status Executor::dispatch(const std::vector<BatchItem>& batch) {
  const Response& head = *batch.front().response;
  if (head.kind == Response::Kind::kError) {
    Status error(head.error_code, head.error);
    // Shown where the user looks for it: on the tensor's own row.
    for (const auto& item : batch)
      if (item.entry && item.entry->trace != 0)
        timeline_.instant(rows_ + item.entry->request.name, "ERROR", timeline_status_args(error));
    finish(batch, error);
    return Status::Ok();
  }
  // A batch with no entry here (this rank joined) has nothing for the device: through_host()
  // refuses it on every rank, and there is no handle to fence.
  const bool has_entry =
      std::any_of(batch.begin(), batch.end(), [](const BatchItem& b) { return b.entry; });
  const bool on_device = active_ == gpu_ && device_ && has_entry && head.type != OpType::kBarrier &&
                         head.type != OpType::kJoin;
  batch_spans_ = on_device;
  // CPU tensors are ready by contract, so this span is empty for them; CUDA tensors' ready
  // events are waited on by their staging copies (MEMCPY_D2H), on a copy stream, or on the
  // device backend's stream (wait_ready).
  begin(batch, "WAIT_FOR_DATA");
  end(batch);
  if (on_device) {
    KOLO_RETURN_IF_ERROR(prepare_on_device(batch));
    deferred_ = true;  // reset by the next run()
  }
  Status st;
  switch (head.type) {
    case OpType::kAllreduce:
      return allreduce(batch);
    case OpType::kAllgather:
      return allgather(batch.front());
    case OpType::kBroadcast:
      return broadcast(batch.front());
    case OpType::kAlltoall:
      return alltoall(batch.front());
    case OpType::kReducescatter:
      return reducescatter(batch.front());
    case OpType::kBarrier:
      begin(batch, op_span(head.type));
      st = backend().barrier();
      end(batch, st);
      finish(batch, st);
      return st;
    case OpType::kJoin:
      for (const auto& item : batch)
        if (item.entry) item.entry->state->set_last_joined_rank(head.root);
      finish(batch, Status::Ok());
      return Status::Ok();
  }
  return Status::Internal("unknown op type");
}

const std::vector<AllreducePiece>& Executor::pieces_of(const std::vector<BatchItem>& batch) {
  pieces_.clear();
  for (const auto& item : batch)
    for (size_t k = 0; k < item.response->shapes.size(); ++k)
      pieces_.push_back({item.entry->inputs[k].data, item.entry->outputs[k].data,
                         num_elements(item.response->shapes[k])});
  return pieces_;
}

Status Executor::allreduce(const std::vector<BatchItem>& batch) {
  const Response& head = *batch.front().response;
  Result<bool> via_host = through_host(head);
  if (!via_host.ok()) {
    finish(batch, via_host.status());  // every rank fails it alike, before any backend call
    return Status::Ok();
  }
  const AllreducePlan plan(batch, backend().size(), timeline_.active());
  const bool cuda = *via_host;  // CUDA tensors the backend does not take
  if (exact_applies(head)) {
    if (Status refused = exact_refusal(head, cuda); !refused.ok()) {
      finish(batch, refused);
      return Status::Ok();
    }
    return allreduce_exact(plan, cuda);
  }

  // A backend that reads and writes the tensors where they are fuses a batch of several
  // without the fusion buffer (Note [Allreduce pieces] in backends/backend.h): shm on the host,
  // nccl through its device fusion buffer. Every rank decides alike (same backend, same
  // response); a batch that a rank joined keeps the buffer, which holds that rank's stand-in
  // identity (through_host() refused such batches on a device).
  const bool every_entry =
      std::all_of(batch.begin(), batch.end(), [](const BatchItem& b) { return b.entry; });
  if (!cuda && head.joined.empty() && every_entry && backend().has_allreduce_pieces() &&
      (batch.size() > 1 || head.shapes.size() > 1)) {
    begin(batch, op_span(OpType::kAllreduce), plan.args);
    const Status st = backend().allreduce_pieces(pieces_of(batch), head.dtype, head.reduction);
    end(batch, st);
    finish(batch, st);
    return st;
  }
  // The backend works on the caller's memory, no copy: a single tensor, or tensors on a
  // device other than the host, which the host fusion buffer cannot hold (one call each).
  if (!cuda &&
      (!head.device.is_cpu() || (batch.size() == 1 && batch[0].entry && head.shapes.size() == 1)))
    return allreduce_in_place(plan);
  return allreduce_fused(plan, cuda);
}

Executor::AllreducePlan::AllreducePlan(const std::vector<BatchItem>& b, int ranks, bool traced)
    : batch(b), head(*b.front().response) {
  const Reduction& reduction = head.reduction;
  // kAverage divides by every rank of the set, the joined ones included, which contribute
  // zeros (Horovod's join: Note [Join] in controller.cc): the backend sums and this rank
  // divides, by the rule of ops::finish_reduction (divide, then postscale; multiplying by
  // postscale / ranks would round the quotient).
  active = ranks;
  divide_here = reduction.op == ReduceOp::kAverage && !head.joined.empty();
  backend_op = divide_here ? ReduceOp::kSum : reduction.op;
  for (const auto& item : batch)
    for (const auto& shape : item.response->shapes) total += num_elements(shape);
  esize = dtype_size(head.dtype);
  if (!traced) return;
  args = {{"bytes", std::to_string(static_cast<size_t>(total) * esize)},
          {"dtype", std::string(dtype_name(head.dtype))},
          {"fused", std::to_string(batch.size())}};
}

Status Executor::allreduce_in_place(const AllreducePlan& plan) {
  const Response& head = plan.head;
  const Reduction& reduction = head.reduction;
  begin(plan.batch, op_span(OpType::kAllreduce), plan.args);
  const Reduction per_call{plan.backend_op, reduction.prescale,
                           plan.divide_here ? 1.0 : reduction.postscale};
  Status st;
  for (const auto& item : plan.batch) {
    const Entry& e = *item.entry;  // through_host() refused batches that a rank joined
    for (size_t k = 0; st.ok() && k < item.response->shapes.size(); ++k) {
      const int64_t n = num_elements(item.response->shapes[k]);
      st = backend().allreduce(e.inputs[k].data, e.outputs[k].data, n, head.dtype, per_call);
      if (st.ok() && plan.divide_here)
        ops::finish_reduction(head.dtype, reduction, e.outputs[k].data, n, plan.active);
    }
  }
  end(plan.batch, st);
  finish(plan.batch, st);
  return st;
}

Status Executor::allreduce_fused(const AllreducePlan& plan, bool cuda) {
  const size_t total_bytes = static_cast<size_t>(plan.total) * plan.esize;
  // CUDA tensors copy straight into the pinned fusion buffer; the scale factors are then
  // applied on the host copy.
  auto* buffer = static_cast<char*>(cuda ? host_buffer(CudaStaging::Slot::kFusion, total_bytes)
                                         : fusion_buffer_.get(total_bytes));
  begin(plan.batch, cuda ? "MEMCPY_D2H" : "MEMCPY_IN_FUSION");
  Status staged = copy_into_fusion(plan, buffer, cuda);
  end(plan.batch);
  // The prescale was applied in the copy-in, the postscale is applied in the copy-out.
  begin(plan.batch, op_span(OpType::kAllreduce), plan.args);
  Status st = backend().allreduce(buffer, buffer, plan.total, plan.head.dtype, {plan.backend_op});
  end(plan.batch, st);
  if (st.ok() && staged.ok()) {
    begin(plan.batch, cuda ? "MEMCPY_H2D" : "MEMCPY_OUT_FUSION");
    staged = copy_out_of_fusion(plan, buffer, cuda);
    end(plan.batch);
  }
  finish(plan.batch, st.ok() ? staged : st);
  return st;
}

Status Executor::copy_into_fusion(const AllreducePlan& plan, char* buffer, bool cuda) {
  const Response& head = plan.head;
  const size_t esize = plan.esize;
  Status staged = Status::Ok();
  int64_t offset = 0;
  for (const auto& item : plan.batch) {
    for (size_t k = 0; k < item.response->shapes.size(); ++k) {
      int64_t n = num_elements(item.response->shapes[k]);
      char* dst = buffer + offset * esize;
      if (!item.entry) {
        fill_identity(head.dtype, plan.backend_op, dst, n);
      } else if (cuda) {
        if (staged.ok())
          staged =
              staging_.copy_to_host(dst, item.entry->inputs[k], n * esize, item.response->name);
      } else {
        ops::scale_copy(head.dtype, dst, item.entry->inputs[k].data, n, head.reduction.prescale);
      }
      offset += n;
    }
  }
  if (!cuda) return staged;
  Status synced = staging_.synchronize();
  if (staged.ok()) staged = synced;
  offset = 0;
  for (const auto& item : plan.batch) {
    for (const auto& shape : item.response->shapes) {
      int64_t n = num_elements(shape);
      if (item.entry) ops::scale(head.dtype, buffer + offset * esize, n, head.reduction.prescale);
      offset += n;
    }
  }
  return staged;
}

Status Executor::copy_out_of_fusion(const AllreducePlan& plan, char* buffer, bool cuda) {
  const Response& head = plan.head;
  const Reduction& reduction = head.reduction;
  const size_t esize = plan.esize;
  if (plan.divide_here) ops::divide(head.dtype, buffer, plan.total, plan.active);  // then postscale
  if (cuda) ops::scale(head.dtype, buffer, plan.total, reduction.postscale);
  Status staged = Status::Ok();
  int64_t offset = 0;
  for (const auto& item : plan.batch) {
    for (size_t k = 0; k < item.response->shapes.size(); ++k) {
      int64_t n = num_elements(item.response->shapes[k]);
      char* src = buffer + offset * esize;
      if (item.entry && cuda) {
        if (staged.ok())
          staged =
              staging_.copy_to_device(item.entry->outputs[k], src, n * esize, item.response->name);
      } else if (item.entry) {
        ops::scale_copy(head.dtype, item.entry->outputs[k].data, src, n, reduction.postscale);
      }
      offset += n;
    }
  }
  if (cuda) {
    Status synced = staging_.synchronize();
    if (staged.ok()) staged = synced;
  }
  return staged;
}

Status Executor::allgather(const BatchItem& item) {
  const Response& p = *item.response;
  const auto& shape = p.shapes.at(0);
  const int64_t row = row_elements(shape);
  std::vector<int64_t> counts;
  int64_t rows = 0;
  for (int64_t d : p.rank_dims) {
    counts.push_back(d * row);
    rows += d;
  }
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = rows;
  const size_t bytes = static_cast<size_t>(rows * row) * dtype_size(p.dtype);
  Status alloc = Status::Ok();
  void* out =
      item.entry ? allocate_output(*item.entry, out_shape, p.dtype, alloc) : scratch_.get(bytes);
  const size_t in_bytes = item.entry ? item.entry->inputs[0].num_bytes() : 0;
  return run_single(
      item, in_bytes, out, bytes, alloc, {{"bytes", std::to_string(bytes)}},
      [&](const void* in, void* o) { return backend().allgather(in, o, p.dtype, counts); });
}

Status Executor::broadcast(const BatchItem& item) {
  const Response& p = *item.response;
  const int64_t n = num_elements(p.shapes.at(0));
  const size_t bytes = static_cast<size_t>(n) * dtype_size(p.dtype);
  Entry* e = item.entry;
  std::vector<BatchItem> batch{item};
  Result<bool> via_host = through_host(p);
  if (!via_host.ok()) {
    finish(batch, via_host.status());
    return Status::Ok();
  }
  const bool cuda = e && *via_host;
  const bool root = backend().rank() == p.root;
  void* data = e ? e->inputs[0].data : scratch_.get(bytes);
  Status staged = Status::Ok();
  if (cuda) {
    data = host_buffer(CudaStaging::Slot::kInput, bytes);
    if (root) {
      begin(batch, "MEMCPY_D2H");
      staged = stage_in(data, e->inputs[0], bytes, p.name);
      end(batch);
    }
  }
  begin(batch, op_span(p.type), {{"bytes", std::to_string(bytes)}});
  Status st = backend().broadcast(data, n, p.dtype, p.root);
  end(batch, st);
  if (cuda && !root && st.ok()) {
    begin(batch, "MEMCPY_H2D");
    staged = stage_out(e->inputs[0], data, bytes, p.name);
    end(batch);
  }
  finish(batch, st.ok() ? staged : st);
  return st;
}

Status Executor::alltoall(const BatchItem& item) {
  const Response& p = *item.response;
  const int size = backend().size(), me = backend().rank();
  const auto& shape = p.shapes.at(0);
  const int64_t row = row_elements(shape);
  std::vector<int64_t> send_counts, recv_counts, received;
  int64_t rows = 0;
  for (int j = 0; j < size; ++j) {
    send_counts.push_back(p.rank_dims.at(static_cast<size_t>(me) * size + j) * row);
    int64_t r = p.rank_dims.at(static_cast<size_t>(j) * size + me);
    received.push_back(r);
    recv_counts.push_back(r * row);
    rows += r;
  }
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = rows;
  Status alloc = Status::Ok();
  void* out = allocate_output(*item.entry, out_shape, p.dtype, alloc);
  item.entry->state->set_received_splits(received);
  const size_t out_bytes = static_cast<size_t>(rows * row) * dtype_size(p.dtype);
  return run_single(item, item.entry->inputs[0].num_bytes(), out, out_bytes, alloc, {},
                    [&](const void* in, void* o) {
                      return backend().alltoall(in, o, p.dtype, send_counts, recv_counts);
                    });
}

Status Executor::reducescatter(const BatchItem& item) {
  const Response& p = *item.response;
  const int size = backend().size(), me = backend().rank();
  const auto& shape = p.shapes.at(0);
  const int64_t row = row_elements(shape);
  std::vector<int64_t> counts;
  std::vector<int64_t> rows = p.rank_dims;  // caller-given receive counts, else the even split
  if (rows.empty())
    for (int r = 0; r < size; ++r) rows.push_back(shape[0] / size + (r < shape[0] % size ? 1 : 0));
  for (int r = 0; r < size; ++r) counts.push_back(rows.at(r) * row);
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = rows.at(me);
  Status alloc = Status::Ok();
  void* out = allocate_output(*item.entry, out_shape, p.dtype, alloc);
  const size_t out_bytes = static_cast<size_t>(counts[me]) * dtype_size(p.dtype);
  const bool exact = exact_applies(p);
  if (exact) {
    Result<bool> via_host = through_host(p);
    Status refused = via_host.ok() ? exact_refusal(p, *via_host) : Status::Ok();
    if (!refused.ok()) {
      std::vector<BatchItem> batch{item};
      finish(batch, refused);
      return Status::Ok();
    }
  }
  return run_single(item, item.entry->inputs[0].num_bytes(), out, out_bytes, alloc, {},
                    [&](const void* in, void* o) {
                      if (exact) return reducescatter_exact(in, o, p, counts);
                      return backend().reducescatter(in, o, p.dtype, p.reduction, counts);
                    });
}

void Executor::reduce_gathered(const BatchItem& item, const std::vector<const void*>& inputs) {
  active_ = &backend_;  // host data, gathered with the negotiation
  deferred_ = false;
  const Response& p = *item.response;
  const int64_t n = num_elements(p.shapes.at(0));
  const size_t bytes = static_cast<size_t>(n) * dtype_size(p.dtype);
  std::vector<BatchItem> batch{item};
  begin(batch, "PIGGYBACK_REDUCE", {{"bytes", std::to_string(bytes)}});
  // The inputs were copied into the negotiation buffer, so the output may alias the input.
  void* out = item.entry ? item.entry->outputs[0].data : scratch_.get(bytes);
  const Reduction& reduction = p.reduction;
  if (exact_applies(p)) {
    reduce_gathered_exactly(p, inputs, out, n);
    end(batch);
    finish(batch, Status::Ok());
    return;
  }
  ops::scale_copy(p.dtype, out, inputs[0], n, reduction.prescale);
  for (size_t r = 1; r < inputs.size(); ++r) {
    const void* in = inputs[r];
    if (reduction.prescale != 1.0) {
      void* scaled = prescaled_.get(bytes);
      ops::scale_copy(p.dtype, scaled, in, n, reduction.prescale);
      in = scaled;
    }
    ops::reduce_into(p.dtype, reduction.op, out, in, n);
  }
  ops::finish_reduction(p.dtype, reduction, out, n, static_cast<int>(inputs.size()));
  end(batch);
  finish(batch, Status::Ok());
}

}  // namespace kolo::coord

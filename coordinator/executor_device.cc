// Executor: operations on CUDA tensors that a device backend (nccl) runs on its own stream.
#include "coordinator/executor.h"

namespace kolo::coord {

namespace {

// "allreduce 'grad/w'" (and " and 3 more" for a fused batch): how the backend names it.
std::string describe(const std::vector<BatchItem>& batch) {
  const Response& head = *batch.front().response;
  std::string what = std::string(op_type_name(head.type)) + " '" + head.name + "'";
  if (batch.size() > 1) what += " and " + std::to_string(batch.size() - 1) + " more";
  return what;
}

}  // namespace

Status Executor::prepare_on_device(const std::vector<BatchItem>& batch) {
  const Response& head = *batch.front().response;
  const bool allocates = head.type == OpType::kAllgather || head.type == OpType::kAlltoall ||
                         head.type == OpType::kReducescatter;
  Status st;
  for (const auto& item : batch) {
    const Entry* e = item.entry;
    if (!e) continue;  // a joined rank: through_host() refuses the batch on every rank
    const std::string what =
        std::string(op_type_name(head.type)) + " '" + item.response->name + "'";
    if (allocates && !e->allocator)
      st = Status::InvalidArgument(what + ": CUDA tensors on backend " + std::string(gpu_->name()) +
                                   " need an output allocator that returns memory on " +
                                   e->inputs[0].device.to_string() +
                                   " (without one the output is a HostTensor in host memory)");
    for (size_t k = 0; st.ok() && k < e->inputs.size(); ++k) {
      const TensorView& in = e->inputs[k];
      st = device_->wait_ready(in.device, in.num_elements() > 0 ? in.data : nullptr, in.ready_event,
                               what);
      if (st.ok() && k < e->outputs.size() && e->outputs[k].data != in.data)
        st = device_->wait_ready(e->outputs[k].device,
                                 e->outputs[k].num_elements() > 0 ? e->outputs[k].data : nullptr,
                                 e->outputs[k].ready_event, what + " (output)");
    }
    if (!st.ok()) break;
  }
  if (st.ok()) return st;
  // This rank cannot take part: its handles fail now, and the runtime stops (see executor.h).
  deferred_ = true;
  finish(batch, st);
  deferred_ = false;
  return st;
}

// Note [Device spans per batch]
// With the timeline on, a GPU step of ResNet-50's 161 gradients took twice as long as without
// it (issue 32): the step is about 1 ms of host work per fused batch, and each tensor added its
// own spans for every phase (WAIT_FOR_DATA, the backend's NCCL_ALLREDUCE), each a begin and an
// end under the timeline's lock, the ends on the watchdog thread before the handles complete,
// and its args were built with a pass over the whole batch (quadratic). There are no CUDA
// events per span to pool: the backend records one completion event per operation (fence), with
// or without a timeline. So a device batch records its phases once, on the first entry's
// operation, with "tensors" (the batch's entries) in their args; every tensor's operation span
// (ALLREDUCE...) is still recorded on its own row, with its own bytes, shape and status and the
// batch's fused and fused_bytes, and still ends when the device finished the batch. A viewer
// thus sees the device time of the batch once, on its first tensor's row, and each tensor's
// operation across it.
void Executor::finish_on_device(const std::vector<BatchItem>& batch, const Status& status) {
  std::vector<std::shared_ptr<detail::OpState>> states;
  for (const auto& item : batch)
    if (item.entry) states.push_back(item.entry->state);
  // The traced entries' open spans (the backend's phase, the operation) end when the device
  // finished the operation, not now that it is queued: the trace shows the GPU time. Their
  // operations hold their rows until then; the tensor's name is free again, and its next
  // operation begins on a sibling row (Note [Timeline rows]).
  struct Spans {
    uint64_t op;
    TimelineArgs op_args;
  };
  std::vector<Spans> spans;
  if (timeline_.active()) {
    const TimelineArgs batch_args = batch_span_args(batch);
    for (const auto& item : batch)
      if (item.entry && item.entry->trace != 0)
        spans.push_back({item.entry->trace, op_span_args(item, batch_args)});
  }
  // The Runtime declares its Timeline before its GPU backend: the backend's last done
  // callbacks (its destructor fails what is left) still find it.
  Timeline* timeline = &timeline_;
  // The fence also ends the backend's operation after a failed call; the handles then get
  // that failure rather than the (irrelevant) completion of whatever was queued. The event is
  // published before the backend registers the operation (op_state.h: set before it can
  // complete), so a caller never sees a completed GPU handle without its event.
  fence_status_ = device_->fence(
      describe(batch),
      [&states](const std::shared_ptr<void>& event) {
        for (const auto& s : states) s->set_completion_event(event);
      },
      [states, status, spans = std::move(spans), timeline](const Status& done) {
        const Status outcome = status.ok() ? done : status;
        // The spans first: a waiter that complete() wakes may stop the timeline.
        // The operation's span always carries the outcome; the backend's phase only a failure.
        const TimelineArgs outcome_args = timeline_status_args(outcome);
        const TimelineArgs failed = outcome.ok() ? TimelineArgs{} : outcome_args;
        for (const Spans& s : spans) {
          TimelineArgs op = s.op_args;
          op.insert(op.end(), outcome_args.begin(), outcome_args.end());
          timeline->end_all(s.op, failed, op);
        }
        for (const auto& s : states) s->complete(outcome);
      });
}

void* Executor::device_output(Entry& entry, void* allocated, size_t bytes, Status& alloc_status) {
  const std::string what =
      std::string(op_type_name(entry.request.type)) + " '" + entry.request.name + "'";
  const Device device = entry.inputs[0].device;
  if (allocated != nullptr) {
    // The backend writes it on the device: host memory there would be an illegal address,
    // which ends the CUDA context for every later operation.
    Status checked = device_->wait_ready(device, allocated, nullptr, what + " (output)");
    if (checked.ok()) return allocated;
    alloc_status = checked;
  }
  // Still take part, so the other ranks are not stranded: into device memory of the backend.
  Result<void*> stand_in = device_->stand_in(bytes, what);
  if (!stand_in.ok()) {
    if (alloc_status.ok()) alloc_status = stand_in.status();
    return nullptr;  // the backend refuses a null buffer: an error, not a crash
  }
  return *stand_in;
}

}  // namespace kolo::coord

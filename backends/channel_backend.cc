#include "backends/channel_backend.h"

#include <cstring>

#include "common/knobs.h"

namespace kolo {

ops::AllreduceTuning allreduce_tuning(const KnobSet& knobs) {
  ops::AllreduceTuning t;
  t.small_message_bytes = knobs.size(KnobId::kRingThreshold);
  t.segment_bytes = knobs.size(KnobId::kRingSegment);
  t.rank_order = knobs.boolean(KnobId::kDeterministic);
  return t;
}

ChannelBackend::ChannelBackend(std::string name, std::unique_ptr<ops::Channel> channel,
                               ops::AllreduceTuning tuning)
    : name_(std::move(name)), channel_(std::move(channel)), tuning_(tuning) {
  // The knob accepts no 0, but a caller's hand-made tuning might hold one: the ring needs
  // segments of at least one byte.
  if (tuning_.segment_bytes == 0)
    init_status_ = Status::InvalidArgument(
        "backend " + name_ + ": the backend's tuning.segment_bytes must be > 0, got 0");
}

Status ChannelBackend::tag(Status status) const {
  if (status.ok()) return status;
  return status.with_context("backend " + name_);
}

Status ChannelBackend::do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                                    const Reduction& reduction) {
  KOLO_RETURN_IF_ERROR(init_status_);
  if (count > 0 && input != output)
    std::memcpy(output, input, static_cast<size_t>(count) * dtype_size(dtype));
  return tag(ops::allreduce(*channel_, output, count, dtype, reduction, workspace_, tuning_));
}

Status ChannelBackend::do_allgather(const void* input, void* output, DataType dtype,
                                    const std::vector<int64_t>& counts) {
  KOLO_RETURN_IF_ERROR(init_status_);
  return tag(ops::allgatherv(*channel_, input, output, counts, dtype));
}

Status ChannelBackend::do_broadcast(void* data, int64_t count, DataType dtype, int root) {
  KOLO_RETURN_IF_ERROR(init_status_);
  return tag(ops::broadcast(*channel_, data, count, dtype, root));
}

Status ChannelBackend::do_alltoall(const void* input, void* output, DataType dtype,
                                   const std::vector<int64_t>& send_counts,
                                   const std::vector<int64_t>& recv_counts) {
  KOLO_RETURN_IF_ERROR(init_status_);
  return tag(ops::alltoallv(*channel_, input, send_counts, output, recv_counts, dtype));
}

Status ChannelBackend::do_reducescatter(const void* input, void* output, DataType dtype,
                                        const Reduction& reduction,
                                        const std::vector<int64_t>& counts) {
  KOLO_RETURN_IF_ERROR(init_status_);
  return tag(ops::reducescatter(*channel_, input, output, counts, dtype, reduction, workspace_,
                                tuning_.rank_order));
}

Status ChannelBackend::do_barrier() {
  KOLO_RETURN_IF_ERROR(init_status_);
  return tag(ops::barrier(*channel_));
}

}  // namespace kolo

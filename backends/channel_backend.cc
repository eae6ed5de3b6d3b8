#include "backends/channel_backend.h"

#include <cstring>

#include "common/knobs.h"

namespace kolo {

namespace {

ops::ReduceSpec spec_of(DataType dtype, ReduceOp op, double prescale, double postscale) {
  return ops::ReduceSpec{dtype, op, prescale, postscale};
}

}  // namespace

Result<ops::AllreduceTuning> allreduce_tuning_from_env(ops::AllreduceTuning base) {
  KOLO_ASSIGN_OR_RETURN(KnobSet knobs, KnobSet::from_process_env());
  if (knobs.is_set(KnobId::kRingThreshold))
    base.small_message_bytes = knobs.size(KnobId::kRingThreshold);
  if (knobs.is_set(KnobId::kRingSegment)) base.segment_bytes = knobs.size(KnobId::kRingSegment);
  return base;
}

ChannelBackend::ChannelBackend(std::string name, std::unique_ptr<ops::Channel> channel,
                               ops::AllreduceTuning tuning)
    : name_(std::move(name)), channel_(std::move(channel)), tuning_(tuning) {
  Result<ops::AllreduceTuning> t = allreduce_tuning_from_env(tuning);
  if (t.ok())
    tuning_ = t.value();
  else
    init_status_ = t.status().with_context("backend " + name_);
}

Status ChannelBackend::tag(Status status) const {
  if (status.ok() || status.code() == StatusCode::kInvalidArgument) return status;
  return status.with_context("backend " + name_);
}

Status ChannelBackend::allreduce(const void* input, void* output, int64_t count, DataType dtype,
                                 const AllreduceOptions& options) {
  KOLO_RETURN_IF_ERROR(init_status_);
  KOLO_RETURN_IF_ERROR(validate_allreduce(size(), input, output, count, dtype, options));
  if (count > 0 && input != output)
    std::memcpy(output, input, static_cast<size_t>(count) * dtype_size(dtype));
  return tag(ops::allreduce(*channel_, output, count,
                            spec_of(dtype, options.op, options.prescale, options.postscale),
                            workspace_, tuning_));
}

Status ChannelBackend::allgather(const void* input, void* output, DataType dtype,
                                 const AllgatherOptions& options) {
  KOLO_RETURN_IF_ERROR(init_status_);
  KOLO_RETURN_IF_ERROR(validate_allgather(rank(), size(), input, output, dtype, options));
  return tag(ops::allgatherv(*channel_, input, output, options.counts, dtype));
}

Status ChannelBackend::broadcast(void* data, int64_t count, DataType dtype,
                                 const BroadcastOptions& options) {
  KOLO_RETURN_IF_ERROR(init_status_);
  KOLO_RETURN_IF_ERROR(validate_broadcast(size(), data, count, dtype, options));
  return tag(ops::broadcast(*channel_, data, count, dtype, options.root));
}

Status ChannelBackend::alltoall(const void* input, void* output, DataType dtype,
                                const AlltoallOptions& options) {
  KOLO_RETURN_IF_ERROR(init_status_);
  KOLO_RETURN_IF_ERROR(validate_alltoall(size(), input, output, dtype, options));
  return tag(
      ops::alltoallv(*channel_, input, options.send_counts, output, options.recv_counts, dtype));
}

Status ChannelBackend::reducescatter(const void* input, void* output, DataType dtype,
                                     const ReducescatterOptions& options) {
  KOLO_RETURN_IF_ERROR(init_status_);
  KOLO_RETURN_IF_ERROR(validate_reducescatter(rank(), size(), input, output, dtype, options));
  return tag(ops::reducescatter(*channel_, input, output, options.counts,
                                spec_of(dtype, options.op, options.prescale, options.postscale),
                                workspace_));
}

Status ChannelBackend::barrier() {
  KOLO_RETURN_IF_ERROR(init_status_);
  return tag(ops::barrier(*channel_));
}

}  // namespace kolo

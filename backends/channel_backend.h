// ChannelBackend: a Backend whose collectives are the ops/ algorithms run over one
// point-to-point ops::Channel. The tcp and shm backends (and tests, over thread channels) are
// a ChannelBackend around their own Channel.
//
// Every collective validates its arguments with the validate_* helpers of backend.h before
// anything is sent. allreduce with input != output copies the input into the output first
// and reduces there; kAverage is a sum divided by size(), then postscale.
//
// Tuning: the AllreduceTuning given to the constructor, overridden by the knobs
// KOLO_RING_THRESHOLD and KOLO_RING_SEGMENT when set (common/knob_table.cc). An invalid
// KOLO_* value is reported as InvalidArgument, naming the variable, by every collective (the
// constructor cannot fail), and by init_status().
//
// Thread-safety: one thread at a time (as every Backend). Owns the channel and a workspace
// that is reused across calls, so steady state allocates no buffers.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "backends/backend.h"
#include "ops/channel.h"
#include "ops/collectives.h"

namespace kolo {

class ChannelBackend : public Backend {
 public:
  ChannelBackend(std::string name, std::unique_ptr<ops::Channel> channel,
                 ops::AllreduceTuning tuning = {});

  std::string_view name() const override { return name_; }
  int rank() const override { return channel_->rank(); }
  int size() const override { return channel_->size(); }

  Status allreduce(const void* input, void* output, int64_t count, DataType dtype,
                   const AllreduceOptions& options) override;
  Status allgather(const void* input, void* output, DataType dtype,
                   const AllgatherOptions& options) override;
  Status broadcast(void* data, int64_t count, DataType dtype,
                   const BroadcastOptions& options) override;
  Status alltoall(const void* input, void* output, DataType dtype,
                  const AlltoallOptions& options) override;
  Status reducescatter(const void* input, void* output, DataType dtype,
                       const ReducescatterOptions& options) override;
  Status barrier() override;

  // OK, or the error from reading the tuning variables.
  const Status& init_status() const { return init_status_; }
  const ops::AllreduceTuning& tuning() const { return tuning_; }
  ops::Channel& channel() { return *channel_; }

 private:
  // Adds the backend's name to an error from the algorithms.
  Status tag(Status status) const;

  const std::string name_;
  const std::unique_ptr<ops::Channel> channel_;
  ops::AllreduceTuning tuning_;
  Status init_status_;
  ops::Workspace workspace_;
};

// Applies KOLO_RING_THRESHOLD and KOLO_RING_SEGMENT (when set) to `base`. Errors are
// KnobSet::read's: any invalid KOLO_* variable, named with its value and the accepted form.
Result<ops::AllreduceTuning> allreduce_tuning_from_env(ops::AllreduceTuning base);

}  // namespace kolo

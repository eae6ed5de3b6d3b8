// ChannelBackend: a Backend whose collectives are the ops/ algorithms run over one
// point-to-point ops::Channel. The tcp backend (and tests, over thread channels) is
// a ChannelBackend around its own Channel.
//
// Backend validates the arguments before any do_* runs, so the algorithms get valid ones
// only. allreduce with input != output copies the input into the output first and reduces
// there.
//
// Tuning: the AllreduceTuning given to the constructor, which a factory reads from the job's
// knobs KOLO_RING_THRESHOLD, KOLO_RING_SEGMENT and KOLO_DETERMINISTIC (allreduce_tuning(
// *context.knobs); with the last, allreduce and reducescatter reduce in rank order); by
// default the registry's defaults. A segment size of 0 given to the constructor is reported as
// InvalidArgument, naming it, by every collective (the constructor cannot fail), and by
// init_status().
//
// Thread-safety: one thread at a time (as every Backend). Owns the channel and a workspace
// that is reused across calls, so steady state allocates no buffers.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "common/knobs.h"
#include "ops/channel.h"
#include "ops/collectives.h"

namespace kolo {

// The allreduce tuning of the ring knobs KOLO_RING_THRESHOLD and KOLO_RING_SEGMENT and of
// KOLO_DETERMINISTIC in `knobs` (their rows guarantee a segment > 0).
ops::AllreduceTuning allreduce_tuning(const KnobSet& knobs);

class ChannelBackend : public Backend {
 public:
  ChannelBackend(std::string name, std::unique_ptr<ops::Channel> channel,
                 ops::AllreduceTuning tuning = allreduce_tuning(KnobSet::defaults()));

  std::string_view name() const override { return name_; }
  int rank() const override { return channel_->rank(); }
  int size() const override { return channel_->size(); }

  // OK, or InvalidArgument for a tuning the algorithms cannot run (a segment of 0 bytes).
  const Status& init_status() const { return init_status_; }
  const ops::AllreduceTuning& tuning() const { return tuning_; }
  ops::Channel& channel() { return *channel_; }

 protected:
  Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                      const Reduction& reduction) override;
  Status do_allgather(const void* input, void* output, DataType dtype,
                      const std::vector<int64_t>& counts) override;
  Status do_broadcast(void* data, int64_t count, DataType dtype, int root) override;
  Status do_alltoall(const void* input, void* output, DataType dtype,
                     const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& recv_counts) override;
  Status do_reducescatter(const void* input, void* output, DataType dtype,
                          const Reduction& reduction, const std::vector<int64_t>& counts) override;
  Status do_barrier() override;

 private:
  // Adds the backend's name to an error from the algorithms.
  Status tag(Status status) const;

  const std::string name_;
  const std::unique_ptr<ops::Channel> channel_;
  ops::AllreduceTuning tuning_;
  Status init_status_;
  ops::Workspace workspace_;
};

}  // namespace kolo

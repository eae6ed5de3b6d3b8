// Executor: runs one fused batch of responses on the data backend and completes the handles.
//
// Per batch: wait for the data (CUDA ready events), copy into the persistent fusion buffer
// with the prescale fused into the copy (skipped for a single tensor: the backend works on
// the caller's memory directly), one backend call, copy out with the postscale fused in,
// then every entry's callbacks. A rank that had joined has no entry for a response; it
// contributes the reduction's identity (or zero rows) and discards the result.
// Each phase is a timeline span on the tensor's track.
//
// Not thread-safe: the background thread's.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"
#include "coordinator/entry.h"
#include "coordinator/message.h"
#include "ops/collectives.h"
#include "timeline/timeline.h"

namespace kolo::coord {

struct BatchItem {
  const Response* response;
  Entry* entry;  // null when this rank had joined (or has no such entry)
};

class Executor {
 public:
  Executor(Backend& backend, Timeline& timeline) : backend_(backend), timeline_(timeline) {}

  // Runs the batch and completes each entry's handle. Returns a non-OK Status only when the
  // backend failed: the ranks may then be out of step, and the runtime must stop.
  Status run(const std::vector<BatchItem>& batch);

 private:
  Status allreduce(const std::vector<BatchItem>& batch);
  Status allgather(const BatchItem& item);
  Status broadcast(const BatchItem& item);
  Status alltoall(const BatchItem& item);
  Status reducescatter(const BatchItem& item);
  // The backend op's timeline name, e.g. "TCP_ALLREDUCE".
  std::string op_span(OpType type) const;
  void begin(const std::vector<BatchItem>& batch, const std::string& phase,
             TimelineArgs args = {});
  void end(const std::vector<BatchItem>& batch);
  // Allocates an output through the entry's allocator or as an owned HostTensor. Returns
  // null (and fails the entry later) when the allocator returns null.
  void* allocate_output(Entry& entry, const std::vector<int64_t>& shape, DataType dtype,
                        Status& alloc_status);
  void finish(const std::vector<BatchItem>& batch, const Status& status);

  Backend& backend_;
  Timeline& timeline_;
  ops::Workspace fusion_buffer_;  // persistent: grows to the largest batch and stays
  ops::Workspace scratch_;        // joined ranks' stand-in buffers
};

}  // namespace kolo::coord

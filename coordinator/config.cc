#include "coordinator/config.h"

#include <algorithm>

#include "common/logging.h"
#include "kolo/units.h"

namespace kolo::coord {

RuntimeConfig config_from_knobs(const KnobSet& knobs, const std::string& default_cpu_operations) {
  RuntimeConfig c;
  c.cpu_operations = knobs.is_set(KnobId::kCpuOperations) ? knobs.text(KnobId::kCpuOperations)
                                                          : default_cpu_operations;
  c.fusion_threshold = knobs.size(KnobId::kFusionThreshold);
  c.cycle_time = knobs.duration(KnobId::kCycleTime);
  c.cache_capacity = static_cast<uint64_t>(knobs.integer(KnobId::kCacheCapacity));
  c.timeline_path = knobs.text(KnobId::kTimeline);
  c.timeline_mark_cycles = knobs.boolean(KnobId::kTimelineMarkCycles);
  if (knobs.is_set(KnobId::kTimelineSteps)) c.timeline_steps = knobs.range(KnobId::kTimelineSteps);
  c.stall_check_time = knobs.duration(KnobId::kStallCheckTime);
  c.stall_shutdown_time = knobs.duration(KnobId::kStallShutdownTime);
  c.op_timeout = knobs.duration(KnobId::kOpTimeout);
  // The heartbeat must stay well inside the op timeout (a waiting peer would otherwise time
  // out on an idle one) and fine enough for the stall inspector to be punctual.
  auto hb = std::chrono::nanoseconds(std::chrono::milliseconds(200));
  hb = std::min(hb, c.op_timeout / 4);
  if (c.stall_check_time.count() > 0) hb = std::min(hb, c.stall_check_time / 4);
  if (c.stall_shutdown_time.count() > 0) hb = std::min(hb, c.stall_shutdown_time / 4);
  c.heartbeat = std::max(hb, std::chrono::nanoseconds(std::chrono::milliseconds(1)));

  KOLO_LOG_DEBUG("config: KOLO_FUSION_THRESHOLD=" << format_size(c.fusion_threshold)
                 << " KOLO_CYCLE_TIME=" << format_duration(c.cycle_time)
                 << " KOLO_CACHE_CAPACITY=" << c.cache_capacity
                 << " KOLO_STALL_CHECK_TIME=" << format_duration(c.stall_check_time)
                 << " KOLO_STALL_SHUTDOWN_TIME=" << format_duration(c.stall_shutdown_time)
                 << " KOLO_OP_TIMEOUT=" << format_duration(c.op_timeout)
                 << " KOLO_CPU_OPERATIONS=" << c.cpu_operations
                 << " KOLO_TIMELINE=" << c.timeline_path);
  return c;
}

}  // namespace kolo::coord

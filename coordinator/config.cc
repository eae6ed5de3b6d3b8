#include "coordinator/config.h"

#include <algorithm>

#include "backends/registry.h"
#include "common/logging.h"
#include "kolo/units.h"

namespace kolo::coord {

namespace {

// Every categorical tunable of the registry, in registry order; fixed where the user set it.
std::vector<CategoricalTunable> categorical_tunables(const KnobSet& knobs) {
  std::vector<CategoricalTunable> out;
  for (const Knob& k : all_knobs()) {
    if (!is_categorical_tunable(k)) continue;
    CategoricalTunable t{k.id, knob_choices(k)};
    const std::string value =
        k.kind == KnobKind::kBool ? (knobs.boolean(k) ? "1" : "0") : knobs.text(k);
    t.initial = static_cast<size_t>(std::find(t.choices.begin(), t.choices.end(), value) -
                                    t.choices.begin());
    t.fixed = knobs.is_set(k);
    // Deterministic mode fixes the order of summation; the hierarchy would change it.
    if (k.id == KnobId::kHierarchicalAllreduce && knobs.boolean(KnobId::kDeterministic))
      t.fixed = true;
    out.push_back(std::move(t));
  }
  return out;
}

// The heartbeat must stay well inside the op timeout (a waiting peer would otherwise time out
// on an idle one) and fine enough for the stall and mismatch inspectors to be punctual.
std::chrono::nanoseconds heartbeat_for(const RuntimeConfig& c) {
  std::chrono::nanoseconds hb = std::chrono::milliseconds(200);
  hb = std::min(hb, c.op_timeout / 4);
  for (auto bound : {c.stall_check_time, c.stall_shutdown_time, c.mismatch_time})
    if (bound.count() > 0) hb = std::min(hb, bound / 4);
  return std::max(hb, std::chrono::nanoseconds(std::chrono::milliseconds(1)));
}

}  // namespace

Result<RuntimeConfig> config_from_knobs(const KnobSet& knobs,
                                        const std::string& default_cpu_operations) {
  RuntimeConfig c;
  c.cpu_operations = knobs.is_set(KnobId::kCpuOperations) ? knobs.text(KnobId::kCpuOperations)
                                                          : default_cpu_operations;
  // A backend that takes no CPU tensors (nccl) cannot be the CPU backend: the control plane
  // and every CPU tensor would have nowhere to go.
  if (Result<const BackendEntry*> cpu = find_backend(c.cpu_operations);
      cpu.ok() && !(*cpu)->handles(Device::cpu()))
    return Status::InvalidArgument("KOLO_CPU_OPERATIONS=" + c.cpu_operations + ": backend " +
                                   c.cpu_operations +
                                   " takes no CPU tensors; use it as KOLO_GPU_OPERATIONS");
  if (knobs.is_set(KnobId::kGpuOperations)) c.gpu_operations = knobs.text(KnobId::kGpuOperations);
  c.hierarchical_allreduce = knobs.boolean(KnobId::kHierarchicalAllreduce);
  c.hierarchical_allgather = knobs.boolean(KnobId::kHierarchicalAllgather);
  c.deterministic = knobs.boolean(KnobId::kDeterministic);
  c.exact_reduction = knobs.text(KnobId::kReduction) == "exact";
  // Summing within each host and then across hosts is an order of its own, not rank order.
  if (c.deterministic && c.hierarchical_allreduce)
    return Status::InvalidArgument(
        "KOLO_DETERMINISTIC=1 and KOLO_HIERARCHICAL_ALLREDUCE=1 cannot be combined: the "
        "hierarchical allreduce sums within each host first, so its order of summation is not "
        "rank order; unset one of them (docs/determinism.md)");
  c.fusion_threshold = knobs.size(KnobId::kFusionThreshold);
  c.cycle_time = knobs.duration(KnobId::kCycleTime);
  c.cache_capacity = static_cast<uint64_t>(knobs.integer(KnobId::kCacheCapacity));
  c.timeline_path = knobs.text(KnobId::kTimeline);
  c.timeline_mark_cycles = knobs.boolean(KnobId::kTimelineMarkCycles);
  if (knobs.is_set(KnobId::kTimelineSteps)) c.timeline_steps = knobs.range(KnobId::kTimelineSteps);
  c.stall_check_time = knobs.duration(KnobId::kStallCheckTime);
  c.stall_shutdown_time = knobs.duration(KnobId::kStallShutdownTime);
  c.mismatch_time = knobs.duration(KnobId::kMismatchTime);
  c.op_timeout = knobs.duration(KnobId::kOpTimeout);
  c.heartbeat = heartbeat_for(c);

  AutotuneConfig& a = c.autotune;
  a.enabled = knobs.boolean(KnobId::kAutotune);
  a.log_path = knobs.text(KnobId::kAutotuneLog);
  a.continuous = knobs.boolean(KnobId::kAutotuneContinuous);
  a.samples = static_cast<int>(knobs.integer(KnobId::kAutotuneSamples));
  a.max_steps = static_cast<int>(knobs.integer(KnobId::kAutotuneSteps));
  a.fusion_min = knobs.size(KnobId::kAutotuneFusionFrom);
  a.fusion_max = knobs.size(KnobId::kAutotuneFusionTo);
  a.cycle_min = knobs.duration(KnobId::kAutotuneCycleFrom);
  a.cycle_max = knobs.duration(KnobId::kAutotuneCycleTo);
  a.bucket_min = knobs.size(KnobId::kAutotuneBucketFrom);
  a.bucket_max = knobs.size(KnobId::kAutotuneBucketTo);
  a.fusion_fixed = knobs.is_set(KnobId::kFusionThreshold);
  a.cycle_fixed = knobs.is_set(KnobId::kCycleTime);
  a.categorical = categorical_tunables(knobs);
  for (auto [lo, hi] : {std::pair{KnobId::kAutotuneFusionFrom, KnobId::kAutotuneFusionTo},
                        std::pair{KnobId::kAutotuneCycleFrom, KnobId::kAutotuneCycleTo},
                        std::pair{KnobId::kAutotuneBucketFrom, KnobId::kAutotuneBucketTo}}) {
    const bool is_size = knob(lo).kind == KnobKind::kSize;
    const bool inverted =
        is_size ? knobs.size(lo) > knobs.size(hi) : knobs.duration(lo) > knobs.duration(hi);
    if (inverted)
      return Status::InvalidArgument(std::string(knob(lo).name) + "=" + knobs.raw(lo) +
                                     " exceeds " + std::string(knob(hi).name) + "=" +
                                     knobs.raw(hi) + ": the autotuner's range is empty");
  }

  KOLO_LOG_DEBUG("config: KOLO_FUSION_THRESHOLD="
                 << format_size(c.fusion_threshold) << " KOLO_CYCLE_TIME="
                 << format_duration(c.cycle_time) << " KOLO_CACHE_CAPACITY=" << c.cache_capacity
                 << " KOLO_STALL_CHECK_TIME=" << format_duration(c.stall_check_time)
                 << " KOLO_STALL_SHUTDOWN_TIME=" << format_duration(c.stall_shutdown_time)
                 << " KOLO_MISMATCH_TIME=" << format_duration(c.mismatch_time)
                 << " KOLO_OP_TIMEOUT=" << format_duration(c.op_timeout) << " KOLO_CPU_OPERATIONS="
                 << c.cpu_operations << " KOLO_GPU_OPERATIONS=" << c.gpu_operations
                 << " KOLO_HIERARCHICAL_ALLREDUCE=" << c.hierarchical_allreduce
                 << " KOLO_HIERARCHICAL_ALLGATHER=" << c.hierarchical_allgather
                 << " KOLO_DETERMINISTIC=" << c.deterministic
                 << " KOLO_REDUCTION=" << (c.exact_reduction ? "exact" : "default")
                 << " KOLO_TIMELINE=" << c.timeline_path);
  return c;
}

}  // namespace kolo::coord

// RuntimeConfig: the coordinator's typed view of its knobs (common/knobs.h), filled once at init
// by config_from_knobs. A member read from a knob has no default of its own (zero or empty until
// filled): its default is written in the registry row only. Code that builds a config by hand
// (tests) starts from config_from_knobs(KnobSet::defaults(), ...).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/knobs.h"
#include "kolo/status.h"

namespace kolo::coord {

// A categorical knob the autotuner may switch: one the registry marks tunable and of a kBool
// or kChoice kind (is_categorical_tunable, common/knobs.h).
struct CategoricalTunable {
  KnobId id;
  std::vector<std::string_view> choices;  // knob_choices(): "0", "1" for a bool
  size_t initial = 0;                     // the index of the value at init
  // Not searched: the user set it, or this job cannot switch it (Runtime::create decides:
  // e.g. no hierarchy to switch to).
  bool fixed = true;
};

// The autotuner's knobs (KOLO_AUTOTUNE*; coordinator/autotune.h). Ranges are inclusive and
// checked (min <= max) by config_from_knobs.
struct AutotuneConfig {
  bool enabled = false;     // KOLO_AUTOTUNE
  std::string log_path;     // KOLO_AUTOTUNE_LOG; empty: no CSV
  bool continuous = false;  // KOLO_AUTOTUNE_CONTINUOUS
  int samples = 0;          // KOLO_AUTOTUNE_SAMPLES
  int max_steps = 0;        // KOLO_AUTOTUNE_STEPS: the search's budget
  // KOLO_AUTOTUNE_{FUSION,CYCLE,BUCKET}_{FROM,TO}
  uint64_t fusion_min = 0, fusion_max = 0;
  std::chrono::nanoseconds cycle_min{0}, cycle_max{0};
  uint64_t bucket_min = 0, bucket_max = 0;
  // Knobs the user set are fixed at their value and left out of the search.
  bool fusion_fixed = false;
  bool cycle_fixed = false;
  // Every categorical tunable of the registry, in registry order (so the same list on every
  // rank); fixed unless the user left it unset.
  std::vector<CategoricalTunable> categorical;
};

struct RuntimeConfig {
  // KOLO_FUSION_THRESHOLD: allreduce responses that agree in dtype, device and options are
  // fused into one backend call up to this many bytes. 0 disables fusion.
  uint64_t fusion_threshold = 0;
  // KOLO_CYCLE_TIME, the batching window: while work is pending, cycles start at most this
  // often, so that submissions arriving close together are negotiated (and fused) together.
  std::chrono::nanoseconds cycle_time{0};
  // Piggy-back (Note [Piggy-back] in runtime.cc): small cached allreduces travel inside the
  // negotiation message, saving the data round, up to this many bytes per rank and cycle.
  // Only in jobs of at most piggyback_max_ranks ranks, where gathering every rank's message
  // costs no more steps than allreducing it. 0 turns it off.
  uint64_t piggyback_bytes = 1024;
  int piggyback_max_ranks = 4;
  // KOLO_CACHE_CAPACITY: names remembered by the response cache (the bit vector has one byte
  // per entry).
  uint64_t cache_capacity = 0;
  std::string timeline_path;          // KOLO_TIMELINE; empty: no timeline at init
  bool timeline_mark_cycles = false;  // KOLO_TIMELINE_MARK_CYCLES
  // KOLO_TIMELINE_STEPS: record only steps [first, end) of kolo::mark_step()'s count; unset:
  // from init to the end.
  std::optional<KnobRange> timeline_steps;
  std::chrono::nanoseconds stall_check_time{0};     // KOLO_STALL_CHECK_TIME; 0: off
  std::chrono::nanoseconds stall_shutdown_time{0};  // KOLO_STALL_SHUTDOWN_TIME; 0: off
  // KOLO_MISMATCH_TIME (Note [Mismatched collectives], controller.cc); 0: off. A point-to-point
  // pair's Runtime turns it off: a send legitimately waits for a recv posted much later.
  std::chrono::nanoseconds mismatch_time{0};
  // KOLO_OP_TIMEOUT: bound on any one transfer (and so on how long a dead peer takes to be
  // noticed).
  std::chrono::nanoseconds op_timeout{0};
  // KOLO_CPU_OPERATIONS, or the launcher's default backend when it is unset.
  std::string cpu_operations;
  // KOLO_HIERARCHICAL_ALLREDUCE: init() builds the data plane as the hierarchical composite
  // (backends/hierarchical/hierarchical_backend.h), and hosts of unequal rank counts fail it.
  bool hierarchical_allreduce = false;
  // KOLO_HIERARCHICAL_ALLGATHER: the same composite, allgathers through it (set_hierarchical_
  // allgather); either knob builds it, and each switches its own collective.
  bool hierarchical_allgather = false;
  // KOLO_DETERMINISTIC: every reduction's result depends only on the ranks' inputs and their
  // number (Note [Deterministic reduction] in ops/deterministic.cc). The backends read the knob
  // themselves (create_backend refuses one that cannot honour it); config_from_knobs refuses
  // KOLO_HIERARCHICAL_ALLREDUCE=1 beside it and keeps the autotuner from switching that on.
  bool deterministic = false;
  // KOLO_REDUCTION=exact: float sums and averages are correctly rounded exact sums (Note [Exact
  // reduction] in ops/exact.cc), computed by the executor over any backend.
  bool exact_reduction = false;
  // KOLO_GPU_OPERATIONS as set; empty when unset (gpu_backend_choice picks the default).
  std::string gpu_operations;
  // An idle rank still takes part in a cycle this often, so that rank 0's stall inspector
  // and shutdown requests make progress while some ranks have no work. Derived from the
  // timeouts by config_from_knobs (at most 200 ms).
  std::chrono::nanoseconds heartbeat{0};
  AutotuneConfig autotune;
  // When set, the background loop passes its failure through this before every operation
  // ends with it (api.cc: FailureBoard::name_first_failure, so that the error names the rank
  // that failed first in the job, not the link this rank saw break).
  std::function<Status(const Status&)> name_first_failure;
  // When set, what happened to a rank that shut the session down while this rank still has
  // operations to fail: it left without kolo::shutdown() (api.cc: Departures::describe, Note
  // [Departures]), or nullopt when it called kolo::shutdown(). May wait, seconds at most.
  // `rank` is this Runtime's: a process set's or pair's config maps it to the job's rank.
  std::function<std::optional<std::string>(int rank)> describe_departure;
  // When set (the global set of an elastic job), rank 0 tells it the ranks its stall inspector
  // gave up on (StallConfig::on_shutdown).
  std::function<void(const std::vector<int>& stuck)> report_stuck;
  // A process set's Runtime (coordinator/process_sets.h): what its messages call it, e.g.
  // "process set 1". Empty for the global set.
  std::string label;
  // What a member calls to close it, for the message its other members get then.
  std::string closed_by = "remove_process_set() or shutdown()";
  // How messages name this Runtime's ranks (Controller): rank_names[r] for rank r; empty:
  // their numbers. A point-to-point pair's Runtime names its two ranks by their job ranks.
  std::vector<int> rank_names;
};

// The coordinator's knobs from `knobs` (each already validated by KnobSet::read).
// `default_cpu_operations` is the backend when KOLO_CPU_OPERATIONS is unset (init passes the
// launcher's default: LaunchedWorld::default_backend). InvalidArgument for what involves two
// knobs: an autotune range whose minimum exceeds its maximum (naming both variables), and a
// CPU backend that takes no CPU tensors.
Result<RuntimeConfig> config_from_knobs(const KnobSet& knobs,
                                        const std::string& default_cpu_operations);

}  // namespace kolo::coord

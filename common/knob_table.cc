// Every core KOLO_* knob, declared once. Adding one: a KnobId in knobs.h, a row here in the same
// place, a reader (RuntimeConfig, ChannelBackend's tuning), and `kolorun --print-config=markdown`
// into README.md (a unit test compares them). A backend's own knob (KOLO_<BACKEND>_*) is a row
// in its folder instead (backends/<name>/<name>_knobs.cc; common/knobs.h says how it gets here).
#include <climits>
#include <set>
#include <vector>

#include "common/build_info.h"
#include "common/enforce.h"
#include "common/knobs.h"

namespace kolo {
namespace {

// In LogLevel's order: logging.cc maps a name to the level by its position.
std::span<const std::string_view> log_levels() {
  static constexpr std::string_view kNames[] = {"trace",   "debug", "info",
                                                "warning", "error", "off"};
  return kNames;
}

// KOLO_REDUCTION's values; "exact" is Note [Exact reduction] (ops/exact.cc).
std::span<const std::string_view> reduction_modes() {
  static constexpr std::string_view kNames[] = {"default", "exact"};
  return kNames;
}

constexpr int64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10, kTiB = kGiB << 10;
constexpr int64_t kNsPerSecond = 1'000'000'000;

using enum KnobKind;
using enum KnobCategory;
using enum KnobChange;
using enum KnobScope;

constexpr std::array<Knob, kKnobCount> kTable = {{
    {.id = KnobId::kCpuOperations,
     .name = "KOLO_CPU_OPERATIONS",
     .kind = kChoice,
     .category = kCore,
     .scope = kJob,
     // No default_text: the default depends on the launcher and the hosts (launched_world()).
     .default_doc = "`shm` when every rank is on one host, else `tcp` (`mpi` under `mpirun`)",
     .choices = &built_backends,
     .help = "backend for CPU tensors: one of the backends of this build"},
    {.id = KnobId::kGpuOperations,
     .name = "KOLO_GPU_OPERATIONS",
     .kind = kChoice,
     .category = kCore,
     .scope = kJob,
     // No default_text: the default depends on the build and the GPUs (gpu_backend_choice()).
     .default_doc = "`nccl` when the build has NCCL and each rank of the host sees a GPU of its "
                    "own, else CUDA tensors are staged through host memory to the CPU backend",
     .choices = &built_backends,
     .help = "backend for CUDA tensors: `nccl` on the GPU, or a CPU backend through host memory"},
    // Measured (kolo-bench fusion, ResNet-50's gradients, 2 ranks, docs/benchmarks.md): 4 MiB
    // was as fast as 16 and 64 MiB on tcp and 15-20x faster than 64 MiB on mpi, whose
    // large-message path is slow here; 4 MiB buffers are already far past the size where
    // per-call latency matters.
    {.id = KnobId::kFusionThreshold,
     .name = "KOLO_FUSION_THRESHOLD",
     .kind = kSize,
     .category = kCore,
     .change = kTunableAtRuntime,
     .scope = kJob,
     .default_text = "4MiB",
     .help = "largest fused allreduce buffer; `0` turns fusion off"},
    {.id = KnobId::kCycleTime,
     .name = "KOLO_CYCLE_TIME",
     .kind = kDuration,
     .category = kCore,
     .change = kTunableAtRuntime,
     .default_text = "1ms",
     .help = "batching window of the background thread"},
    {.id = KnobId::kCacheCapacity,
     .name = "KOLO_CACHE_CAPACITY",
     .kind = kInteger,
     .category = kCore,
     .scope = kJob,
     .default_text = "1024",
     .max = 1 << 24,
     .help = "response-cache entries; `0` disables the cache"},
    {.id = KnobId::kTimeline,
     .name = "KOLO_TIMELINE",
     .kind = kText,
     .category = kCore,
     .default_doc = "off",
     .help =
         "write a Chrome trace (JSON) per rank to this path (`{rank}` is replaced by the rank)"},
    {.id = KnobId::kTimelineMarkCycles,
     .name = "KOLO_TIMELINE_MARK_CYCLES",
     .kind = kBool,
     .category = kCore,
     .default_text = "0",
     .help = "add a marker per background cycle to the timeline"},
    {.id = KnobId::kTimelineSteps,
     .name = "KOLO_TIMELINE_STEPS",
     .kind = kRange,
     .category = kCore,
     .default_doc = "every step",
     .help = "record the timeline only from step `FIRST` to `END-1` (`kolo::mark_step()` counts "
             "steps from 0), e.g. `100:120`"},
    {.id = KnobId::kStallCheckTime,
     .name = "KOLO_STALL_CHECK_TIME",
     .kind = kDuration,
     .category = kCore,
     .default_text = "60s",
     .help = "warn about tensors some ranks never submitted after this long; `0` turns it off"},
    {.id = KnobId::kStallShutdownTime,
     .name = "KOLO_STALL_SHUTDOWN_TIME",
     .kind = kDuration,
     .category = kCore,
     .default_text = "0",
     .default_doc = "off",
     .help = "fail the job after a stall this long: tensors some ranks never submitted, or a "
             "frozen rank; `0` turns it off"},
    // Note [Mismatched collectives] in coordinator/controller.cc. Longer than a rank normally
    // computes with an operation outstanding while its peers wait in another one.
    {.id = KnobId::kMismatchTime,
     .name = "KOLO_MISMATCH_TIME",
     .kind = kDuration,
     .category = kCore,
     .default_text = "10s",
     .help = "fail the pending operations on every rank, naming each rank's, when every rank has "
             "waited this long in operations that no other rank submitted (mismatched "
             "collectives); `0` turns it off"},
    {.id = KnobId::kOpTimeout,
     .name = "KOLO_OP_TIMEOUT",
     .kind = kDuration,
     .category = kCore,
     .default_text = "60s",
     .min = 1,
     .help = "a transfer that makes no progress this long fails; on mpi, an MPI call not "
             "complete after this long ends the job (MPI_Abort, exit code 62)"},
    // One bound for every wait of the rendezvous, so that the user's `kolorun --timeout`
    // reaches the ranks (issue 27): kolorun's own store connect and node gathering, each rank's
    // store connect and knob agreement, and every backend's connect (BackendContext::
    // connect_timeout). 5 min: nodes started by hand, one after another, still meet.
    {.id = KnobId::kRendezvousTimeout,
     .name = "KOLO_RENDEZVOUS_TIMEOUT",
     .kind = kDuration,
     .category = kCore,
     .default_text = "5min",
     .min = 1'000'000,                     // 1 ms: the waits are counted in milliseconds
     .max = 7 * 24 * 3600 * kNsPerSecond,  // the store server's clamp (tcp_store_protocol.h)
     .help = "how long the rendezvous waits: to connect to the store, for the other nodes and "
             "ranks at start, for the backends' peers; kolorun's `--timeout` sets it"},
    {.id = KnobId::kLogLevel,
     .name = "KOLO_LOG_LEVEL",
     .kind = kChoice,
     .category = kCore,
     .default_text = "warning",
     .choices = &log_levels,
     .help = "least severe log lines printed; `info` also echoes the variables set"},
    {.id = KnobId::kProcessSets,
     .name = "KOLO_PROCESS_SETS",
     .kind = kRankSets,
     .category = kCore,
     .scope = kJob,
     .default_doc = "none",
     .help = "process sets that `kolo::init()` adds (ids 1, 2, ... in this order; "
             "`kolo::process_sets()` returns them), e.g. `0,1;2,3`"},
    // Tunable and a kBool: a categorical dimension of the autotuner's search, in a job of
    // several hosts of equal rank counts that left it unset (Note [Hierarchical allreduce]).
    {.id = KnobId::kHierarchicalAllreduce,
     .name = "KOLO_HIERARCHICAL_ALLREDUCE",
     .kind = kBool,
     .category = kCore,
     .change = kTunableAtRuntime,
     .scope = kJob,
     .default_text = "0",
     .help = "allreduce in three stages on jobs of several hosts: reduce-scatter within each "
             "host (shm), allreduce across hosts between ranks of the same local rank, allgather "
             "within each host; `1` needs the same number of ranks on every host"},
    // Fixed at init: training allgathers little, so the autotuner leaves it to the user.
    {.id = KnobId::kHierarchicalAllgather,
     .name = "KOLO_HIERARCHICAL_ALLGATHER",
     .kind = kBool,
     .category = kCore,
     .scope = kJob,
     .default_text = "0",
     .help = "allgather in three stages on jobs of several hosts: within each host, one shard "
             "of each host's data across hosts per local rank, within each host again; "
             "`1` needs the same number of ranks on every host"},
    {.id = KnobId::kElasticResetLimit,
     .name = "KOLO_ELASTIC_RESET_LIMIT",
     .kind = kInteger,
     .category = kCore,
     .scope = kRank,
     .default_text = "100",
     .min = 0,
     .max = INT_MAX,
     .help = "how many times kolo::elastic::run() re-forms the world before it gives up and "
             "returns the failure (an elastic job, kolorun --min-np/--max-np)"},
    // Note [Deterministic reduction] (ops/deterministic.cc). Job-wide: ranks that disagree
    // would run different algorithms on the same buffers.
    {.id = KnobId::kDeterministic,
     .name = "KOLO_DETERMINISTIC",
     .kind = kBool,
     .category = kCore,
     .scope = kJob,
     .default_text = "0",
     .help = "every allreduce and reducescatter sums each element over the ranks in rank order, "
             "so a result depends on the ranks' inputs and their number only (not on fusion, "
             "timing, tuning or the backend, tcp or shm); backends that cannot (mpi, nccl) "
             "refuse it at init (docs/determinism.md)"},
    // Note [Exact reduction] (ops/exact.cc). Its own knob, not a value of KOLO_DETERMINISTIC:
    // the two combine (exact sums; min, max, product in rank order). Job-wide: every rank must
    // send the accumulators.
    {.id = KnobId::kReduction,
     .name = "KOLO_REDUCTION",
     .kind = kChoice,
     .category = kCore,
     .scope = kJob,
     .default_text = "default",
     .choices = &reduction_modes,
     .help = "`exact`: every float sum and average allreduce is the correctly rounded exact sum "
             "of the ranks' values (a superaccumulator; independent of order, rank count and "
             "backend; 14x the bytes for float32); `default`: floating-point sums "
             "(docs/determinism.md)"},
    // Test-only: shakes up the order in which ranks' tensors become ready, so tests can show
    // that results do not depend on it (docs/determinism.md). Per rank: each may differ.
    {.id = KnobId::kTestSubmitDelay,
     .name = "KOLO_TEST_SUBMIT_DELAY",
     .kind = kDuration,
     .category = kCore,
     .scope = kRank,
     .default_text = "0",
     .default_doc = "off",
     .help = "test-only: before each operation it submits, a rank sleeps a pseudo-random time "
             "up to this long (seeded by its rank and a count of its submissions); `0` turns it "
             "off"},
    // The autotuner (coordinator/autotune.h). Each range bounds one searched dimension; a
    // minimum above its maximum is an error at init (config_from_knobs).
    {.id = KnobId::kAutotune,
     .name = "KOLO_AUTOTUNE",
     .kind = kBool,
     .category = kCore,
     .scope = kJob,
     .default_text = "0",
     .help = "tune fusion threshold, cycle time, gradient bucket size and, on several hosts, the "
             "hierarchical allreduce while the job trains"},
    {.id = KnobId::kAutotuneLog,
     .name = "KOLO_AUTOTUNE_LOG",
     .kind = kText,
     .category = kCore,
     .default_doc = "off",
     .help = "rank 0 writes one CSV row per configuration the autotuner measured to this file"},
    {.id = KnobId::kAutotuneContinuous,
     .name = "KOLO_AUTOTUNE_CONTINUOUS",
     .kind = kBool,
     .category = kCore,
     .default_text = "0",
     .help = "after converging, search again near the best when the step time changes for good"},
    {.id = KnobId::kAutotuneSamples,
     .name = "KOLO_AUTOTUNE_SAMPLES",
     .kind = kInteger,
     .category = kCore,
     .default_text = "3",
     .min = 1,
     .max = 1000,
     .help = "steps measured per configuration (after one warm-up step); their median scores it"},
    // The search's budget (Note [Autotune search]): issue 30 wants a tuner settled within 100
    // training steps; the last change then applies at most 5 steps after the budget.
    {.id = KnobId::kAutotuneSteps,
     .name = "KOLO_AUTOTUNE_STEPS",
     .kind = kInteger,
     .category = kCore,
     .default_text = "90",
     .min = 30,
     .max = 1000000,
     .help = "training steps the autotuner's search may take, its final check included; it then "
             "settles (each searched choice of a categorical knob adds half as many)"},
    {.id = KnobId::kAutotuneFusionFrom,
     .name = "KOLO_AUTOTUNE_FUSION_FROM",
     .kind = kSize,
     .category = kCore,
     .default_text = "64KiB",
     .min = 1,
     .help = "smallest fusion threshold the autotuner tries (it also tries `0`, no fusion)"},
    {.id = KnobId::kAutotuneFusionTo,
     .name = "KOLO_AUTOTUNE_FUSION_TO",
     .kind = kSize,
     .category = kCore,
     .default_text = "64MiB",
     .min = 1,
     .help = "largest fusion threshold the autotuner tries"},
    {.id = KnobId::kAutotuneCycleFrom,
     .name = "KOLO_AUTOTUNE_CYCLE_FROM",
     .kind = kDuration,
     .category = kCore,
     .default_text = "100us",
     .min = 1,
     .help = "shortest cycle time the autotuner tries"},
    {.id = KnobId::kAutotuneCycleTo,
     .name = "KOLO_AUTOTUNE_CYCLE_TO",
     .kind = kDuration,
     .category = kCore,
     .default_text = "8ms",
     .min = 1,
     .help = "longest cycle time the autotuner tries"},
    {.id = KnobId::kAutotuneBucketFrom,
     .name = "KOLO_AUTOTUNE_BUCKET_FROM",
     .kind = kSize,
     .category = kCore,
     .default_text = "64KiB",
     .min = 1,
     .help = "smallest gradient bucket the autotuner tries (it also tries `0`, one per gradient)"},
    {.id = KnobId::kAutotuneBucketTo,
     .name = "KOLO_AUTOTUNE_BUCKET_TO",
     .kind = kSize,
     .category = kCore,
     .default_text = "64MiB",
     .min = 1,
     .help = "largest gradient bucket the autotuner tries"},
    // Channel backends (ops::AllreduceTuning; defaults measured, docs/benchmarks.md). The one
    // rule of the merged pair: the segment is > 0 bytes; the threshold may be 0 (every
    // non-empty allreduce takes the ring).
    {.id = KnobId::kRingThreshold,
     .name = "KOLO_RING_THRESHOLD",
     .kind = kSize,
     .category = kChannelBackend,
     .scope = kJob,
     .default_text = "64KiB",
     .help =
         "allreduces up to this size use recursive doubling, larger ones the ring; `0`: always the "
         "ring"},
    {.id = KnobId::kRingSegment,
     .name = "KOLO_RING_SEGMENT",
     .kind = kSize,
     .category = kChannelBackend,
     .scope = kJob,
     .default_text = "256KiB",
     .min = 1,
     .help = "the ring pipelines each chunk in segments of this size (reduce one while sending "
             "the next)"},
    // Set by kolorun for each rank (world.h says how they relate).
    {.id = KnobId::kRank,
     .name = "KOLO_RANK",
     .kind = kInteger,
     .category = kLauncher,
     .max = INT_MAX,
     .help = "this process's rank"},
    {.id = KnobId::kSize,
     .name = "KOLO_SIZE",
     .kind = kInteger,
     .category = kLauncher,
     .min = 1,
     .max = INT_MAX,
     .help = "ranks in the job"},
    {.id = KnobId::kLocalRank,
     .name = "KOLO_LOCAL_RANK",
     .kind = kInteger,
     .category = kLauncher,
     .max = INT_MAX,
     .help = "rank on this node"},
    {.id = KnobId::kLocalSize,
     .name = "KOLO_LOCAL_SIZE",
     .kind = kInteger,
     .category = kLauncher,
     .min = 1,
     .max = INT_MAX,
     .help = "ranks on this node"},
    {.id = KnobId::kCrossRank,
     .name = "KOLO_CROSS_RANK",
     .kind = kInteger,
     .category = kLauncher,
     .max = INT_MAX,
     .help = "this node's rank"},
    {.id = KnobId::kCrossSize,
     .name = "KOLO_CROSS_SIZE",
     .kind = kInteger,
     .category = kLauncher,
     .min = 1,
     .max = INT_MAX,
     .help = "nodes in the job"},
    {.id = KnobId::kStoreAddr,
     .name = "KOLO_STORE_ADDR",
     .kind = kText,
     .category = kLauncher,
     .help = "HOST:PORT of the rendezvous store"},
    {.id = KnobId::kSecret,
     .name = "KOLO_SECRET",
     .kind = kText,
     .category = kLauncher,
     .help = "the job's shared secret"},
    {.id = KnobId::kSecretFile,
     .name = "KOLO_SECRET_FILE",
     .kind = kText,
     .category = kLauncher,
     .help = "a file holding the job's shared secret, private to its owner (mode 600): read "
             "under srun when KOLO_SECRET is unset (docs/clusters.md)"},
    {.id = KnobId::kElasticWorker,
     .name = "KOLO_ELASTIC_WORKER",
     .kind = kInteger,
     .category = kLauncher,
     .max = INT64_MAX,
     .help = "this process's worker id in an elastic job, instead of KOLO_RANK (Note [Elastic "
             "rendezvous] in rendezvous/elastic_plan.h)"},
}};

constexpr bool in_id_order() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<size_t>(kTable[i].id) != i) return false;
  return true;
}
static_assert(in_id_order(), "knob_table.cc's rows must follow KnobId's order");

// The pairs that two parsers used to read with different rules; merged into the ring knobs.
// (The tcp backend's old names of the same pair are its own: backends/tcp/tcp_knobs.cc.)
constexpr RetiredKnob kRetired[] = {
    {"KOLO_SEGMENT_BYTES", "KOLO_RING_SEGMENT"},
    {"KOLO_SMALL_MESSAGE_BYTES", "KOLO_RING_THRESHOLD"},
};

// The core's rows, then each backend's (built_backend_knobs(): the build's backends that declare
// rows), checked once: unique names, and no backend row that the autotuner could switch (it
// addresses the knobs it tunes by KnobId, TuneDecision).
struct Registry {
  std::vector<Knob> rows;
  std::vector<RetiredKnob> retired;

  Registry()
      : rows(kTable.begin(), kTable.end()), retired(std::begin(kRetired), std::end(kRetired)) {
    for (const BackendKnobs& b : built_backend_knobs()) {
      for (const Knob* k : b.rows) {
        KOLO_ENFORCE(
            k->category == KnobCategory::kBackend && !k->backend.empty() && k->id == KnobId::kCount,
            k->name << ": a backend's row has category kBackend, its backend's name and "
                       "no KnobId");
        KOLO_ENFORCE(k->change == KnobChange::kFixedAtInit,
                     k->name << ": a backend's row cannot be tunable at run time");
        rows.push_back(*k);
      }
      retired.insert(retired.end(), b.retired.begin(), b.retired.end());
    }
    std::set<std::string_view> names;
    for (const Knob& k : rows)
      KOLO_ENFORCE(names.insert(k.name).second, k.name << " is declared twice");
    for (const RetiredKnob& r : retired)
      KOLO_ENFORCE(names.count(r.name) == 0 && names.count(r.replacement) == 1,
                   r.name << " is retired for " << r.replacement
                          << ", which must be a row (and the old name not one)");
  }
};

const Registry& registry() {
  static const Registry kRegistry;
  return kRegistry;
}

}  // namespace

std::span<const Knob> all_knobs() { return registry().rows; }
std::span<const RetiredKnob> retired_knobs() { return registry().retired; }

}  // namespace kolo

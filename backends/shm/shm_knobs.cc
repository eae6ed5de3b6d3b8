// The shm backend's rows of the knob registry (see shm_knobs.h). Data only: this file is
// compiled into kolo_common, so it may include nothing of the backend but its own header.
#include "backends/shm/shm_knobs.h"

namespace kolo {

namespace {

constexpr int64_t kKiB = 1024, kGiB = kKiB << 20;

}  // namespace

namespace shm_knobs {

constexpr Knob kChunk = {
    .name = "KOLO_SHM_CHUNK",
    .kind = KnobKind::kSize,
    .category = KnobCategory::kBackend,
    .backend = "shm",
    .scope = KnobScope::kJob,
    .default_text = "512KiB",
    .min = 4 * kKiB,
    .max = kGiB,
    .help =
        "bytes of each of a rank's two staging buffers in the shm segment; larger "
        "collectives run in chunks of this size",
};
constexpr Knob kThreshold = {
    .name = "KOLO_SHM_THRESHOLD",
    .kind = KnobKind::kSize,
    .category = KnobCategory::kBackend,
    .backend = "shm",
    .scope = KnobScope::kJob,
    .default_text = "32KiB",
    .max = kGiB,
    .help =
        "shm allreduces up to this size reduce in one round straight out of every rank's "
        "buffer, larger ones by reduce-scatter + allgather",
};

// Rank scope: streaming changes how a rank writes its own output, not what any rank computes.
constexpr Knob kStreamThreshold = {
    .name = "KOLO_SHM_STREAM_THRESHOLD",
    .kind = KnobKind::kSize,
    .category = KnobCategory::kBackend,
    .backend = "shm",
    .default_text = "16MiB",
    .max = int64_t{1} << 62,
    .help =
        "shm allreduces of at least this size write results into an output other than their "
        "input with streaming stores, which skip reading each output line first; about half "
        "the last-level cache (a result that large has left the cache by the time the caller "
        "reads it)",
};

}  // namespace shm_knobs

BackendKnobs backend_knobs_shm() {
  static constexpr const Knob* kRows[] = {&shm_knobs::kChunk, &shm_knobs::kThreshold,
                                          &shm_knobs::kStreamThreshold};
  return {kRows};
}

}  // namespace kolo

// The shm backend's knobs (KOLO_SHM_*): rows of the knob registry (common/knobs.h) that this
// folder declares. shm_knobs.cc is data only and is compiled into the registry's library
// (kolo_backend(shm ... KNOBS ...)), so kolorun and the README's table see these rows without
// linking the backend; the backend reads their values from the KnobSet that init() parsed
// (BackendContext::knobs). Defaults are written in the rows only. Rank 0's values are the job's
// (it sizes the segment), and those two are job-wide knobs that init() compares across the
// ranks; KOLO_SHM_STREAM_THRESHOLD is a rank's own.
//
// Thread-safety: constants.
#pragma once

#include "common/knobs.h"

namespace kolo {

namespace shm_knobs {
extern const Knob kChunk;      // KOLO_SHM_CHUNK: bytes of each of a rank's two staging buffers
extern const Knob kThreshold;  // KOLO_SHM_THRESHOLD: largest one-round allreduce
extern const Knob kStreamThreshold;  // KOLO_SHM_STREAM_THRESHOLD: smallest streamed allreduce
}  // namespace shm_knobs

// The rows above, for the registry (common/build_info.h).
BackendKnobs backend_knobs_shm();

}  // namespace kolo

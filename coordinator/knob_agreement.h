// Knob agreement: the job-wide knobs (KnobScope::kJob in common/knob_table.cc) must hold the
// same value on every rank, or the ranks run different collectives. Measured before this check
// existed (2 ranks, the main job): KOLO_FUSION_THRESHOLD=0 on one rank made the tcp backend
// reduce a 131072-element buffer against a 535818-element one and training went on with wrong
// gradients; a different KOLO_RING_THRESHOLD counted 350 test images out of 256; a different
// KOLO_CACHE_CAPACITY failed as "malformed response list". So init() runs this first, through
// the rendezvous store, before any backend connects (a different KOLO_CPU_OPERATIONS would never
// connect at all).
//
// Protocol: every rank publishes its values under `prefix`/knobs/<rank>; rank 0 reads them all,
// decides, and publishes the verdict; every other rank waits for the verdict. So all ranks fail
// with the same message (or none does), and rank 0 reads N keys while the others read two.
//
// Thread-safety: free functions; the store is thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/knobs.h"
#include "kolo/status.h"
#include "rendezvous/store.h"

namespace kolo::coord {

// One rank's job-wide values as a message: a line per kJob knob, "NAME\tcanonical\tshown",
// where `shown` is how the user wrote it (with " (default)" when unset). `effective` replaces
// the value of knobs whose value is decided at init rather than read (KOLO_CPU_OPERATIONS's
// default depends on the launcher and the hosts), by variable name.
std::string job_knobs_message(const KnobSet& knobs,
                              const std::vector<std::pair<KnobId, std::string>>& effective = {});

// The verdict on every rank's message (by_rank[r] from rank r): empty when they agree, else one
// sentence per knob that differs, naming the variable and each value with its ranks, e.g.
// "KOLO_FUSION_THRESHOLD differs between ranks: 4MiB (default) on ranks 0, 2-3; 0 on rank 1".
// A message that does not parse counts as a disagreement naming the rank (a rank of another
// Kolo version).
std::string knob_disagreement(const std::vector<std::string>& by_rank);

// Collective over the job's ranks through `store` (every rank calls it with its own message).
// Ok when every rank's message is the same; InvalidArgument with the verdict on every rank when
// they differ; Timeout naming the keys of the ranks that published nothing within `timeout`
// of rank 0's arrival (on every rank), or saying that rank 0 gave no verdict within twice
// `timeout` (the others).
Status agree_on_job_knobs(Store& store, const std::string& prefix, int rank, int size,
                          const std::string& message, std::chrono::milliseconds timeout);

}  // namespace kolo::coord

// The settings check a sharded optimizer runs at construction: one allgather of each rank's
// settings, compared field by field, so that ranks that were configured differently fail at
// once, on every rank, naming the setting, instead of in the middle of a step.
//
// DistributedOptimizer does not take part: its constructor must stay free of collectives,
// because an elastic job's joining worker constructs one while the survivors keep theirs
// (a rank that builds one while the others shard is named by the mismatched-collectives check:
// its first allreduce against their allgather of this check).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/distributed/distributed_optimizer.h"
#include "kolo/process_set.h"

namespace kolo::fw {

// (name, value) pairs, compared in the order of the first rank that names each.
using OptimizerSettings = std::vector<std::pair<std::string, std::string>>;

// The settings of DistributedOptions and the wrapped optimizer, in this order: "sharding"
// (`sharding`, e.g. "stage 1 (optimizer state)"), "optimizer" (the wrapped one's name()),
// "bucket_bytes", "backward_passes_per_step", "weight_by_sample_count", "compression" and
// "parameter sizes" (`numels`, in the order the parameters were named). A caller appends its
// own settings after them.
OptimizerSettings shared_settings(std::string sharding, std::string optimizer,
                                  const DistributedOptions& options,
                                  const std::vector<int64_t>& numels);

// Collective over `set` (every member calls it once, in the same order as its other
// collectives): allgathers `mine` under the name "kolo.optimizer.__settings__" and returns when
// every member's settings equal this rank's. Nothing to do on a set of one rank.
// Errors (kolo::Error, on every member alike): Mismatch "<who>: ranks of <set> disagree on the
// optimizer setting '<name>' (rank 0: <value>, rank 1: <value>); every rank must construct its
// optimizer alike" naming the first setting that differs (a rank that lacks it shows "(none)");
// the allgather's own error (a rank that failed or left) as it is.
void agree_on_settings(std::string_view who, const ProcessSet& set, const OptimizerSettings& mine);

}  // namespace kolo::fw

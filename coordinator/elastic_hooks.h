// What kolo::elastic (elastic/run.cc) asks of the global Kolo session that kolo::init() built
// (coordinator/api.cc). Internal; any thread.
#pragma once

#include <cstdint>

#include "kolo/status.h"

namespace kolo::detail {

// Whether the last kolo::init() found this process to be an elastic worker (KOLO_ELASTIC_WORKER).
bool elastic_enabled();
// The generation of the current session's world; -1 when not initialised or not elastic.
int64_t elastic_generation();
// The newest generation kolorun has published (a store read, bounded by a second).
// PreconditionFailed when not initialised or not elastic; the store's errors.
Result<int64_t> elastic_newest_generation();
// KOLO_ELASTIC_RESET_LIMIT as the last kolo::init() read it (its default before).
int elastic_reset_limit();
// Why the current session's Runtime stopped accepting operations (its failure, or its shutdown);
// Ok while it runs, and when not initialised.
Status world_failure();

}  // namespace kolo::detail

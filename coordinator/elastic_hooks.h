// What kolo::elastic (elastic/run.cc) asks of the global Kolo session that kolo::init() built
// (coordinator/api.cc). Internal; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/process_set.h"
#include "kolo/status.h"

namespace kolo::detail {

// Whether the last kolo::init() found this process to be an elastic worker (KOLO_ELASTIC_WORKER).
bool elastic_enabled();
// The generation of the current session's world; -1 when not initialised or not elastic.
int64_t elastic_generation();
// The newest generation kolorun has published (a store read, bounded by a second).
// PreconditionFailed when not initialised or not elastic; the store's errors.
Result<int64_t> elastic_newest_generation();
// The worker id of each rank of the current session's world (World::workers); empty when not
// initialised or not elastic.
std::vector<int64_t> elastic_workers();
// The current session's ProcessSetTable::carry() and close(). PreconditionFailed when not
// initialised.
Result<ProcessSet> carry_process_set(int32_t id, std::vector<int> members, std::vector<int> former);
Status close_process_set(int32_t id, std::vector<int> former, std::string why);
// Note [Elastic process sets] (elastic_session.cc). describe: this rank's sets, before its
// session ends (the text carry() reads). carry: collective over the new world's ranks, after
// init(): rank 0's description broadcast, each set carried or closed on every rank.
std::string describe_process_sets();
Status carry_process_sets(const std::string& described);
// KOLO_ELASTIC_RESET_LIMIT as the last kolo::init() read it (its default before).
int elastic_reset_limit();
// Why the current session's Runtime stopped accepting operations (its failure, or its shutdown);
// Ok while it runs, and when not initialised.
Status world_failure();

}  // namespace kolo::detail

// Building validated Entries from the public API's arguments. Each builder checks the
// caller's arguments on this rank (cross-rank agreement is the Controller's job) and returns
// InvalidArgument naming the tensor, the argument, the expected and the given value. What
// exists only at the tensor level is checked here (names, views, shapes, rows, splits,
// devices); the checks a backend makes too (dtype, reduction, root, per-rank counts) are the
// same validate_* functions of backends/backend.h, with the tensor's name as context.
// Runtime tests submit these entries to their own Runtime objects; kolo::*_async submit them
// to the global one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coordinator/entry.h"
#include "kolo/kolo.h"

namespace kolo::coord {

Result<std::unique_ptr<Entry>> build_allreduce(std::string name, TensorView input,
                                               TensorView output, const AllreduceOptions& opts);
Result<std::unique_ptr<Entry>> build_grouped_allreduce(std::string name,
                                                       std::vector<TensorView> tensors,
                                                       const AllreduceOptions& opts);
Result<std::unique_ptr<Entry>> build_allgather(std::string name, TensorView input,
                                               AllgatherOptions opts);
Result<std::unique_ptr<Entry>> build_broadcast(std::string name, TensorView tensor,
                                               const BroadcastOptions& opts, int size);
Result<std::unique_ptr<Entry>> build_alltoall(std::string name, TensorView input,
                                              AlltoallOptions opts, int size);
Result<std::unique_ptr<Entry>> build_reducescatter(std::string name, TensorView input,
                                                   ReducescatterOptions opts, int size);
Result<std::unique_ptr<Entry>> build_barrier(std::string name);
Result<std::unique_ptr<Entry>> build_join();
// An allgather of Kolo's own (a name starting with kInternalNamePrefix, which callers may not
// use), e.g. add_process_set's agreement.
Result<std::unique_ptr<Entry>> build_internal_allgather(std::string name, TensorView input);

// The per-view checks of every builder (dtype, non-negative dimensions, data, device), for
// operations built on top of these (grouped.cc): InvalidArgument naming the tensor and `arg`.
Status check_input_view(OpType type, const std::string& name, const char* arg,
                        const TensorView& view);

// Submits to the process-wide runtime of `process_set` (api.cc); fails the handle when there
// is none, naming the set and this rank when this rank is not a member.
Handle submit_global(Result<std::unique_ptr<Entry>> entry, const std::string& name,
                     const ProcessSet& process_set = {});

class Runtime;

// The global set's Runtime (api.cc), null before kolo::init() and after kolo::shutdown(): for
// tests that read its counters. Thread-safe.
std::shared_ptr<Runtime> global_runtime();

}  // namespace kolo::coord

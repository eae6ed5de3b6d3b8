// `kolo-trace merge`: combines per-rank trace files into one, on one clock.
//
// Each rank's file counts ts from its own start on its own steady clock, and records the
// wall-clock time of its ts = 0 (kolo_clock_sync metadata). Merging shifts every event of a
// rank by (its wall-clock zero - the earliest wall-clock zero of all inputs), so ts = 0 of the
// result is the earliest start and simultaneous events on different ranks line up (as well as
// the hosts' wall clocks agree). The result's clock-sync metadata all name that common zero, so
// merging a merged file again is a no-op shift.
// Thread-safety: pure functions over values; write_trace writes one file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "tools/trace/trace_file.h"

namespace kolo::trace {

struct MergedTrace {
  nlohmann::json events = nlohmann::json::array();  // metadata first, then file order
  std::optional<int64_t> wall_clock_us;             // the common ts = 0, when any input had one
  // Things the user should know that do not stop the merge: crashed (completed) inputs, inputs
  // without clock metadata (left unshifted), a pid present in several inputs.
  std::vector<std::string> warnings;
};

MergedTrace merge_traces(const std::vector<TraceFile>& files);

// Whether `out` may be written with the merge of `inputs`: InvalidArgument naming it when it is
// one of the inputs (the same file, whatever the spelling), or when it exists and !force.
Status check_merge_output(const std::string& out, const std::vector<std::string>& inputs,
                          bool force);

// Writes `events` (a JSON array) to `path`, one event per line. IoError names the path.
Status write_trace(const std::string& path, const nlohmann::json& events);

}  // namespace kolo::trace

// `kolo-trace summary`: what the time went to, per op kind and per tensor, and which rank
// everyone waited for.
//
// Spans are rebuilt per track (pid, tid) from B/E pairs (and X events). By the timeline's
// contract the outermost span on a tensor's track is the operation (its name is the op kind,
// its "bytes" arg the size) and the spans inside it are its phases.
//
// Stragglers: a negotiation finishes only when every rank has asked for the tensor, so the
// rank whose NEGOTIATE span for an occurrence of a tensor began last is the one the others
// waited for. Occurrences are matched across ranks by tensor name and index (the k-th
// NEGOTIATE of tensor T on rank r matches the k-th on every other rank); the lag is the last
// begin minus the first. Needs the ranks on one clock: pass per-rank files (they are aligned
// as merge aligns them) or a merged file.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

namespace kolo::trace {

struct PhaseStats {
  uint64_t count = 0;
  double total_us = 0;
  uint64_t bytes = 0;  // operation rows only: the sum of the ops' "bytes" args
};

struct StragglerStats {
  uint64_t last_count = 0;  // negotiations in which this rank began NEGOTIATE last
  double lag_us = 0;        // sum over those of (its begin - the earliest rank's begin)
};

// Phase keys: an empty phase is the operation span itself. The int orders phases as the
// pipeline runs them (QUEUE, NEGOTIATE, ... CALLBACK), unknown ones alphabetically in between.
using KindKey = std::tuple<std::string, int, std::string>;                 // kind, order, phase
using TensorKey = std::tuple<std::string, std::string, int, std::string>;  // tensor, kind, ...

struct TraceSummary {
  std::map<KindKey, PhaseStats> by_kind;
  std::map<TensorKey, PhaseStats> by_tensor;
  std::map<int64_t, StragglerStats> stragglers;  // every rank that recorded a NEGOTIATE
  uint64_t negotiations = 0;                     // occurrences seen on at least two ranks
  std::map<int64_t, uint64_t> dropped_events;    // rank -> count, from the stats metadata
  uint64_t unmatched_ends = 0;                   // E with no open span on its track
  uint64_t unclosed_spans = 0;                   // B never closed (a crashed rank's file)
  uint64_t operations = 0;
  std::map<int64_t, bool> ranks;  // pids that recorded any event
};

TraceSummary summarize(const nlohmann::json& events);

// The report as printed by `kolo-trace summary`: tables "Per op kind", "Per tensor" and
// "Negotiation stragglers", times in ms (totals) and us (means).
std::string format_summary(const TraceSummary& summary);

}  // namespace kolo::trace

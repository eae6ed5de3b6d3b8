// `kolo-trace summary`: what the time went to, per op kind and per tensor, and which rank
// everyone waited for.
//
// Spans are read per track (pid, tid) from X events (and B/E pairs of older files) and nested
// by containment. By the timeline's contract the outermost span on a tensor's track is the
// operation (its name is the op kind, its "bytes" arg the size) and the spans inside it are its
// phases; a tensor's sibling rows (Note [Timeline rows] in timeline/timeline.h) count as its
// own, and a CALLBACK on a row of callbacks is a phase of the operation its args name. Rows
// whose spans overlap partly (files of older Kolo versions) are counted and reported. Spans whose
// status is "open" (the rank died with them open) or "aborted" (closed by a stop, e.g. on SIGTERM)
// are listed as open at the end, not counted in the times: in a hang, they are what the ranks were
// waiting on.
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
#include <vector>

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

struct OpenSpanAtEnd {
  int64_t rank = 0;
  std::string tensor;
  std::string phase;  // empty: the operation span itself
  std::string kind;   // the operation (the outermost span)
  double since_us = 0;
  std::string status;  // "open" or "aborted"
  std::string reason;  // why it was aborted, when known
};

// Per training step (STEP markers, kolo::mark_step()): which rank the negotiations of that step
// waited for most. A negotiation belongs to the step its first rank was in when it began.
struct StepStragglers {
  int64_t step = 0;
  uint64_t negotiations = 0;  // seen on at least two ranks
  int64_t late_rank = 0;      // the rank with the largest total lag in the step (ties: lowest)
  double lag_us = 0;          // that rank's total lag: sum of (its begin - the first begin)
  double max_lag_us = 0;      // the largest lag of one negotiation in the step, any rank
};

struct TraceSummary {
  std::map<KindKey, PhaseStats> by_kind;
  std::map<TensorKey, PhaseStats> by_tensor;
  std::map<int64_t, StragglerStats> stragglers;  // every rank that recorded a NEGOTIATE
  uint64_t negotiations = 0;                     // occurrences seen on at least two ranks
  std::map<int64_t, uint64_t> dropped_events;    // rank -> count, from the stats metadata
  uint64_t unmatched_ends = 0;                   // E with no open span on its track
  uint64_t unclosed_spans = 0;                   // B never closed (older files of crashed ranks)
  uint64_t partial_overlaps = 0;  // spans that began inside another on their row, outlived it
  std::vector<OpenSpanAtEnd> open_at_end;  // in rank, tensor, begin order
  std::vector<StepStragglers> per_step;    // by step; steps without negotiations left out
  uint64_t operations = 0;
  std::map<int64_t, bool> ranks;  // pids that recorded any event
};

TraceSummary summarize(const nlohmann::json& events);

// The report as printed by `kolo-trace summary`: tables "Per op kind", "Per tensor" and
// "Negotiation stragglers", times in ms (totals) and us (means).
std::string format_summary(const TraceSummary& summary);

enum class TableFormat { kText, kCsv, kJson };

// `kolo-trace summary --per-step`: one row per step (step, negotiations, late_rank, lag_ms,
// max_lag_ms) as an aligned table, CSV with a header line, or a JSON array of objects.
std::string format_per_step(const TraceSummary& summary, TableFormat format);

}  // namespace kolo::trace

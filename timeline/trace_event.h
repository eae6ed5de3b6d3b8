// One recorded timeline event and its serialisation as a Chrome Trace Event Format object.
// Internal to the timeline (the writer thread formats; tests check the formatting directly).
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "timeline/timeline.h"

namespace kolo::timeline_detail {

enum class EventKind : uint8_t {
  kComplete,       // "ph":"X": a span, ts and dur (the only kind of span Kolo writes)
  kInstant,        // "ph":"i", thread scope: drawn on the tensor's own row
  kGlobalInstant,  // "ph":"i", global scope: a line across every row (cycle and step markers)
  kThreadName,     // "ph":"M" thread_name metadata; `name` is the row's name, args strings
  kCounter,        // "ph":"C": args are the named series' values at ts
};

struct TraceEvent {
  EventKind kind = EventKind::kInstant;
  int tid = 0;
  int64_t ts_ns = 0;   // since the timeline's start, steady clock
  int64_t dur_ns = 0;  // kComplete only
  std::string name;
  TimelineArgs args;
};

// Appends `event` of process `pid` to `out` as one JSON object (no separator, no newline).
void append_event_json(std::string& out, const TraceEvent& event, int pid);

// Appends `text` as a JSON string literal (quoted, escaped; invalid UTF-8 replaced by U+FFFD).
void append_json_string(std::string& out, std::string_view text);

// Appends `value` as a JSON number when the whole of it is a finite number (re-formatted, so
// "007" is written 7 and "1." is written 1: always valid JSON), otherwise as a JSON string.
void append_arg_value(std::string& out, std::string_view value);

// Appends a timestamp in microseconds with three decimals (nanosecond resolution): "12.345".
void append_ts_us(std::string& out, int64_t ts_ns);

}  // namespace kolo::timeline_detail

// Recorded timeline events and their serialisation as Chrome Trace Event Format objects.
// Internal to the timeline (the writer thread formats; tests check the formatting directly).
// Thread-safety: the functions are pure; PackedEvents is a plain value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "timeline/timeline.h"

namespace kolo::timeline_detail {

enum class EventKind : uint8_t {
  kComplete,       // "ph":"X": a span, ts and dur (the only kind of span Kolo writes)
  kInstant,        // "ph":"i", thread scope: drawn on the tensor's own row
  kGlobalInstant,  // "ph":"i", global scope: a line across every row (cycle and step markers)
  kThreadName,     // "ph":"M" thread_name metadata; `name` is the row's name, args strings
  kCounter,        // "ph":"C": args are the named series' values at ts
};

// A queue of recorded events in packed form (Note [Packed events]): a fixed-size record per
// event in one vector, its name and args copied into one text buffer. Recording an event
// allocates nothing once both have grown to a batch's size (clear() keeps their capacity), and
// the writer thread that formats a batch frees nothing the recording threads allocated.
// Thread-safety: none; the timeline guards its queues with its lock.
class PackedEvents {
 public:
  // Appends an event named `name` whose args are `args` with each list of `overrides` added in
  // turn: a key already there takes the new value in its place, a new key goes last (how a
  // span's end args join its begin's). `name` and the args are copied.
  void push(EventKind kind, int tid, int64_t ts_ns, int64_t dur_ns, std::string_view name,
            const TimelineArgs& args, std::initializer_list<const TimelineArgs*> overrides = {});

  size_t size() const { return events_.size(); }
  void clear();  // keeps the capacity
  void reserve(size_t events, size_t text_bytes);
  void swap(PackedEvents& other) noexcept;

  // Appends event `i` of process `pid` as one JSON object (no separator, no newline).
  void append_json(std::string& out, size_t i, int pid);

 private:
  struct Record {
    EventKind kind;
    int tid;
    int64_t ts_ns;
    int64_t dur_ns;  // kComplete only
    size_t text;     // offset of the name in text_, followed by the args
    uint32_t name_size;
    uint32_t num_args;
  };
  // Writes `s`'s size then its bytes at `at`; returns the end.
  static char* put_view(char* at, std::string_view s);

  std::vector<Record> events_;
  std::string text_;
  std::vector<std::pair<std::string_view, std::string_view>> scratch_;  // args being merged/read
};

// Appends `text` as a JSON string literal (quoted, escaped; invalid UTF-8 replaced by U+FFFD).
void append_json_string(std::string& out, std::string_view text);

// Appends `value` as a JSON number when the whole of it is a finite number (re-formatted, so
// "007" is written 7 and "1." is written 1: always valid JSON), otherwise as a JSON string.
void append_arg_value(std::string& out, std::string_view value);

// Appends a timestamp in microseconds with three decimals (nanosecond resolution): "12.345".
void append_ts_us(std::string& out, int64_t ts_ns);

}  // namespace kolo::timeline_detail

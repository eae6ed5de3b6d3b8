// Reading Chrome trace files for kolo-trace: a JSON array of events (what Kolo writes) or an
// object with a "traceEvents" array. A file cut short by a crash (an unterminated array, a
// trailing comma, a half-written last event) is completed instead of rejected: the complete
// events are kept and the rest is reported.
// Thread-safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kolo/status.h"

namespace kolo::trace {

struct TraceFile {
  std::string path;
  nlohmann::json events = nlohmann::json::array();  // every element an object
  // pid -> wall-clock microseconds (Unix epoch) at that process's ts = 0, from the
  // kolo_clock_sync metadata. Empty for traces that Kolo did not write.
  std::map<int64_t, int64_t> wall_clock_us;
  bool recovered = false;      // the text was an incomplete array that we completed
  size_t discarded_bytes = 0;  // bytes of a half-written last event dropped by the recovery
};

// Reads and parses `path`. Errors: IoError "cannot open 'path': reason"; InvalidArgument
// "'path': invalid JSON at byte N (line L, column C): ..." or naming the event index and what
// is wrong with it.
Result<TraceFile> load_trace(const std::string& path);

// Parses trace text; `name` is used in error messages and stored as the path.
Result<TraceFile> parse_trace(std::string_view text, const std::string& name);

// The value of a numeric JSON field as a double, or `fallback` when absent or not a number.
double number_or(const nlohmann::json& object, std::string_view key, double fallback);
// The value of a numeric JSON field as an integer: an integer as it is (clamped to int64's
// range), a float truncated and clamped (NaN: `fallback`), `fallback` when absent or not a
// number. (nlohmann's get<int64_t> of an out-of-range float is undefined behaviour, which
// fuzz_trace_reader found: every integer read of a trace goes through here.)
int64_t integer_or(const nlohmann::json& object, std::string_view key, int64_t fallback);
// object[key] when it is a string, else `fallback` (an args field of another tool's trace may
// hold anything: parse_trace checks only the event's own fields).
std::string string_or(const nlohmann::json& object, std::string_view key, std::string fallback);

// The tensor whose operations a thread_name metadata event's row holds: its "tensor" arg (a
// sibling row, "<tensor> (2)", Note [Timeline rows] in timeline/timeline.h), else its "name";
// nullopt for an event without either.
std::optional<std::string> row_tensor(const nlohmann::json& thread_name);

}  // namespace kolo::trace

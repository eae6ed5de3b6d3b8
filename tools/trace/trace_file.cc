#include "tools/trace/trace_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "timeline/trace_format.h"

namespace kolo::trace {
namespace {

using nlohmann::json;

// 1-based line and column of byte `offset` in `text`, for error messages people can act on.
std::string line_column(std::string_view text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

size_t trimmed_size(std::string_view text) {
  size_t n = text.size();
  while (n > 0 &&
         (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == '\t'))
    --n;
  return n;
}

// Note [Completing a crashed trace]
// A writer that dies leaves "[ e1,\n e2,\n e3-partial". We scan the text once, tracking string
// literals and nesting depth, and remember where the last element of the outer array ended
// (depth falling back to 1). Everything up to there plus "]" is a complete array; the tail (a
// separator and at most one half-written event) is discarded and reported. Only used when the
// parser ran out of input, so corruption in the middle is still reported as an error.
std::optional<size_t> end_of_last_complete_element(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  std::optional<size_t> last_end;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
      if (depth == 1) last_end = i + 1;
      if (depth <= 0) return std::nullopt;  // the array closed: nothing to complete
    }
  }
  return last_end;
}

Status invalid_json(const std::string& name, std::string_view text, const json::parse_error& e) {
  size_t byte = e.byte > 0 ? e.byte - 1 : 0;  // nlohmann counts from 1
  return Status::InvalidArgument("'" + name + "': invalid JSON at byte " + std::to_string(byte) +
                                 " (" + line_column(text, byte) + "): " + e.what());
}

Status extract_events(json doc, const std::string& name, TraceFile& out) {
  if (doc.is_object() && doc.contains("traceEvents")) doc = std::move(doc["traceEvents"]);
  if (!doc.is_array()) {
    return Status::InvalidArgument("'" + name +
                                   "': expected a JSON array of trace events or an object "
                                   "with a \"traceEvents\" array, got a JSON " +
                                   doc.type_name());
  }
  for (size_t i = 0; i < doc.size(); ++i) {
    const json& e = doc[i];
    if (!e.is_object()) {
      return Status::InvalidArgument("'" + name + "': event " + std::to_string(i) +
                                     " must be a JSON object, got a JSON " + e.type_name());
    }
    // The fields kolo-trace reads are checked for their type once, here, so that merge and
    // summary can read them without guarding every access.
    for (const char* key : {"ts", "dur", "pid", "tid"}) {
      auto it = e.find(key);
      if (it != e.end() && !it->is_number()) {
        return Status::InvalidArgument("'" + name + "': event " + std::to_string(i) +
                                       " has a non-numeric \"" + key + "\": " + it->dump());
      }
    }
    for (const char* key : {"pid", "tid"}) {  // read as int64_t: 1e40 must not reach that
      auto it = e.find(key);
      if (it != e.end() && !it->is_number_integer()) {
        return Status::InvalidArgument("'" + name + "': event " + std::to_string(i) + " has a \"" +
                                       key + "\" that is not an integer: " + it->dump());
      }
    }
    for (const char* key : {"ph", "name", "cat", "s"}) {
      auto it = e.find(key);
      if (it != e.end() && !it->is_string()) {
        return Status::InvalidArgument("'" + name + "': event " + std::to_string(i) + " has a \"" +
                                       key + "\" that is not a string: " + it->dump());
      }
    }
    if (auto args = e.find("args"); args != e.end() && !args->is_object()) {
      return Status::InvalidArgument("'" + name + "': event " + std::to_string(i) +
                                     " has \"args\" that are not an object: " + args->dump());
    }
    if (e.value("ph", "") == "M" && e.value("name", "") == trace_format::kClockSyncEvent) {
      const json& args = e.contains("args") ? e["args"] : json();
      auto wall = args.is_object() ? args.find(trace_format::kWallClockUsArg) : args.end();
      if (!args.is_object() || wall == args.end() || !wall->is_number_integer()) {
        return Status::InvalidArgument("'" + name + "': event " + std::to_string(i) + " (" +
                                       std::string(trace_format::kClockSyncEvent) +
                                       ") needs a numeric args." +
                                       std::string(trace_format::kWallClockUsArg));
      }
      const int64_t pid = integer_or(e, "pid", 0);
      out.wall_clock_us.emplace(pid, wall->get<int64_t>());
    }
  }
  out.events = std::move(doc);
  return Status::Ok();
}

}  // namespace

std::string string_or(const json& object, std::string_view key, std::string fallback) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return fallback;
  return it->get<std::string>();
}

std::optional<std::string> row_tensor(const json& thread_name) {
  if (!thread_name.contains("args") || !thread_name["args"].is_object()) return std::nullopt;
  const json& args = thread_name["args"];
  for (std::string_view key : {trace_format::kTensorArg, std::string_view("name")}) {
    auto it = args.find(key);
    if (it != args.end() && it->is_string()) return it->get<std::string>();
  }
  return std::nullopt;
}

double number_or(const json& object, std::string_view key, double fallback) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return fallback;
  return it->get<double>();
}

int64_t integer_or(const json& object, std::string_view key, int64_t fallback) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return fallback;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    return v > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(v);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  const double d = it->get<double>();
  if (std::isnan(d)) return fallback;
  // 2^63 is exactly representable; every double below it converts without overflow.
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(d);
}

Result<TraceFile> parse_trace(std::string_view text, const std::string& name) {
  TraceFile file;
  file.path = name;
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    // Recover only when the parser ran off the end of the input: a crashed writer.
    size_t end = trimmed_size(text);
    size_t first = text.find_first_not_of(" \t\r\n");
    bool at_end = e.byte >= end;
    if (!at_end || first == std::string_view::npos || text[first] != '[') {
      return invalid_json(name, text, e);
    }
    std::optional<size_t> last = end_of_last_complete_element(text);
    std::string completed(text.substr(0, last ? *last : first + 1));
    completed += "\n]";
    try {
      doc = json::parse(completed);
    } catch (const json::exception&) {
      return invalid_json(name, text, e);
    }
    file.recovered = true;
    // What follows the last complete event, less separators: a half-written event, if any.
    size_t keep = last ? *last : first + 1;
    std::string_view tail = text.substr(keep, end - std::min(end, keep));
    size_t skip = tail.find_first_not_of(" \t\r\n,");
    file.discarded_bytes = skip == std::string_view::npos ? 0 : tail.size() - skip;
  } catch (const json::exception& e) {
    // Well-formed JSON that nlohmann cannot hold, e.g. a number beyond double's range.
    return Status::InvalidArgument("'" + name + "': unreadable JSON: " + e.what());
  }
  KOLO_RETURN_IF_ERROR(extract_events(std::move(doc), name, file));
  return file;
}

// The decompressed text of gzip file `path`. A stream cut short (a killed rank's last flush) is
// not an error: what could be decompressed is returned, and parse_trace completes it.
Result<std::string> gunzip(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return Status::IoError("cannot open '" + path + "': " + std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    int n = gzread(gz, buffer, sizeof(buffer));
    if (n <= 0) break;  // end, or a truncated stream: keep what came before
    text.append(buffer, static_cast<size_t>(n));
  }
  gzclose(gz);
  return text;
}

Result<TraceFile> load_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError("cannot read '" + path + "': " + std::strerror(errno));
  std::string text = ss.str();
  if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
      static_cast<unsigned char>(text[1]) == 0x8b) {  // gzip (KOLO_TIMELINE=....json.gz)
    KOLO_ASSIGN_OR_RETURN(text, gunzip(path));
  }
  return parse_trace(text, path);
}

}  // namespace kolo::trace

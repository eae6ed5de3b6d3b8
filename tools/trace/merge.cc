#include "tools/trace/merge.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "timeline/trace_format.h"

namespace kolo::trace {
namespace {

using nlohmann::json;

int64_t pid_of(const json& event) {
  auto it = event.find("pid");
  return it != event.end() && it->is_number() ? it->get<int64_t>() : 0;
}

// Keeps the nanosecond decimals exact-looking after the shift ("12.345", not "12.3449999").
double round_to_ns(double us) { return std::round(us * 1000.0) / 1000.0; }

}  // namespace

MergedTrace merge_traces(const std::vector<TraceFile>& files) {
  MergedTrace out;
  for (const TraceFile& f : files) {
    for (const auto& [pid, wall] : f.wall_clock_us) {
      if (!out.wall_clock_us || wall < *out.wall_clock_us) out.wall_clock_us = wall;
    }
  }

  std::map<int64_t, std::string> pid_owner;  // pid -> first file that had it
  std::vector<json> metadata, rest;
  for (const TraceFile& f : files) {
    if (f.recovered) {
      std::string msg = "'" + f.path + "' was cut short (crashed run?): kept its " +
                        std::to_string(f.events.size()) + " complete events";
      if (f.discarded_bytes > 0) {
        msg += ", discarded " + std::to_string(f.discarded_bytes) + " bytes of a partial event";
      }
      out.warnings.push_back(msg);
    }
    if (f.wall_clock_us.empty()) {
      out.warnings.push_back("'" + f.path + "' has no " +
                             std::string(trace_format::kClockSyncEvent) +
                             " metadata: its timestamps are not shifted");
    }
    std::map<int64_t, bool> pids_here;
    for (const json& e : f.events) pids_here[pid_of(e)] = true;
    for (const auto& [pid, unused] : pids_here) {
      auto [it, fresh] = pid_owner.emplace(pid, f.path);
      if (!fresh) {
        out.warnings.push_back("pid " + std::to_string(pid) + " appears in both '" + it->second +
                               "' and '" + f.path + "': their tracks are shown together");
      }
    }

    for (json e : f.events) {
      int64_t pid = pid_of(e);
      // A rank's own zero; a pid without one (foreign events in a Kolo file) uses the file's.
      double shift_us = 0;
      if (!f.wall_clock_us.empty() && out.wall_clock_us) {
        auto it = f.wall_clock_us.find(pid);
        int64_t zero = it != f.wall_clock_us.end() ? it->second : f.wall_clock_us.begin()->second;
        shift_us = static_cast<double>(zero - *out.wall_clock_us);
      }
      auto ts = e.find("ts");
      if (ts != e.end() && ts->is_number() && shift_us != 0) {
        *ts = round_to_ns(ts->get<double>() + shift_us);
      }
      bool is_meta = e.value("ph", "") == "M";
      if (is_meta && e.value("name", "") == trace_format::kClockSyncEvent && out.wall_clock_us) {
        e["args"][trace_format::kWallClockUsArg] = *out.wall_clock_us;
      }
      (is_meta ? metadata : rest).push_back(std::move(e));
    }
  }
  for (auto& e : metadata) out.events.push_back(std::move(e));
  for (auto& e : rest) out.events.push_back(std::move(e));
  return out;
}

Status write_trace(const std::string& path, const json& events) {
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  if (!os)
    return Status::IoError("cannot open '" + path + "' for writing: " + std::strerror(errno));
  os << "[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) os << ",\n";
    os << events[i].dump(-1, ' ', false, json::error_handler_t::replace);
  }
  os << "\n]\n";
  os.flush();
  if (!os) return Status::IoError("cannot write '" + path + "': " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace kolo::trace

#include "tools/trace/merge.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "timeline/trace_format.h"

namespace kolo::trace {
namespace {

using nlohmann::json;

// Keeps the nanosecond decimals exact-looking after the shift ("12.345", not "12.3449999").
double round_to_ns(double us) { return std::round(us * 1000.0) / 1000.0; }

// Note [Submission marks]
// A negotiation waits for the last rank to submit; to see who that was, one would compare the
// rows of several rank groups. So merge marks, on each rank's row of a tensor, when every rank
// submitted that occurrence of it: a "SUBMITTED" instant per rank with args {rank, lag_us}
// (lag behind the first rank). Submission is the begin of the QUEUE span; the k-th QUEUE of a
// tensor on one rank is matched with the k-th on the others. Marks already in an input (a
// merged file merged again) are dropped first, so merging stays idempotent.
void add_submission_marks(std::vector<json>& metadata, std::vector<json>& events) {
  std::erase_if(events, [](const json& e) {
    return e.value("ph", "") == "i" && e.value("name", "") == trace_format::kSubmittedMark;
  });
  std::map<std::pair<int64_t, int64_t>, std::string> tensor_of;  // (pid, tid) -> tensor
  for (const json& e : metadata) {
    if (e.value("name", "") != "thread_name") continue;
    // A tensor's sibling rows count as its own: occurrences follow submission order.
    if (auto tensor = row_tensor(e))
      tensor_of[{integer_or(e, "pid", 0), integer_or(e, "tid", 0)}] = std::move(*tensor);
  }
  struct Submission {
    int64_t pid, tid;
    double ts;
  };
  std::map<std::pair<std::string, size_t>, std::vector<Submission>> occurrences;
  std::map<std::pair<int64_t, std::string>, size_t> seen;  // (pid, tensor) -> QUEUEs so far
  std::vector<const json*> queues;
  for (const json& e : events)
    if (e.value("ph", "") == "X" && e.value("name", "") == trace_format::kQueuePhase)
      queues.push_back(&e);
  std::stable_sort(queues.begin(), queues.end(), [](const json* a, const json* b) {
    return number_or(*a, "ts", 0) < number_or(*b, "ts", 0);
  });
  for (const json* e : queues) {
    int64_t pid = integer_or(*e, "pid", 0), tid = integer_or(*e, "tid", 0);
    auto name = tensor_of.find({pid, tid});
    if (name == tensor_of.end()) continue;
    size_t k = seen[{pid, name->second}]++;
    occurrences[{name->second, k}].push_back({pid, tid, number_or(*e, "ts", 0)});
  }
  for (const auto& [key, subs] : occurrences) {
    if (subs.size() < 2) continue;
    double first = subs.front().ts;
    for (const Submission& s : subs) first = std::min(first, s.ts);
    for (const Submission& row : subs) {
      for (const Submission& s : subs) {
        events.push_back({{"name", trace_format::kSubmittedMark},
                          {"ph", "i"},
                          {"s", "t"},
                          {"pid", row.pid},
                          {"tid", row.tid},
                          {"ts", s.ts},
                          {"args", {{"rank", s.pid}, {"lag_us", round_to_ns(s.ts - first)}}}});
      }
    }
  }
}

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
    for (const json& e : f.events) pids_here[integer_or(e, "pid", 0)] = true;
    for (const auto& [pid, unused] : pids_here) {
      auto [it, fresh] = pid_owner.emplace(pid, f.path);
      if (!fresh) {
        out.warnings.push_back("pid " + std::to_string(pid) + " appears in both '" + it->second +
                               "' and '" + f.path + "': their tracks are shown together");
      }
    }

    for (json e : f.events) {
      int64_t pid = integer_or(e, "pid", 0);
      // A rank's own zero; a pid without one (foreign events in a Kolo file) uses the file's.
      double shift_us = 0;
      if (!f.wall_clock_us.empty() && out.wall_clock_us) {
        auto it = f.wall_clock_us.find(pid);
        int64_t zero = it != f.wall_clock_us.end() ? it->second : f.wall_clock_us.begin()->second;
        shift_us = static_cast<double>(zero - *out.wall_clock_us);
      }
      bool is_meta = e.value("ph", "") == "M";
      auto ts = e.find("ts");  // metadata's "ts" (0) is not a time
      if (ts != e.end() && ts->is_number() && shift_us != 0 && !is_meta) {
        *ts = round_to_ns(ts->get<double>() + shift_us);
      }
      if (is_meta && e.value("name", "") == trace_format::kClockSyncEvent && out.wall_clock_us) {
        e["args"][trace_format::kWallClockUsArg] = *out.wall_clock_us;
      }
      (is_meta ? metadata : rest).push_back(std::move(e));
    }
  }
  add_submission_marks(metadata, rest);
  for (auto& e : metadata) out.events.push_back(std::move(e));
  for (auto& e : rest) out.events.push_back(std::move(e));
  return out;
}

Status check_merge_output(const std::string& out, const std::vector<std::string>& inputs,
                          bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(out, ec);
  for (const std::string& in : inputs) {
    std::error_code e1;
    bool same = exists ? fs::equivalent(out, in, e1)
                       : fs::weakly_canonical(out, e1) == fs::weakly_canonical(in, e1);
    if (same) {
      return Status::InvalidArgument("merge: the output '" + out + "' is also an input ('" + in +
                                     "'); writing it would destroy that rank's trace");
    }
  }
  if (exists && !force) {
    return Status::InvalidArgument("merge: the output '" + out +
                                   "' exists; pass --force to replace it");
  }
  return Status::Ok();
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

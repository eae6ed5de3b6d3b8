#include "tools/trace/summary.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "timeline/trace_format.h"
#include "tools/trace/trace_file.h"

namespace kolo::trace {
namespace {

using nlohmann::json;

constexpr int kOpOrder = 0;

// The pipeline order of ARCHITECTURE.md section 3; the backend's op (any other name) runs
// between the copies into and out of the fusion buffer.
int phase_order(std::string_view phase) {
  static constexpr std::pair<std::string_view, int> kKnown[] = {{"QUEUE", 1},
                                                                {"NEGOTIATE", 2},
                                                                {"WAIT_FOR_DATA", 3},
                                                                {"MEMCPY_IN_FUSION", 4},
                                                                {"MEMCPY_OUT_FUSION", 6},
                                                                {"CALLBACK", 7}};
  for (const auto& [name, order] : kKnown)
    if (phase == name) return order;
  return 5;
}

bool is_negotiation(std::string_view name) {
  std::string_view n = trace_format::kNegotiatePhase;
  return name == n || (name.size() > n.size() && name.substr(0, n.size()) == n &&
                       name[n.size()] == '_');  // e.g. NEGOTIATE_ALLREDUCE
}

uint64_t bytes_arg(const json& args) {
  auto it = args.find("bytes");
  if (it == args.end()) return 0;
  if (it->is_number())
    return static_cast<uint64_t>(std::max<int64_t>(integer_or(args, "bytes", 0), 0));
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    uint64_t v = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return v;
  }
  return 0;
}

struct Interval {
  std::string name;
  double begin_us;
  double end_us;
  json args;
};

using Occurrence = std::pair<std::string, size_t>;  // tensor, index of its NEGOTIATE on a rank

// The step rank `pid` was in at `ts`: that of its last STEP marker at or before ts, else 0.
int64_t step_at(const std::map<int64_t, std::vector<std::pair<double, int64_t>>>& steps,
                int64_t pid, double ts) {
  auto it = steps.find(pid);
  if (it == steps.end()) return 0;
  auto after = std::upper_bound(it->second.begin(), it->second.end(),
                                std::make_pair(ts, std::numeric_limits<int64_t>::max()));
  return after == it->second.begin() ? 0 : std::prev(after)->second;
}

class Builder {
 public:
  explicit Builder(TraceSummary& s) : s_(s) {}

  void track(int64_t pid, const std::string& tensor, const std::vector<const json*>& events) {
    // Spans as intervals: X events as they are; B/E pairs (older files) matched per track.
    std::vector<Interval> spans;
    std::vector<Interval> open;
    std::vector<const json*> sorted = events;
    std::stable_sort(sorted.begin(), sorted.end(), [](const json* a, const json* b) {
      return number_or(*a, "ts", 0) < number_or(*b, "ts", 0);
    });
    for (const json* e : sorted) {
      std::string ph = e->value("ph", "");
      double ts = number_or(*e, "ts", 0);
      json args = e->contains("args") && (*e)["args"].is_object() ? (*e)["args"] : json::object();
      if (ph == "B") {
        open.push_back(Interval{e->value("name", ""), ts, ts, std::move(args)});
      } else if (ph == "E") {
        if (open.empty()) {
          ++s_.unmatched_ends;
          continue;
        }
        Interval span = std::move(open.back());
        open.pop_back();
        span.args.update(args);  // an end's args complete its begin's
        span.end_us = ts;
        spans.push_back(std::move(span));
      } else if (ph == "X") {
        spans.push_back(Interval{e->value("name", ""), ts, ts + number_or(*e, "dur", 0), args});
      }
    }
    s_.unclosed_spans += open.size();
    // Outer spans first; a span lies inside the ones on the stack that contain it. The slack
    // absorbs the files' nanosecond rounding of ts and dur.
    std::stable_sort(spans.begin(), spans.end(), [](const Interval& a, const Interval& b) {
      return a.begin_us != b.begin_us ? a.begin_us < b.begin_us : a.end_us > b.end_us;
    });
    constexpr double kSlackUs = 0.002;
    std::vector<const Interval*> stack;
    for (const Interval& span : spans) {
      // It is not inside the spans it outlives: those that ended before it began, and those it
      // began inside, where the row does not nest (counted).
      for (; !stack.empty() && span.end_us > stack.back()->end_us + kSlackUs; stack.pop_back())
        if (stack.back()->end_us > span.begin_us + kSlackUs) ++s_.partial_overlaps;
      const bool outermost = stack.empty();
      stack.push_back(&span);
      // The operation's own span is the outermost; a CALLBACK on a row of callbacks is one of
      // the operation that its args name (Note [Timeline rows]).
      const bool callback = outermost && span.name == trace_format::kCallbackPhase &&
                            span.args.contains(trace_format::kTensorArg);
      const bool op = outermost && !callback;
      const std::string kind = callback ? string_or(span.args, trace_format::kOperationArg, "")
                                        : (op ? span.name : stack.front()->name);
      const std::string owner =
          callback ? string_or(span.args, trace_format::kTensorArg, tensor) : tensor;
      if (is_negotiation(span.name)) negotiate_begins_[{owner, pid}].push_back(span.begin_us);
      const std::string status = string_or(span.args, trace_format::kStatusArg, "");
      if (status == trace_format::kStatusOpen || status == trace_format::kStatusAborted) {
        s_.open_at_end.push_back(OpenSpanAtEnd{pid, owner, op ? std::string() : span.name, kind,
                                               span.begin_us, status,
                                               string_or(span.args, trace_format::kReasonArg, "")});
        continue;  // incomplete: listed, not counted
      }
      const int order = op ? kOpOrder : phase_order(span.name);
      const std::string phase = op ? std::string() : span.name;
      const uint64_t bytes = op ? bytes_arg(span.args) : 0;
      if (op) ++s_.operations;
      add(s_.by_kind[{kind, order, phase}], span.end_us - span.begin_us, bytes);
      add(s_.by_tensor[{owner, kind, order, phase}], span.end_us - span.begin_us, bytes);
    }
  }

  // `steps`: per pid, (ts, step) of its STEP markers in time order.
  void finish_stragglers(const std::map<int64_t, std::vector<std::pair<double, int64_t>>>& steps) {
    // The k-th NEGOTIATE of a tensor on a rank, whichever of the tensor's rows it is on.
    std::map<Occurrence, std::vector<std::pair<int64_t, double>>> occurrences;
    for (auto& [key, begins] : negotiate_begins_) {
      std::sort(begins.begin(), begins.end());
      for (size_t k = 0; k < begins.size(); ++k)
        occurrences[{key.first, k}].emplace_back(key.second, begins[k]);
    }
    std::map<int64_t, std::map<int64_t, double>> lag_by_step;  // step -> rank -> total lag
    std::map<int64_t, StepStragglers> per_step;
    for (auto& [occurrence, arrivals] : occurrences) {
      std::sort(arrivals.begin(), arrivals.end());  // by pid: ties go to the lowest rank
      for (const auto& [pid, begin] : arrivals) s_.stragglers[pid];
      if (arrivals.size() < 2) continue;
      auto last = arrivals.begin(), first = arrivals.begin();
      for (auto it = arrivals.begin(); it != arrivals.end(); ++it) {
        if (it->second > last->second) last = it;
        if (it->second < first->second) first = it;
      }
      StragglerStats& st = s_.stragglers[last->first];
      ++st.last_count;
      st.lag_us += last->second - first->second;
      ++s_.negotiations;

      int64_t step = step_at(steps, first->first, first->second);
      StepStragglers& row = per_step[step];
      row.step = step;
      ++row.negotiations;
      row.max_lag_us = std::max(row.max_lag_us, last->second - first->second);
      for (const auto& [pid, begin] : arrivals) lag_by_step[step][pid] += begin - first->second;
    }
    for (auto& [step, row] : per_step) {
      for (const auto& [pid, lag] : lag_by_step[step]) {
        if (lag > row.lag_us) {
          row.lag_us = lag;
          row.late_rank = pid;
        }
      }
      s_.per_step.push_back(row);
    }
  }

 private:
  static void add(PhaseStats& p, double us, uint64_t bytes) {
    ++p.count;
    p.total_us += us;
    p.bytes += bytes;
  }

  TraceSummary& s_;
  // (tensor, pid) -> the begins of its NEGOTIATE spans.
  std::map<std::pair<std::string, int64_t>, std::vector<double>> negotiate_begins_;
};

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// Columns before `text_columns` are left-aligned (names), the rest right-aligned (numbers).
std::string table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows, size_t text_columns) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l = " ";
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - cells[c].size(), ' ');
      l += ' ';
      l += c < text_columns ? cells[c] + pad : pad + cells[c];
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return out;
}

std::vector<std::string> stat_cells(const std::string& phase, const PhaseStats& p) {
  bool op = phase.empty();
  return {op ? "(op)" : phase, std::to_string(p.count), op ? std::to_string(p.bytes) : "-",
          fixed(p.total_us / 1000.0, 3), fixed(p.count ? p.total_us / p.count : 0, 1)};
}

}  // namespace

TraceSummary summarize(const json& events) {
  TraceSummary s;
  std::map<std::pair<int64_t, int64_t>, std::string> names;
  std::map<std::pair<int64_t, int64_t>, std::vector<const json*>> tracks;
  std::map<int64_t, std::vector<std::pair<double, int64_t>>> steps;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    std::string ph = e.value("ph", "");
    int64_t pid = integer_or(e, "pid", 0), tid = integer_or(e, "tid", 0);
    if (ph == "M") {
      std::string name = e.value("name", "");
      const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
      if (name == "thread_name" && row_tensor(e)) {
        names[{pid, tid}] = *row_tensor(e);
      } else if (name == trace_format::kStatsEvent) {
        // integer_or: a cast of an out-of-range double is undefined (fuzz_trace_reader).
        const int64_t dropped = integer_or(args, trace_format::kDroppedEventsArg, 0);
        if (dropped > 0) s.dropped_events[pid] += static_cast<uint64_t>(dropped);
      }
      continue;
    }
    s.ranks[pid] = true;
    if (ph == "B" || ph == "E" || ph == "X") tracks[{pid, tid}].push_back(&e);
    if (ph == "i" && e.value("name", "") == trace_format::kStepMarker) {
      const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
      steps[pid].emplace_back(number_or(e, "ts", 0), integer_or(args, trace_format::kStepArg, 0));
    }
  }
  for (auto& [pid, marks] : steps) std::sort(marks.begin(), marks.end());
  Builder builder(s);
  for (auto& [key, track_events] : tracks) {
    auto it = names.find(key);
    std::string tensor = it != names.end() ? it->second : "tid " + std::to_string(key.second);
    builder.track(key.first, tensor, track_events);
  }
  builder.finish_stragglers(steps);
  return s;
}

std::string format_summary(const TraceSummary& s) {
  std::string out;
  std::string ranks;
  for (const auto& [pid, unused] : s.ranks)
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(pid);
  out += "Ranks: " + (ranks.empty() ? std::string("none") : ranks) +
         "; operations: " + std::to_string(s.operations) + "\n";

  out += "\nPer op kind\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, p] : s.by_kind) {
    auto cells = stat_cells(std::get<2>(key), p);
    cells.insert(cells.begin(), std::get<0>(key));
    rows.push_back(std::move(cells));
  }
  out += table({"kind", "phase", "count", "bytes", "total_ms", "mean_us"}, rows, 2);

  out += "\nPer tensor\n";
  rows.clear();
  for (const auto& [key, p] : s.by_tensor) {
    auto cells = stat_cells(std::get<3>(key), p);
    cells.insert(cells.begin(), {std::get<0>(key), std::get<1>(key)});
    rows.push_back(std::move(cells));
  }
  out += table({"tensor", "kind", "phase", "count", "bytes", "total_ms", "mean_us"}, rows, 3);

  out += "\nNegotiation stragglers (the rank whose NEGOTIATE began last; " +
         std::to_string(s.negotiations) + " negotiations seen on two or more ranks)\n";
  rows.clear();
  for (const auto& [pid, st] : s.stragglers) {
    double share = s.negotiations ? 100.0 * st.last_count / s.negotiations : 0;
    rows.push_back({std::to_string(pid), std::to_string(st.last_count), fixed(share, 1) + "%",
                    fixed(st.lag_us / 1000.0, 3),
                    fixed(st.last_count ? st.lag_us / st.last_count : 0, 1)});
  }
  out += table({"rank", "last", "share", "total_lag_ms", "mean_lag_us"}, rows, 0);

  if (!s.open_at_end.empty()) {
    out += "\nSpans open at the end (" + std::to_string(s.open_at_end.size()) +
           "; \"open\": the rank died with it open, \"aborted\": closed by a stop)\n";
    rows.clear();
    for (const OpenSpanAtEnd& o : s.open_at_end) {
      rows.push_back({std::to_string(o.rank), o.tensor, o.kind, o.phase.empty() ? "(op)" : o.phase,
                      fixed(o.since_us / 1000.0, 3), o.status, o.reason});
    }
    out += table({"rank", "tensor", "kind", "phase", "since_ms", "status", "reason"}, rows, 7);
  }

  for (const auto& [pid, n] : s.dropped_events) {
    out += "\nNote: rank " + std::to_string(pid) + " dropped " + std::to_string(n) +
           " events (timeline queue full): its counts are incomplete\n";
  }
  if (s.unclosed_spans > 0) {
    out += "\nNote: " + std::to_string(s.unclosed_spans) +
           " spans never ended (a rank stopped mid-operation?); they are not counted\n";
  }
  if (s.partial_overlaps > 0) {
    out += "\nNote: " + std::to_string(s.partial_overlaps) +
           " spans began inside another span of their row and outlived it: the file's rows do "
           "not nest, so its operation and phase counts are not reliable\n";
  }
  if (s.unmatched_ends > 0) {
    out += "\nNote: " + std::to_string(s.unmatched_ends) + " span ends had no begin; ignored\n";
  }
  return out;
}

}  // namespace kolo::trace

namespace kolo::trace {

std::string format_per_step(const TraceSummary& s, TableFormat format) {
  if (format == TableFormat::kJson) {
    json rows = json::array();
    for (const StepStragglers& r : s.per_step) {
      rows.push_back({{"step", r.step},
                      {"negotiations", r.negotiations},
                      {"late_rank", r.late_rank},
                      {"lag_ms", r.lag_us / 1000.0},
                      {"max_lag_ms", r.max_lag_us / 1000.0}});
    }
    return rows.dump(1) + "\n";
  }
  const std::vector<std::string> header = {"step", "negotiations", "late_rank", "lag_ms",
                                           "max_lag_ms"};
  std::vector<std::vector<std::string>> rows;
  for (const StepStragglers& r : s.per_step) {
    rows.push_back({std::to_string(r.step), std::to_string(r.negotiations),
                    std::to_string(r.late_rank), fixed(r.lag_us / 1000.0, 3),
                    fixed(r.max_lag_us / 1000.0, 3)});
  }
  if (format == TableFormat::kText) return table(header, rows, 0);
  std::string out;  // CSV: no cell needs quoting (numbers only)
  auto csv_line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) out += (c ? "," : "") + cells[c];
    out += "\n";
  };
  csv_line(header);
  for (const auto& row : rows) csv_line(row);
  return out;
}

}  // namespace kolo::trace

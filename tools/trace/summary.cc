#include "tools/trace/summary.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
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

int64_t int_field(const json& e, std::string_view key) {
  auto it = e.find(key);
  return it != e.end() && it->is_number() ? it->get<int64_t>() : 0;
}

uint64_t bytes_arg(const json& args) {
  auto it = args.find("bytes");
  if (it == args.end()) return 0;
  if (it->is_number()) return it->get<double>() > 0 ? it->get<uint64_t>() : 0;
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    uint64_t v = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return v;
  }
  return 0;
}

struct OpenSpan {
  std::string name;
  double begin_us;
  json args;
};

using Occurrence = std::pair<std::string, size_t>;  // tensor, index of its NEGOTIATE on a rank

class Builder {
 public:
  explicit Builder(TraceSummary& s) : s_(s) {}

  void track(int64_t pid, const std::string& tensor, std::vector<const json*> events) {
    // Files keep each track in time order; sorting (stably) also accepts hand-made or
    // concatenated inputs.
    std::stable_sort(events.begin(), events.end(), [](const json* a, const json* b) {
      return number_or(*a, "ts", 0) < number_or(*b, "ts", 0);
    });
    std::vector<OpenSpan> open;
    size_t negotiations = 0;
    auto close = [&](const std::string& name, double begin, double end, const json& args) {
      std::string kind = open.empty() ? name : open.front().name;
      int order = open.empty() ? kOpOrder : phase_order(name);
      std::string phase = open.empty() ? std::string() : name;
      uint64_t bytes = open.empty() ? bytes_arg(args) : 0;
      if (open.empty()) ++s_.operations;
      add(s_.by_kind[{kind, order, phase}], end - begin, bytes);
      add(s_.by_tensor[{tensor, kind, order, phase}], end - begin, bytes);
      if (is_negotiation(name)) occurrences_[{tensor, negotiations++}].emplace_back(pid, begin);
    };
    for (const json* e : events) {
      std::string ph = e->value("ph", "");
      double ts = number_or(*e, "ts", 0);
      json args = e->contains("args") && (*e)["args"].is_object() ? (*e)["args"] : json::object();
      if (ph == "B") {
        open.push_back(OpenSpan{e->value("name", ""), ts, std::move(args)});
      } else if (ph == "E") {
        if (open.empty()) {
          ++s_.unmatched_ends;
          continue;
        }
        OpenSpan span = std::move(open.back());
        open.pop_back();
        span.args.update(args);  // an end's args complete its begin's
        close(span.name, span.begin_us, ts, span.args);
      } else if (ph == "X") {
        close(e->value("name", ""), ts, ts + number_or(*e, "dur", 0), args);
      }
    }
    s_.unclosed_spans += open.size();
  }

  void finish_stragglers() {
    for (auto& [occurrence, arrivals] : occurrences_) {
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
    }
  }

 private:
  static void add(PhaseStats& p, double us, uint64_t bytes) {
    ++p.count;
    p.total_us += us;
    p.bytes += bytes;
  }

  TraceSummary& s_;
  std::map<Occurrence, std::vector<std::pair<int64_t, double>>> occurrences_;
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
  for (const json& e : events) {
    if (!e.is_object()) continue;
    std::string ph = e.value("ph", "");
    int64_t pid = int_field(e, "pid"), tid = int_field(e, "tid");
    if (ph == "M") {
      std::string name = e.value("name", "");
      const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
      if (name == "thread_name" && args.contains("name") && args["name"].is_string()) {
        names[{pid, tid}] = args["name"].get<std::string>();
      } else if (name == trace_format::kStatsEvent) {
        auto dropped = static_cast<uint64_t>(number_or(args, trace_format::kDroppedEventsArg, 0));
        if (dropped > 0) s.dropped_events[pid] += dropped;
      }
      continue;
    }
    s.ranks[pid] = true;
    if (ph == "B" || ph == "E" || ph == "X") tracks[{pid, tid}].push_back(&e);
  }
  Builder builder(s);
  for (auto& [key, track_events] : tracks) {
    auto it = names.find(key);
    std::string tensor = it != names.end() ? it->second : "tid " + std::to_string(key.second);
    builder.track(key.first, tensor, std::move(track_events));
  }
  builder.finish_stragglers();
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

  for (const auto& [pid, n] : s.dropped_events) {
    out += "\nNote: rank " + std::to_string(pid) + " dropped " + std::to_string(n) +
           " events (timeline queue full): its counts are incomplete\n";
  }
  if (s.unclosed_spans > 0) {
    out += "\nNote: " + std::to_string(s.unclosed_spans) +
           " spans never ended (a rank stopped mid-operation?); they are not counted\n";
  }
  if (s.unmatched_ends > 0) {
    out += "\nNote: " + std::to_string(s.unmatched_ends) + " span ends had no begin; ignored\n";
  }
  return out;
}

}  // namespace kolo::trace

// kolo-trace: tools for Kolo timeline files.
//   kolo-trace merge -o OUT.json IN0.json IN1.json ... one file, ranks on one clock
//   kolo-trace summary [--per-step] FILE.json ...      time per op kind / tensor / phase,
//                                                     which rank negotiations waited for,
//                                                     spans open at the end
#include <cstdio>
#include <string>
#include <vector>

#include "tools/trace/merge.h"
#include "tools/trace/summary.h"
#include "tools/trace/trace_file.h"

namespace {

constexpr const char* kUsage =
    "usage: kolo-trace merge -o OUT.json [--force] IN.json [IN.json ...]\n"
    "       kolo-trace summary [--per-step [--format text|csv|json]] FILE.json [FILE.json ...]\n"
    "merge:   combines per-rank timeline files, shifting each rank's timestamps by its\n"
    "         wall-clock zero so all ranks share one clock; accepts files of crashed runs.\n"
    "         Refuses an OUT that is one of the inputs, or that exists (unless --force).\n"
    "summary: count, bytes and time per op kind, tensor and phase, and a table of which rank\n"
    "         began NEGOTIATE last (the straggler) per rank. Several files are aligned as\n"
    "         merge aligns them. Spans still open at the end (a hang, a killed rank) are\n"
    "         listed with their rank, tensor, phase and since when.\n"
    "--per-step: per training step (STEP markers), the rank the negotiations waited for\n"
    "         most and by how much (total and largest lag).\n";

int fail(const std::string& message) {
  std::fprintf(stderr, "kolo-trace: %s\n", message.c_str());
  return 1;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "kolo-trace: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// Loads and aligns `paths`; prints the warnings. Returns false (after printing) on an error.
bool load_merged(const std::vector<std::string>& paths, kolo::trace::MergedTrace& merged) {
  std::vector<kolo::trace::TraceFile> files;
  for (const std::string& path : paths) {
    auto file = kolo::trace::load_trace(path);
    if (!file.ok()) {
      fail(file.status().message());
      return false;
    }
    files.push_back(std::move(file).value());
  }
  merged = kolo::trace::merge_traces(files);
  for (const std::string& w : merged.warnings)
    std::fprintf(stderr, "kolo-trace: warning: %s\n", w.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("missing command");
  const std::string command = args[0];
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "merge") {
    std::string out;
    bool force = false;
    std::vector<std::string> inputs;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "-o" || args[i] == "--output") {
        if (i + 1 == args.size()) return usage_error(args[i] + " needs a file name");
        out = args[++i];
      } else if (args[i] == "--force") {
        force = true;
      } else {
        inputs.push_back(args[i]);
      }
    }
    if (out.empty()) return usage_error("merge needs the output file: -o OUT.json");
    if (inputs.empty()) return usage_error("merge needs at least one input file");
    kolo::Status checked = kolo::trace::check_merge_output(out, inputs, force);
    if (!checked.ok()) return fail(checked.message());
    kolo::trace::MergedTrace merged;
    if (!load_merged(inputs, merged)) return 1;
    kolo::Status s = kolo::trace::write_trace(out, merged.events);
    if (!s.ok()) return fail(s.message());
    std::fprintf(stderr, "kolo-trace: wrote %zu events from %zu files to '%s'\n",
                 merged.events.size(), inputs.size(), out.c_str());
    return 0;
  }
  if (command == "summary") {
    bool per_step = false;
    kolo::trace::TableFormat format = kolo::trace::TableFormat::kText;
    std::vector<std::string> inputs;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--per-step") {
        per_step = true;
      } else if (args[i] == "--format") {
        if (i + 1 == args.size()) return usage_error("--format needs text, csv or json");
        const std::string& f = args[++i];
        if (f == "text")
          format = kolo::trace::TableFormat::kText;
        else if (f == "csv")
          format = kolo::trace::TableFormat::kCsv;
        else if (f == "json")
          format = kolo::trace::TableFormat::kJson;
        else
          return usage_error("--format is text, csv or json, got '" + f + "'");
      } else {
        inputs.push_back(args[i]);
      }
    }
    if (inputs.empty()) return usage_error("summary needs at least one trace file");
    kolo::trace::MergedTrace merged;
    if (!load_merged(inputs, merged)) return 1;
    kolo::trace::TraceSummary summary = kolo::trace::summarize(merged.events);
    std::fputs(per_step ? kolo::trace::format_per_step(summary, format).c_str()
                        : kolo::trace::format_summary(summary).c_str(),
               stdout);
    return 0;
  }
  return usage_error("unknown command '" + command + "' (expected merge or summary)");
}

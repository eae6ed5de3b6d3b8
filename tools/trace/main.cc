// kolo-trace: tools for Kolo timeline files.
//   kolo-trace merge OUT.json IN0.json IN1.json ...   one file, ranks on one clock
//   kolo-trace summary FILE.json [MORE.json ...]      time per op kind / tensor / phase,
//                                                     and which rank negotiations waited for
#include <cstdio>
#include <string>
#include <vector>

#include "tools/trace/merge.h"
#include "tools/trace/summary.h"
#include "tools/trace/trace_file.h"

namespace {

constexpr const char* kUsage =
    "usage: kolo-trace merge OUT.json IN.json [IN.json ...]\n"
    "       kolo-trace summary FILE.json [FILE.json ...]\n"
    "merge:   combines per-rank timeline files, shifting each rank's timestamps by its\n"
    "         wall-clock zero so all ranks share one clock; accepts files of crashed runs.\n"
    "summary: count, bytes and time per op kind, tensor and phase, and a table of which rank\n"
    "         began NEGOTIATE last (the straggler) per rank. Several files are aligned as\n"
    "         merge aligns them.\n";

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
    if (args.size() < 3) {
      return usage_error("merge needs an output file and at least one input file, got " +
                         std::to_string(args.size() - 1) + " file argument(s)");
    }
    kolo::trace::MergedTrace merged;
    if (!load_merged({args.begin() + 2, args.end()}, merged)) return 1;
    kolo::Status s = kolo::trace::write_trace(args[1], merged.events);
    if (!s.ok()) return fail(s.message());
    std::fprintf(stderr, "kolo-trace: wrote %zu events from %zu files to '%s'\n",
                 merged.events.size(), args.size() - 2, args[1].c_str());
    return 0;
  }
  if (command == "summary") {
    if (args.size() < 2) return usage_error("summary needs at least one trace file");
    kolo::trace::MergedTrace merged;
    if (!load_merged({args.begin() + 1, args.end()}, merged)) return 1;
    std::fputs(kolo::trace::format_summary(kolo::trace::summarize(merged.events)).c_str(), stdout);
    return 0;
  }
  return usage_error("unknown command '" + command + "' (expected merge or summary)");
}

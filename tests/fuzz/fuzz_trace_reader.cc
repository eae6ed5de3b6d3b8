// kolo-trace's reader (tools/trace): trace files from disk, possibly cut short by a crash or
// written by another tool, then merged and summarised as the CLI does. Bad text must be an
// error Status; whatever parses must merge and summarise without crashing. The first byte says
// whether the rest is read as text or, gzip-compressed, as a .gz file.
#include "fuzz_input.h"
#include "tools/trace/merge.h"
#include "tools/trace/summary.h"
#include "tools/trace/trace_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo::trace;
  if (size == 0) return 0;
  auto read = [&]() -> kolo::Result<TraceFile> {
    if (data[0] % 2 == 0) return parse_trace(kolo::fuzz::as_text(data + 1, size - 1), "fuzz.json");
    kolo::fuzz::MemoryFile file(data + 1, size - 1);  // gzip when it starts with the magic
    return load_trace(file.path());
  };
  kolo::Result<TraceFile> file = read();
  if (!file.ok()) return 0;
  for (const auto& event : file->events) FUZZ_CHECK(event.is_object());
  MergedTrace merged = merge_traces({*file, *file});
  TraceSummary summary = summarize(merged.events);
  (void)format_summary(summary);
  (void)format_per_step(summary, TableFormat::kCsv);
  return 0;
}

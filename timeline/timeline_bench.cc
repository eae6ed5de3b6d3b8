// Cost of recording on the hot path: one begin/end pair per iteration, with the timeline
// inactive (what every operation pays when no trace is requested) and active (the queue push;
// the writer thread formats and writes in the background). Reported as ns per event.
//
//   build/bin/timeline_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "timeline/timeline.h"

namespace {

std::string bench_path() {
  return "/tmp/kolo_timeline_bench_" + std::to_string(::getpid()) + ".json";
}

void report_per_event(benchmark::State& state, int events_per_iteration) {
  state.SetItemsProcessed(state.iterations() * events_per_iteration);
  state.counters["ns_per_event"] =
      benchmark::Counter(static_cast<double>(state.iterations() * events_per_iteration),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_BeginEndInactive(benchmark::State& state) {
  kolo::Timeline tl;
  for (auto _ : state) {
    if (tl.active()) tl.begin("grad/layer1.weight", "ALLREDUCE", {{"bytes", "4096"}});
    if (tl.active()) tl.end("grad/layer1.weight");
  }
  report_per_event(state, 2);
}
BENCHMARK(BM_BeginEndInactive);

// Arg(0): no args; Arg(1): one numeric arg on the begin, as the coordinator records bytes.
void BM_BeginEndActive(benchmark::State& state) {
  kolo::Timeline tl;
  std::string path = bench_path();
  if (!tl.start(path, 0).ok()) {
    state.SkipWithError("cannot start the timeline");
    return;
  }
  const bool with_args = state.range(0) != 0;
  for (auto _ : state) {
    if (with_args) {
      tl.begin("grad/layer1.weight", "ALLREDUCE", {{"bytes", "4096"}});
    } else {
      tl.begin("grad/layer1.weight", "ALLREDUCE");
    }
    tl.end("grad/layer1.weight");
  }
  tl.stop();
  state.counters["dropped"] = static_cast<double>(tl.dropped_events());
  std::remove(path.c_str());
  report_per_event(state, 2);
}
BENCHMARK(BM_BeginEndActive)->Arg(0)->Arg(1);

// Several recording threads share the queue's lock.
void BM_BeginEndActiveThreads(benchmark::State& state) {
  static kolo::Timeline* tl = nullptr;
  static std::string path;
  if (state.thread_index() == 0) {
    path = bench_path();
    tl = new kolo::Timeline();
    if (!tl->start(path, 0).ok()) state.SkipWithError("cannot start the timeline");
  }
  std::string tensor = "grad/t" + std::to_string(state.thread_index());
  for (auto _ : state) {
    tl->begin(tensor, "ALLREDUCE");
    tl->end(tensor);
  }
  if (state.thread_index() == 0) {
    tl->stop();
    delete tl;
    std::remove(path.c_str());
  }
  report_per_event(state, 2);
}
BENCHMARK(BM_BeginEndActiveThreads)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

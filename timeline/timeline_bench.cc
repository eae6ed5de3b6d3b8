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
    uint64_t op = 0;
    if (tl.active()) op = tl.begin_op("grad/layer1.weight", "ALLREDUCE", {{"bytes", "4096"}});
    if (tl.active()) tl.end(op);
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
    const uint64_t op = with_args
                            ? tl.begin_op("grad/layer1.weight", "ALLREDUCE", {{"bytes", "4096"}})
                            : tl.begin_op("grad/layer1.weight", "ALLREDUCE");
    tl.end(op);
  }
  tl.stop();
  // Dropped events cost less than kept ones; when the writer cannot keep up (a loaded machine)
  // this says how much of the measurement was the cheaper path.
  state.counters["dropped_fraction"] =
      static_cast<double>(tl.dropped_events()) / (2.0 * static_cast<double>(state.iterations()));
  std::remove(path.c_str());
  report_per_event(state, 2);
}
BENCHMARK(BM_BeginEndActive)->Arg(0)->Arg(1);

// What one tensor's operation records on a device step (coordinator/runtime.cc and
// executor_device.cc): its operation span with bytes/dtype/shape, QUEUE, NEGOTIATE, the end
// with backend/fused/status, and its CALLBACK span. Arg(0): with begin_op + begin and end +
// begin as separate calls; Arg(1): begin_op with a first phase and next(). ns per tensor.
void BM_TensorOperation(benchmark::State& state) {
  kolo::Timeline tl;
  std::string path = bench_path();
  if (!tl.start(path, 0).ok()) {
    state.SkipWithError("cannot start the timeline");
    return;
  }
  const bool fused_calls = state.range(0) != 0;
  const kolo::TimelineArgs outcome = {{"bytes", "4096"},   {"dtype", "float32"},
                                      {"shape", "[1024]"}, {"backend", "nccl"},
                                      {"fused", "161"},    {"status", "OK"}};
  for (auto _ : state) {
    kolo::TimelineArgs args = {{"bytes", "4096"}, {"dtype", "float32"}, {"shape", "[1024]"}};
    uint64_t op;
    if (fused_calls) {
      op = tl.begin_op("grad.layer1.weight", "ALLREDUCE", std::move(args), "QUEUE");
      tl.next(op, "NEGOTIATE");
    } else {
      op = tl.begin_op("grad.layer1.weight", "ALLREDUCE", std::move(args));
      tl.begin(op, "QUEUE");
      tl.end(op);
      tl.begin(op, "NEGOTIATE");
    }
    tl.end(op);
    tl.end_all(op, {}, outcome);
    tl.end(tl.begin_op("kolo:callbacks", "CALLBACK",
                       {{"tensor", "grad.layer1.weight"}, {"op", "ALLREDUCE"}}));
  }
  tl.stop();
  state.counters["dropped_fraction"] =
      static_cast<double>(tl.dropped_events()) / (4.0 * static_cast<double>(state.iterations()));
  std::remove(path.c_str());
  report_per_event(state, 1);
}
BENCHMARK(BM_TensorOperation)->Arg(0)->Arg(1);

// The writer thread's side: formatting and writing a queue of 100k recorded events, timed in
// stop() (the writer is only woken by stop() here, so recording and writing do not overlap).
void BM_WriterDrain(benchmark::State& state) {
  constexpr int kEvents = 100'000;
  kolo::TimelineOptions opts;
  opts.max_queued_events = kEvents + 16;
  opts.flush_interval = std::chrono::minutes(10);
  opts.wake_writer_at = kEvents + 16;
  std::string path = bench_path();
  for (auto _ : state) {
    state.PauseTiming();
    kolo::Timeline tl(opts);
    if (!tl.start(path, 0).ok()) {
      state.SkipWithError("cannot start the timeline");
      break;
    }
    for (int i = 0; i < kEvents / 2; ++i) {
      tl.end(tl.begin_op("grad/layer1.weight", "ALLREDUCE", {{"bytes", "4096"}}));
    }
    state.ResumeTiming();
    tl.stop();
  }
  std::remove(path.c_str());
  report_per_event(state, kEvents);
}
BENCHMARK(BM_WriterDrain)->Unit(benchmark::kMillisecond)->UseRealTime();

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
    tl->end(tl->begin_op(tensor, "ALLREDUCE"));
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

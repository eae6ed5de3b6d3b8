// Coordinator benchmarks (kolo-bench fusion | latency). They report, they do not assert.
//
// fusion: one ResNet-50 training step's gradient traffic: its 161 float32 gradient tensors
//   (25,557,032 elements, 102 MB) submitted in backward order and then waited, as a gradient
//   hook would. Rows: default fusion threshold, one flat 102 MB allreduce of the same bytes
//   through the coordinator (timed after each default step, in the same session), fusion
//   off, the default with the timeline recording, and the default/flat ratio of paired steps.
// latency: a 4-byte allreduce through the coordinator (submit + negotiate + execute) versus
//   the same call on a raw backend of the coordinator's kind, and the rate of 10,000 four-byte
//   tensors in one step. In steady state with few ranks the data rides in the negotiation message
//   (Note [Piggy-back] in coordinator/piggyback.cc), and the blocking call's own thread runs
//   the cycle (Note [Waiter drives] in coordinator/runtime.cc), so the coordinator costs one
//   exchange and no thread hand-off. --idle S then measures an idle job's CPU time.
//
// Run under kolorun, e.g.  kolorun -np 2 build/bin/kolo-bench fusion --iters 10
// Both take the flags of bench/flags.h (--help lists them) and --json FILE.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.h"
#include "bench/flags.h"
#include "bench/json_rows.h"
#include "bench/nccl_support.h"
#include "bench/workload.h"
#include "common/knobs.h"
#include "kolo/kolo.h"
#include "rendezvous/world.h"

namespace kolo::bench {
namespace {

using Clock = std::chrono::steady_clock;

// ---- fusion ------------------------------------------------------------------------------------

struct FusionOptions {
  int iters = 10;
  int warmup = 2;
  bool cuda = false;  // --device cuda: the gradients live on this rank's GPU
  std::string json_path;
};

// One session of steps: which knobs are set around init() and what each step submits.
struct FusionMode {
  const char* label;
  std::string threshold;  // KOLO_FUSION_THRESHOLD; empty: unset
  bool timeline;          // record a timeline
  // Every step is followed by one allreduce of all the bytes as one flat buffer, timed on its
  // own: the flat row, measured in the same session so that the ratio pairs neighbouring
  // steps (this VM's slow phases last seconds and would otherwise fall on one row only).
  bool and_flat;
};

// One step: every gradient submitted in backward order, then all waited.
Status resnet_step(const std::vector<TensorView>& grads) {
  std::vector<Handle> hs;
  hs.reserve(grads.size());
  for (size_t k = grads.size(); k-- > 0;)
    hs.push_back(allreduce_async("grad." + std::to_string(k), grads[k],
                                 {.reduction = {.op = ReduceOp::kAverage}}));
  for (auto& h : hs) KOLO_RETURN_IF_ERROR(h.wait().with_context("resnet step"));
  return Status::Ok();
}

struct FusionResult {
  double step_ms = 0;  // median
  int ranks = 0;
  // and_flat: the flat allreduce's median, and the median of step / flat over the pairs.
  double flat_ms = 0;
  double paired_ratio = 0;
};

// Initialises Kolo for the row, times its steps and shuts Kolo down.
//
// Note [Timeline row under KOLO_TIMELINE]: init() starts a timeline itself when KOLO_TIMELINE
// is set, and the row's own start_timeline() would then fail with "already started". So when
// the user set it, the timeline row records into the user's file through init() instead of
// its own, and the other rows run with KOLO_TIMELINE unset, so that they still measure no
// timeline.
Result<FusionResult> run_fusion_mode(const FusionMode& mode, const std::string& user_timeline,
                                     const FusionOptions& o,
                                     const std::vector<std::vector<int64_t>>& shapes) {
  set_env("KOLO_FUSION_THRESHOLD", mode.threshold);
  set_env("KOLO_TIMELINE", mode.timeline ? user_timeline : "");
  KOLO_RETURN_IF_ERROR(kolo::init().with_context("init"));
  ShutdownOnExit shutdown_on_exit;
  const int ranks = kolo::size();
  if (mode.timeline && user_timeline.empty()) {
    // start_timeline replaces {rank}: one file per rank.
    KOLO_RETURN_IF_ERROR(kolo::start_timeline("/tmp/kolo-bench-fusion-rank{rank}.json")
                             .with_context("start_timeline"));
  }
  int64_t total = 0;
  for (const auto& s : shapes) total += elements(s);
  // One buffer of every gradient back to back, on the host or on this rank's GPU; the views
  // slice it (the flat row views it whole).
  std::vector<float> host;
  DeviceBuffer device;
  float* base = nullptr;
  if (o.cuda) {
    KOLO_ASSIGN_OR_RETURN(device, device_ones(static_cast<size_t>(total) * sizeof(float),
                                              kolo::local_rank(), kolo::local_size()));
    base = static_cast<float*>(device.data.get());
  } else {
    host.assign(static_cast<size_t>(total), 1.0f);
    base = host.data();
  }
  auto view = [&](int64_t offset, std::vector<int64_t> shape) {
    TensorView v = view_of(base + offset, std::move(shape));
    if (o.cuda) v.device = Device::cuda(device.device);
    return v;
  };
  std::vector<TensorView> grads;
  int64_t offset = 0;
  for (const auto& s : shapes) {
    grads.push_back(view(offset, s));
    offset += elements(s);
  }
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  std::vector<double> times, flat_times, ratios;
  for (int64_t i = 0; i < int64_t{o.warmup} + o.iters; ++i) {
    auto t0 = Clock::now();
    KOLO_RETURN_IF_ERROR(resnet_step(grads));
    const double step = ms_since(t0);
    double flat = 0;
    if (mode.and_flat) {
      t0 = Clock::now();
      KOLO_RETURN_IF_ERROR(
          allreduce("flat", view(0, {total}), {.reduction = {.op = ReduceOp::kAverage}})
              .with_context("flat allreduce"));
      flat = ms_since(t0);
    }
    if (i < o.warmup) continue;
    times.push_back(step);
    if (mode.and_flat) {
      flat_times.push_back(flat);
      ratios.push_back(step / flat);
    }
  }
  if (mode.timeline && user_timeline.empty()) KOLO_RETURN_IF_ERROR(kolo::stop_timeline());
  KOLO_RETURN_IF_ERROR(kolo::shutdown().with_context("shutdown"));
  FusionResult r{median(times), ranks};
  if (mode.and_flat) {
    r.flat_ms = median(flat_times);
    r.paired_ratio = median(ratios);
  }
  return r;
}

Status run_fusion(const FusionOptions& o, const KnobSet& knobs) {
  const auto shapes = resnet50_shapes();
  int64_t total = 0;
  for (const auto& s : shapes) total += elements(s);
  const std::string threshold =
      knobs.is_set(KnobId::kFusionThreshold) ? knobs.raw(KnobId::kFusionThreshold) : "";
  const std::string user_timeline = knobs.text(KnobId::kTimeline);
  // Only rank 0 prints; init comes later.
  const bool root = !knobs.is_set(KnobId::kRank) || knobs.integer(KnobId::kRank) == 0;
  if (root) {
    std::printf(
        "# ResNet-50 gradients: %zu float32 tensors, %lld elements (%.1f MB); median of %d "
        "steps\n",
        shapes.size(), static_cast<long long>(total), total * 4 / 1e6, o.iters);
    if (!user_timeline.empty())
      std::printf(
          "# KOLO_TIMELINE=%s: the timeline row records there; the other rows run without it\n",
          user_timeline.c_str());
    std::printf("%-28s %8s %12s %12s\n", "mode", "ranks", "step_ms", "algbw_GB/s");
  }
  const FusionMode modes[] = {{"fusion default", threshold, false, true},
                              {"fusion off", "0", false, false},
                              {"fusion default + timeline", threshold, true, false}};
  nlohmann::json rows = nlohmann::json::array();
  auto print_row = [&](const char* label, const std::string& knob, bool timeline, int ranks,
                       double step_ms) {
    if (!root) return;
    const double algbw = total * 4.0 / (step_ms * 1e-3) / 1e9;
    std::printf("%-28s %8d %12.3f %12.2f\n", label, ranks, step_ms, algbw);
    std::fflush(stdout);
    rows.push_back({{"mode", label},
                    {"ranks", ranks},
                    {"step_ms", step_ms},
                    {"algbw_gbps", algbw},
                    {"fusion_threshold", knob.empty() ? "default" : knob},
                    {"timeline", timeline}});
  };
  double paired_ratio = 0;
  for (const FusionMode& mode : modes) {
    KOLO_ASSIGN_OR_RETURN(FusionResult r, run_fusion_mode(mode, user_timeline, o, shapes));
    print_row(mode.label, mode.threshold, mode.timeline, r.ranks, r.step_ms);
    if (mode.and_flat) {
      print_row("flat 102 MB allreduce", mode.threshold, false, r.ranks, r.flat_ms);
      paired_ratio = r.paired_ratio;
    }
  }
  if (root) {
    std::printf("# fusion default / flat, median over the %d pairs of neighbouring steps: %.3f\n",
                o.iters, paired_ratio);
    rows.push_back({{"mode", "fusion default / flat, paired steps"}, {"ratio", paired_ratio}});
  }
  set_env("KOLO_FUSION_THRESHOLD", threshold);
  set_env("KOLO_TIMELINE", user_timeline);
  if (root && !o.json_path.empty()) return write_json_rows(o.json_path, rows);
  return Status::Ok();
}

// ---- latency -----------------------------------------------------------------------------------

// The rate step keeps a name, a handle and a float per tensor in memory at once.
constexpr int kMaxTensors = 1000000;

struct LatencyOptions {
  int iters = 1000;
  int warmup = 10;
  int tensors = 10000;
  int idle_s = 0;  // --idle: seconds of an idle job whose CPU time is measured; 0: none
  std::string json_path;
};

// This process's CPU time so far (every thread, user and system), in milliseconds.
double process_cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

// Median microseconds of `call` over o.iters calls after o.warmup untimed ones.
template <typename Call>
Result<double> median_us(const LatencyOptions& o, Call call) {
  std::vector<double> us;
  for (int64_t i = 0; i < int64_t{o.warmup} + o.iters; ++i) {
    auto t0 = Clock::now();
    KOLO_RETURN_IF_ERROR(call());
    if (i >= o.warmup)
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(us);
}

Status run_latency(const LatencyOptions& o, const KnobSet& knobs) {
  KOLO_RETURN_IF_ERROR(kolo::init().with_context("init"));
  ShutdownOnExit shutdown_on_exit;
  float x = 1.0f;
  KOLO_ASSIGN_OR_RETURN(double coordinator_us, median_us(o, [&] {
                          return allreduce("lat", view_of(&x, {1})).with_context("allreduce");
                        }));
  // The same call on a raw backend of its own, bypassing the coordinator.
  double raw_us = -1;
  std::string raw_name;
  // The raw comparison needs kolorun's store; under mpirun the world seen here has one rank.
  KOLO_ASSIGN_OR_RETURN(World world, world_from_knobs(knobs));
  if (kolo::size() > 1 && world.size != kolo::size() && kolo::rank() == 0)
    std::fprintf(stderr, "latency: the raw backend comparison runs under kolorun only\n");
  if (kolo::size() > 1 && world.size == kolo::size()) {
    const BackendContext ctx = backend_context(world, knobs, "kolo-bench/latency-raw");
    // The backend the coordinator runs on: KOLO_CPU_OPERATIONS, else the world's default.
    raw_name = knobs.is_set(KnobId::kCpuOperations) ? knobs.text(KnobId::kCpuOperations)
                                                    : default_cpu_backend(world);
    KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, create_backend(raw_name, ctx));
    KOLO_ASSIGN_OR_RETURN(raw_us, median_us(o, [&] {
                            return backend->allreduce(&x, &x, 1, DataType::kFloat32, {})
                                .with_context("raw allreduce");
                          }));
  }
  // Rate of many tiny tensors in one step (twice: the second runs from the response cache).
  std::vector<float> small(o.tensors, 1.0f);
  double rate = 0;
  for (int step = 0; step < 2; ++step) {
    auto t0 = Clock::now();
    std::vector<Handle> hs;
    hs.reserve(o.tensors);
    for (int i = 0; i < o.tensors; ++i)
      hs.push_back(allreduce_async("tiny." + std::to_string(i), view_of(&small[i], {1})));
    for (auto& h : hs) KOLO_RETURN_IF_ERROR(h.wait().with_context("tiny allreduce"));
    rate = o.tensors / std::chrono::duration<double>(Clock::now() - t0).count();
  }
  // An idle job costs its heartbeats only: what the background thread spends while nobody
  // submits (Note [Cycle] in coordinator/runtime.cc).
  double idle_cpu_ms = -1;
  if (o.idle_s > 0) {
    const double before = process_cpu_ms();
    std::this_thread::sleep_for(std::chrono::seconds(o.idle_s));
    idle_cpu_ms = process_cpu_ms() - before;
  }
  if (kolo::rank() == 0) {
    nlohmann::json rows = nlohmann::json::array();
    auto row = [&](const std::string& measurement, const char* format, double value,
                   const char* unit) {
      std::printf("%-40s %8d ", measurement.c_str(), kolo::size());
      std::printf(format, value);
      std::printf("\n");
      rows.push_back({{"measurement", measurement},
                      {"ranks", kolo::size()},
                      {"value", value},
                      {"unit", unit}});
    };
    std::printf("%-40s %8s %12s\n", "measurement", "ranks", "value");
    row("coordinator allreduce 4 B, median us", "%12.1f", coordinator_us, "us");
    if (raw_us >= 0)
      row("raw " + raw_name + " backend allreduce 4 B, median us", "%12.1f", raw_us, "us");
    row(std::to_string(o.tensors) + " x 4 B tensors/s (cached step)", "%12.0f", rate, "tensors/s");
    if (idle_cpu_ms >= 0)
      row("idle " + std::to_string(o.idle_s) + " s: CPU ms (rank 0 process)", "%12.1f", idle_cpu_ms,
          "ms");
    if (!o.json_path.empty()) KOLO_RETURN_IF_ERROR(write_json_rows(o.json_path, rows));
  }
  return kolo::shutdown().with_context("shutdown");
}

}  // namespace

int run_fusion_bench(const KnobSet& knobs, int argc, char** argv) {
  FusionOptions o;
  CommandLine line;
  line.command = "fusion";
  line.about =
      "Times one ResNet-50 training step's gradient allreduces (161 float32 tensors, 102 MB)\n"
      "through the coordinator: default fusion threshold, one flat allreduce of the same\n"
      "bytes after each of its steps, fusion off, the default with a timeline recording, and\n"
      "the median default/flat ratio of neighbouring steps.\n";
  auto choose_device = [&o](std::string_view v) {
    if (v != "cpu" && v != "cuda") return false;
    o.cuda = v == "cuda";
    return true;
  };
  line.flags = {int_flag("--iters", "N", &o.iters, 1, kIntMax, "timed steps per row"),
                int_flag("--warmup", "N", &o.warmup, 0, kIntMax, "untimed steps per row first"),
                choice_flag("--device", "DEVICE", {"cpu", "cuda"}, choose_device, "cpu",
                            "where the gradients live (cuda: this rank's GPU, through nccl)"),
                json_flag(&o.json_path)};
  line.notes =
      "KOLO_FUSION_THRESHOLD, when set, is the default rows' threshold. With KOLO_TIMELINE set\n"
      "the timeline row records into that file and the other rows run without a timeline.\n"
      "--device cuda needs a GPU per rank (a build with NCCL); the default fusion row then\n"
      "measures nccl's device fusion buffer.\n";
  return run_command(line, argc, argv, [&] { return run_fusion(o, knobs); });
}

int run_latency_bench(const KnobSet& knobs, int argc, char** argv) {
  LatencyOptions o;
  CommandLine line;
  line.command = "latency";
  line.about =
      "Times a 4-byte allreduce through the coordinator and on a raw backend of the same kind\n"
      "(under kolorun with 2+ ranks), and the rate of --tensors 4-byte tensors in one step.\n";
  line.flags = {int_flag("--iters", "N", &o.iters, 1, kIntMax, "timed calls per measurement"),
                int_flag("--warmup", "N", &o.warmup, 0, kIntMax, "untimed calls first"),
                int_flag("--tensors", "N", &o.tensors, 1, kMaxTensors, "tensors in the rate step"),
                int_flag("--idle", "SECONDS", &o.idle_s, 0, 3600,
                         "then sit idle this long and report the CPU time it cost (0: skip)"),
                json_flag(&o.json_path)};
  return run_command(line, argc, argv, [&] { return run_latency(o, knobs); });
}

}  // namespace kolo::bench

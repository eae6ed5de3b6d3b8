// kolo-bench autotune: does the autotuner find the best configuration, and how fast?
//
// The workload is the ResNet-50 gradient step of `kolo-bench fusion` with a simulated backward
// pass: gradients become ready output layer first, each after compute time proportional to its
// parameter count (--compute-ns-per-param, spent spinning, as compute would), and are grouped
// into buckets as DistributedOptimizer does (Note [Buckets]): a bucket's grouped allreduce is
// submitted when its last gradient is ready, so communication overlaps the rest of backward and
// the bucket size matters. Each step ends with kolo::mark_step().
//
// First an exhaustive sweep: every fusion threshold x cycle time x bucket size of a grid (Kolo
// re-initialised per configuration), the median of --iters steps each. Then the tuner from the
// defaults (KOLO_AUTOTUNE=1, search box = the sweep's box) for --tune-steps steps, then
// 2 x --iters more steps of the configuration it settled on ("tuned in place": what training
// goes on with).
//
// Then the comparison rounds: the tuned configuration, the defaults and the sweep's best, each
// from a fresh init, --rounds times, the order rotated each round (so that a load that rises
// or falls meanwhile favours none of them). tuned/best and tuned/default are the medians of
// these, not of the sweep's rows: on a shared machine a configuration's step time drifts by 2x
// over the minutes a sweep takes (docs/benchmarks.md), and the smallest of 48 noisy sweep rows
// is biased low. "In place / fresh" compares the tuned configuration as the tuner left the job
// (measured just before the rounds) with the same configuration set at init: well above 1 it
// would be a defect of the tuner's state rather than of its choice; it is the one ratio that
// spans the rounds' time, so it carries their drift.
// Printed: the steps until the tuner's last change took effect ("steps to converge"), or "did
// not converge within N steps" when it changed again while the bench measured (then every rank
// exits non-zero, after the rest: bench/autotune_convergence.h), every step time and the ratios.
// Rank 0 prints; run under kolorun or mpirun with 2+ ranks.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/autotune_convergence.h"
#include "bench/flags.h"
#include "bench/json_rows.h"
#include "bench/workload.h"
#include "common/knobs.h"
#include "kolo/kolo.h"
#include "kolo/units.h"

namespace kolo::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct AutotuneOptions {
  int iters = 5;
  int warmup = 1;
  int tune_steps = 200;
  int rounds = 3;
  int compute_ns_per_param = 1;
  std::string json_path;
};

// The sweep's grid (and the tuner's box): the registry's defaults are on it.
const std::vector<uint64_t> kThresholds = {1 << 20, 4 << 20, 16 << 20, 64 << 20};
const std::vector<int64_t> kCycleUs = {250, 1000, 4000};
const std::vector<int64_t> kBuckets = {1 << 20, 4 << 20, 16 << 20, 64 << 20};

struct Config {
  uint64_t threshold;
  int64_t cycle_us;
  int64_t bucket;
  std::string describe() const {
    return format_size(threshold) + ", " + format_duration(std::chrono::microseconds(cycle_us)) +
           ", " + format_size(static_cast<uint64_t>(bucket));
  }
};

class Workload {
 public:
  explicit Workload(const AutotuneOptions& o) : shapes_(resnet50_shapes()), o_(o) {
    for (const auto& s : shapes_) grads_.emplace_back(elements(s), 1.0f);
  }

  // One training step with buckets of `bucket` bytes; returns its wall time in ms.
  Result<double> step(int64_t bucket) {
    const auto t0 = Clock::now();
    std::vector<Handle> handles;
    std::vector<TensorView> views;
    int64_t bytes = 0;
    int bucket_index = 0;
    auto submit = [&] {
      if (views.empty()) return;
      handles.push_back(grouped_allreduce_async("grad.bucket" + std::to_string(bucket_index++),
                                                std::move(views),
                                                {.reduction = {.op = ReduceOp::kAverage}}));
      views.clear();
      bytes = 0;
    };
    for (size_t k = grads_.size(); k-- > 0;) {  // backward: output layer first
      spin(static_cast<int64_t>(grads_[k].size()) * o_.compute_ns_per_param);
      const int64_t size = static_cast<int64_t>(grads_[k].size() * sizeof(float));
      if (!views.empty() && bytes + size > bucket) submit();
      views.push_back(view_of(grads_[k].data(), shapes_[k]));
      bytes += size;
    }
    submit();
    for (auto& h : handles) KOLO_RETURN_IF_ERROR(h.wait().with_context("autotune step"));
    KOLO_RETURN_IF_ERROR(mark_step());
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

 private:
  static void spin(int64_t ns) {
    const auto until = Clock::now() + std::chrono::nanoseconds(ns);
    while (Clock::now() < until) {
    }
  }
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::vector<float>> grads_;
  const AutotuneOptions& o_;
};

// Median step time of one configuration, Kolo initialised with it.
Result<double> measure(const Config& c, const AutotuneOptions& o, Workload& w) {
  set_env("KOLO_FUSION_THRESHOLD", std::to_string(c.threshold));
  set_env("KOLO_CYCLE_TIME", std::to_string(c.cycle_us) + "us");
  KOLO_RETURN_IF_ERROR(kolo::init().with_context("init"));
  ShutdownOnExit shutdown_on_exit;
  std::vector<double> times;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    KOLO_ASSIGN_OR_RETURN(double ms, w.step(c.bucket));
    if (i >= o.warmup) times.push_back(ms);
  }
  KOLO_RETURN_IF_ERROR(kolo::shutdown().with_context("shutdown"));
  return median(times);
}

struct Tuned {
  Config config;  // the last configuration applied in --tune-steps steps
  Convergence convergence;
  int64_t converged_at = 0;  // the step from which that configuration applied
  double step_ms = 0;
};

Result<Tuned> tune(const Config& defaults, const AutotuneOptions& o, Workload& w) {
  set_env("KOLO_FUSION_THRESHOLD", "");
  set_env("KOLO_CYCLE_TIME", "");
  set_env("KOLO_AUTOTUNE", "1");
  set_env("KOLO_AUTOTUNE_FUSION_FROM", std::to_string(kThresholds.front()));
  set_env("KOLO_AUTOTUNE_FUSION_TO", std::to_string(kThresholds.back()));
  set_env("KOLO_AUTOTUNE_CYCLE_FROM", std::to_string(kCycleUs.front()) + "us");
  set_env("KOLO_AUTOTUNE_CYCLE_TO", std::to_string(kCycleUs.back()) + "us");
  set_env("KOLO_AUTOTUNE_BUCKET_FROM", std::to_string(kBuckets.front()));
  set_env("KOLO_AUTOTUNE_BUCKET_TO", std::to_string(kBuckets.back()));
  KOLO_RETURN_IF_ERROR(kolo::init().with_context("init (autotune)"));
  set_env("KOLO_AUTOTUNE", "");
  ShutdownOnExit shutdown_on_exit;
  int64_t bucket = defaults.bucket;
  for (int i = 0; i < o.tune_steps; ++i) {
    if (auto b = tuned_bucket_bytes()) bucket = *b;
    KOLO_RETURN_IF_ERROR(w.step(bucket).status());
  }
  Tuned t{defaults};
  TuningRun run{.tune_steps = o.tune_steps, .window_steps = 2 * o.iters};
  // Only the decisions in effect by now: one for a step still ahead may have reached some ranks
  // and not others, and the ranks must agree on the configuration they measure next (issue 30).
  const auto history = autotune_history(steps_marked());
  run.changes_at_end = history.size();
  if (!history.empty()) {
    const AppliedTuning& last = history.back();
    t.config = {last.fusion_threshold, last.cycle_time_ns / 1000, last.bucket_bytes};
    t.converged_at = run.last_change_step = last.from_step;
  }
  std::vector<double> times;
  for (int i = 0; i < run.window_steps; ++i) {
    if (auto b = tuned_bucket_bytes()) bucket = *b;
    KOLO_ASSIGN_OR_RETURN(double ms, w.step(bucket));
    times.push_back(ms);
  }
  run.changes_after_window = autotune_history(steps_marked()).size();
  t.convergence = judge_convergence(run);
  t.step_ms = median(times);
  KOLO_RETURN_IF_ERROR(kolo::shutdown().with_context("shutdown"));
  return t;
}

// The configuration of a job that sets nothing: the registry's defaults, and
// DistributedOptimizer's bucket (no knob: the autotuner's third dimension only).
Config default_config() {
  const KnobSet& d = KnobSet::defaults();
  return {
      d.size(KnobId::kFusionThreshold),
      std::chrono::duration_cast<std::chrono::microseconds>(d.duration(KnobId::kCycleTime)).count(),
      int64_t{4} << 20};
}

Status run_autotune(const AutotuneOptions& o, const KnobSet& knobs) {
  const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");  // mpirun's, not a Kolo knob
  const bool root = knobs.is_set(KnobId::kRank)
                        ? knobs.integer(KnobId::kRank) == 0
                        : mpi_rank == nullptr || std::string(mpi_rank) == "0";
  Workload w(o);
  const Config defaults = default_config();
  nlohmann::json rows = nlohmann::json::array();
  if (root)
    std::printf("# sweep: threshold x cycle x bucket, median of %d steps, %d ns compute/param\n",
                o.iters, o.compute_ns_per_param);
  Config best = defaults;
  double best_ms = 1e300, default_ms = 0;
  for (uint64_t th : kThresholds)
    for (int64_t cy : kCycleUs)
      for (int64_t bu : kBuckets) {
        const Config c{th, cy, bu};
        KOLO_ASSIGN_OR_RETURN(double ms, measure(c, o, w));
        if (root) {
          std::printf("%-36s %10.2f ms\n", c.describe().c_str(), ms);
          std::fflush(stdout);
        }
        rows.push_back({{"row", "sweep"},
                        {"threshold", th},
                        {"cycle_us", cy},
                        {"bucket", bu},
                        {"step_ms", ms}});
        if (ms < best_ms) best_ms = ms, best = c;
        if (th == defaults.threshold && cy == defaults.cycle_us && bu == defaults.bucket)
          default_ms = ms;
      }
  KOLO_ASSIGN_OR_RETURN(Tuned t, tune(defaults, o, w));
  // The comparison rounds (see the top of this file): fresh inits, the order rotated.
  const Config* configs[] = {&t.config, &defaults, &best};
  std::vector<double> times[3];  // tuned (fresh), default, best
  for (int r = 0; r < o.rounds; ++r)
    for (int k = 0; k < 3; ++k) {
      const int which = (k + r) % 3;
      KOLO_ASSIGN_OR_RETURN(double ms, measure(*configs[which], o, w));
      times[which].push_back(ms);
    }
  const std::vector<double>&tuned_fresh = times[0], &default_now = times[1], &best_now = times[2];
  const double tuned_fresh_ms = median(tuned_fresh), default_now_ms = median(default_now),
               best_now_ms = median(best_now);
  if (root) {
    std::printf("# sweep: default (%s) %.2f ms, best (%s) %.2f ms\n", defaults.describe().c_str(),
                default_ms, best.describe().c_str(), best_ms);
    std::printf("# after tuning, median of %d fresh inits each, in turn:\n", o.rounds);
    std::printf("default (%s)                %10.2f ms\n", defaults.describe().c_str(),
                default_now_ms);
    std::printf("sweep best (%s)             %10.2f ms\n", best.describe().c_str(), best_now_ms);
    std::printf("tuned, fresh init (%s)      %10.2f ms\n", t.config.describe().c_str(),
                tuned_fresh_ms);
    std::printf("tuned, in place (%s)        %10.2f ms\n", t.config.describe().c_str(), t.step_ms);
    std::printf("%s; tuned/best %.3f, tuned/default %.3f, in place/fresh %.3f\n",
                t.convergence.summary.c_str(), tuned_fresh_ms / best_now_ms,
                tuned_fresh_ms / default_now_ms, t.step_ms / tuned_fresh_ms);
    rows.push_back({{"row", "summary"},
                    {"sweep_default_ms", default_ms},
                    {"sweep_best_ms", best_ms},
                    {"default_ms", default_now_ms},
                    {"best_ms", best_now_ms},
                    {"tuned_ms", t.step_ms},
                    {"tuned_fresh_ms", tuned_fresh_ms},
                    {"converged", t.convergence.converged},
                    {"steps_to_converge", t.convergence.converged ? nlohmann::json(t.converged_at)
                                                                  : nlohmann::json(nullptr)},
                    {"tuned_threshold", t.config.threshold},
                    {"tuned_cycle_us", t.config.cycle_us},
                    {"tuned_bucket", t.config.bucket}});
    if (!o.json_path.empty()) KOLO_RETURN_IF_ERROR(write_json_rows(o.json_path, rows));
  }
  // Every rank holds the same history, so every rank fails alike.
  if (!t.convergence.converged) return Status::Timeout("autotune " + t.convergence.summary);
  return Status::Ok();
}

}  // namespace

int run_autotune_bench(const KnobSet& knobs, int argc, char** argv) {
  AutotuneOptions o;
  CommandLine line;
  line.command = "autotune";
  line.about =
      "ResNet-50's gradient step with a simulated backward pass: an exhaustive sweep of fusion\n"
      "threshold x cycle time x bucket size, then the autotuner from the defaults, then the\n"
      "tuned, default and best configurations measured side by side; prints the steps the\n"
      "tuner took, its step time and the ratios to the best and the defaults.\n";
  line.flags = {int_flag("--iters", "N", &o.iters, 1, kIntMax, "timed steps per configuration"),
                int_flag("--warmup", "N", &o.warmup, 0, kIntMax, "untimed steps per configuration"),
                int_flag("--tune-steps", "N", &o.tune_steps, 1, kIntMax,
                         "steps the tuner gets before its result is timed"),
                int_flag("--rounds", "N", &o.rounds, 1, 100,
                         "fresh-init measurements of tuned, default and best after tuning"),
                int_flag("--compute-ns-per-param", "N", &o.compute_ns_per_param, 0, 1000000,
                         "simulated backward time per parameter of a layer"),
                json_flag(&o.json_path)};
  return run_command(line, argc, argv, [&] { return run_autotune(o, knobs); });
}

}  // namespace kolo::bench

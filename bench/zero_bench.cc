// kolo-bench zero: the step time and the memory per rank of ZeRO stages 1 and 2
// (framework/distributed/sharded_optimizer.h) against the unsharded DistributedOptimizer, on a
// synthetic model of --params parameters in --layers tensors. Its "backward" is
// loss = sum_i sum(p_i * x_i) (so each gradient is final in turn, from the last layer, and the
// hooks start communication during backward as a real model's would); the optimizer is Adam or
// SGD with momentum. Runs alternate between the modes (--runs rounds of none, stage 1, stage 2)
// so that drift on a shared machine hits every mode alike; each run's median step time, then
// the median over runs, is printed with its ratio to the unsharded mode. Run it under kolorun
// with 2+ ranks. Reports; never asserts a time.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "bench/json_rows.h"
#include "bench/workload.h"
#include "common/knobs.h"
#include "framework/distributed/distributed_optimizer.h"
#include "framework/distributed/sharded_optimizer.h"
#include "framework/functional.h"
#include "framework/memory_stats.h"
#include "framework/optim/adam.h"
#include "framework/optim/serialize.h"
#include "framework/optim/sgd.h"
#include "kolo/kolo.h"

namespace kolo::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct ZeroOptions {
  uint64_t params = 4'000'000;
  int layers = 8;
  int steps = 20;
  int runs = 5;
  uint64_t bucket_bytes = 4 << 20;
  std::string optimizer = "adam";
  std::string json_path;
};

struct Synthetic {
  std::vector<fw::Tensor> params, inputs;
  fw::NamedTensors named() const {
    fw::NamedTensors out;
    for (size_t i = 0; i < params.size(); ++i)
      out.emplace_back("layer" + std::to_string(i), params[i]);
    return out;
  }
  void backward() const {
    fw::Tensor loss = fw::sum(fw::mul(params[0], inputs[0]));
    for (size_t i = 1; i < params.size(); ++i)
      loss = fw::add(loss, fw::sum(fw::mul(params[i], inputs[i])));
    loss.backward();
  }
};

Synthetic make_model(const ZeroOptions& o) {
  Synthetic m;
  fw::Generator gen(5 + static_cast<uint64_t>(rank()));
  const int64_t per = static_cast<int64_t>(o.params) / o.layers;
  for (int i = 0; i < o.layers; ++i) {
    m.params.push_back(fw::Tensor::full({per}, 0.01f).set_requires_grad(true));
    m.params.back().set_memory_category(fw::MemoryCategory::kParameters);
    m.inputs.push_back(fw::Tensor::randn({per}, 0.f, 1.f, &gen));
  }
  return m;
}

std::unique_ptr<fw::Optimizer> make_optimizer(const ZeroOptions& o, const Synthetic& m) {
  if (o.optimizer == "sgd")
    return std::make_unique<fw::SGD>(m.params, fw::SgdOptions{.lr = 1e-3, .momentum = 0.9});
  return std::make_unique<fw::Adam>(m.params, fw::AdamOptions{.lr = 1e-3});
}

struct Run {
  double step_ms = 0;
  // The allocator's count (framework/memory_stats.h) after the last step, with the peaks since
  // the model was built: what this mode's model, optimizer and steps held.
  fw::MemoryStats memory;
};

// One run of `mode` (0: DistributedOptimizer; 1, 2: ZeRO stage): the median step time of
// o.steps steps after two warm-up steps.
Run run_mode(const ZeroOptions& o, int mode) {
  fw::reset_memory_peaks();  // the previous mode's tensors are gone
  Synthetic m = make_model(o);
  std::unique_ptr<fw::Optimizer> inner = make_optimizer(o, m);
  fw::DistributedOptions d{.bucket_bytes = static_cast<int64_t>(o.bucket_bytes)};
  std::unique_ptr<fw::DistributedOptimizer> plain;
  std::unique_ptr<fw::ShardedOptimizer> sharded;
  if (mode == 0) {
    plain = std::make_unique<fw::DistributedOptimizer>(*inner, m.named(), d);
  } else {
    fw::ShardedOptions s{.distributed = d};
    s.distributed.name_prefix = "zero";
    s.stage = mode == 2 ? fw::ShardStage::kGradients : fw::ShardStage::kOptimizerState;
    sharded = std::make_unique<fw::ShardedOptimizer>(*inner, m.named(), s);
  }
  std::vector<double> times;
  for (int step = 0; step < o.steps + 2; ++step) {
    const auto t0 = Clock::now();
    if (plain) {
      plain->zero_grad();
      m.backward();
      plain->step();
    } else {
      sharded->zero_grad();
      m.backward();
      sharded->step();
    }
    if (step >= 2)
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  Run run;
  run.step_ms = median(times);
  run.memory = fw::memory_stats();
  return run;
}

// {"<category>": {"current": bytes, "peak": bytes}, ..., "total": {...}}.
nlohmann::json memory_json(const fw::MemoryStats& mem) {
  nlohmann::json out = nlohmann::json::object();
  for (int c = 0; c < fw::kNumMemoryCategories; ++c)
    out[std::string(fw::memory_category_name(static_cast<fw::MemoryCategory>(c)))] = {
        {"current", mem.current[c]}, {"peak", mem.peak[c]}};
  out["total"] = {{"current", mem.total_current}, {"peak", mem.total_peak}};
  return out;
}

Status run_zero(const ZeroOptions& o) {
  KOLO_RETURN_IF_ERROR(init());
  ShutdownOnExit stop;
  const bool print = rank() == 0;
  std::vector<std::vector<double>> medians(3);
  std::vector<Run> last(3);
  for (int r = 0; r < o.runs; ++r) {
    for (int mode = 0; mode < 3; ++mode) {
      last[mode] = run_mode(o, mode);
      medians[mode].push_back(last[mode].step_ms);
    }
  }
  if (print)
    std::printf("%-6s %6s %11s %10s %10s %7s %10s %10s %10s %10s\n", "shard", "ranks", "params",
                "optimizer", "step_ms", "ratio", "state_MB", "grads_MB", "comm_MB", "peak_MB");
  nlohmann::json rows = nlohmann::json::array();
  const double base = median(medians[0]);
  for (int mode = 0; mode < 3; ++mode) {
    const double ms = median(medians[mode]);
    const fw::MemoryStats& mem = last[mode].memory;
    using C = fw::MemoryCategory;
    auto mb = [&](C c) { return static_cast<double>(mem.current_of(c)) / 1e6; };
    if (print)
      std::printf("%-6d %6d %11llu %10s %10.3f %7.3f %10.3f %10.3f %10.3f %10.3f\n", mode, size(),
                  static_cast<unsigned long long>(o.params), o.optimizer.c_str(), ms, ms / base,
                  mb(C::kOptimizerState), mb(C::kGradients), mb(C::kCommunication),
                  static_cast<double>(mem.total_peak) / 1e6);
    rows.push_back({{"shard", mode},
                    {"ranks", size()},
                    {"params", o.params},
                    {"optimizer", o.optimizer},
                    {"step_ms_median", ms},
                    {"step_ms_runs", medians[mode]},
                    {"ratio_to_unsharded", ms / base},
                    {"memory", memory_json(mem)}});
  }
  if (print && !o.json_path.empty()) KOLO_RETURN_IF_ERROR(write_json_rows(o.json_path, rows));
  return shutdown();
}

}  // namespace

int run_zero_bench(const KnobSet& knobs, int argc, char** argv) {
  (void)knobs;
  ZeroOptions o;
  CommandLine line;
  line.command = "zero";
  line.about =
      "Step time and memory per rank of ZeRO stages 1 and 2 against the unsharded\n"
      "DistributedOptimizer on a synthetic model (--params parameters in --layers tensors).\n"
      "Modes alternate, --runs rounds; medians of each run's median step, and their ratio to\n"
      "the unsharded mode (shard 0). Run under kolorun with 2+ ranks.\n";
  line.flags = {size_flag("--params", &o.params, 1, "parameters of the synthetic model"),
                int_flag("--layers", "N", &o.layers, 1, 10000, "parameter tensors"),
                int_flag("--steps", "N", &o.steps, 1, kIntMax, "timed steps per run"),
                int_flag("--runs", "N", &o.runs, 1, kIntMax, "alternating rounds of the 3 modes"),
                size_flag("--bucket-size", &o.bucket_bytes, 0, "gradient bucket bytes"),
                choice_flag(
                    "--optimizer", "NAME", {"adam", "sgd"},
                    [&](std::string_view v) {
                      const bool known = v == "adam" || v == "sgd";
                      if (known) o.optimizer = std::string(v);
                      return known;
                    },
                    "adam", "Adam, or SGD with momentum 0.9"),
                json_flag(&o.json_path)};
  return run_command(line, argc, argv, [&] { return run_zero(o); });
}

}  // namespace kolo::bench

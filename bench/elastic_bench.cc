// kolo-bench elastic: the cost of kolo::elastic::State's commit(), restore() and sync() for the
// state a rank of the example jobs holds: the parameters of examples/train_fashion_mnist's MLP
// and CNN and of ResNet-50, each with an SGD momentum buffer (the example's optimizer), two
// counters and a sampler's byte string. commit() and restore() are local copies, so their
// GB/s is this machine's memcpy; sync() is one allgather of the layout and one broadcast of the
// snapshot, so run it under kolorun with 2+ ranks to time the transfer. Reports; never asserts
// a time.
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "bench/json_rows.h"
#include "bench/workload.h"
#include "common/knobs.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct ElasticOptions {
  int iters = 20;
  std::string model = "all";
  std::string json_path;
};

struct Model {
  std::string name;
  std::vector<std::vector<int64_t>> shapes;  // parameters, in order
};

// The example's models (examples/train_fashion_mnist/models.h): weight then bias per layer.
std::vector<Model> models(const std::string& which) {
  std::vector<Model> all = {
      {"mlp", {{512, 784}, {512}, {256, 512}, {256}, {10, 256}, {10}}},
      {"cnn", {{16, 1, 3, 3}, {16}, {32, 16, 3, 3}, {32}, {128, 1568}, {128}, {10, 128}, {10}}},
      {"resnet50", resnet50_shapes()}};
  std::vector<Model> out;
  for (Model& m : all)
    if (which == "all" || which == m.name) out.push_back(std::move(m));
  return out;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Times `call` `iters` times; the median in ms.
Result<double> median_ms(int iters, const std::function<Status()>& call) {
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    KOLO_RETURN_IF_ERROR(call());
    times.push_back(ms_since(t0));
  }
  return median(times);
}

struct Row {
  int64_t tensors = 0, elements = 0;
  double bytes = 0, first_ms = 0, commit_ms = 0, restore_ms = 0, sync_ms = 0;
};

Result<Row> measure(const Model& model, int iters) {
  Row row;
  std::vector<std::vector<float>> memory;  // parameters, then momentum buffers
  for (int copy = 0; copy < 2; ++copy)
    for (const auto& shape : model.shapes) memory.emplace_back(elements(shape), 0.5f + copy);
  int64_t epoch = 1, step = 100;
  std::string sampler(64, 's');
  elastic::State state("bench." + model.name);
  for (size_t i = 0; i < memory.size(); ++i) {
    const auto& shape = model.shapes[i % model.shapes.size()];
    const std::string key = (i < model.shapes.size() ? "param." : "momentum.") +
                            std::to_string(i % model.shapes.size());
    KOLO_RETURN_IF_ERROR(state.add_tensor(key, view_of(memory[i].data(), shape)));
    row.elements += elements(shape);
    row.bytes += 4.0 * static_cast<double>(elements(shape));
  }
  row.tensors = static_cast<int64_t>(memory.size());
  KOLO_RETURN_IF_ERROR(state.add_counter("epoch", &epoch));
  KOLO_RETURN_IF_ERROR(state.add_counter("step", &step));
  KOLO_RETURN_IF_ERROR(state.add_bytes("sampler", &sampler));
  const auto t0 = Clock::now();
  KOLO_RETURN_IF_ERROR(state.commit());  // the layout check and the snapshot's allocation
  row.first_ms = ms_since(t0);
  KOLO_ASSIGN_OR_RETURN(row.commit_ms, median_ms(iters, [&] { return state.commit(); }));
  KOLO_ASSIGN_OR_RETURN(row.restore_ms, median_ms(iters, [&] { return state.restore(); }));
  KOLO_ASSIGN_OR_RETURN(row.sync_ms, median_ms(iters, [&] { return state.sync(); }));
  return row;
}

Status run_elastic(const ElasticOptions& o) {
  KOLO_RETURN_IF_ERROR(init());
  ShutdownOnExit stop;
  const bool print = rank() == 0;
  if (print)
    std::printf("%-10s %6s %8s %11s %10s %10s %10s %10s %10s %10s\n", "model", "ranks", "tensors",
                "elements", "MB", "first_ms", "commit_ms", "commit_GB/s", "restore_ms", "sync_ms");
  nlohmann::json rows = nlohmann::json::array();
  for (const Model& m : models(o.model)) {
    KOLO_ASSIGN_OR_RETURN(Row r, measure(m, o.iters));
    const double gbps = r.commit_ms > 0 ? r.bytes / (r.commit_ms * 1e6) : 0.0;
    if (print)
      std::printf("%-10s %6d %8lld %11lld %10.2f %10.3f %10.3f %11.2f %10.3f %10.3f\n",
                  m.name.c_str(), size(), static_cast<long long>(r.tensors),
                  static_cast<long long>(r.elements), r.bytes / 1e6, r.first_ms, r.commit_ms, gbps,
                  r.restore_ms, r.sync_ms);
    rows.push_back({{"model", m.name},
                    {"ranks", size()},
                    {"tensors", r.tensors},
                    {"elements", r.elements},
                    {"bytes", r.bytes},
                    {"first_commit_ms", r.first_ms},
                    {"commit_ms", r.commit_ms},
                    {"commit_GBps", gbps},
                    {"restore_ms", r.restore_ms},
                    {"sync_ms", r.sync_ms}});
  }
  if (print && !o.json_path.empty()) KOLO_RETURN_IF_ERROR(write_json_rows(o.json_path, rows));
  return shutdown();
}

}  // namespace

int run_elastic_bench(const KnobSet& knobs, int argc, char** argv) {
  ElasticOptions o;
  CommandLine line;
  line.command = "elastic";
  line.about =
      "Times kolo::elastic::State's commit(), restore() and sync() (medians of --iters calls)\n"
      "for the parameters and SGD momentum of the Fashion-MNIST example's MLP and CNN and of\n"
      "ResNet-50. commit and restore are local copies; sync times a broadcast of the snapshot\n"
      "when run under kolorun with 2+ ranks.\n";
  line.flags = {int_flag("--iters", "N", &o.iters, 1, kIntMax, "timed calls per measurement"),
                choice_flag(
                    "--model", "NAME", {"all", "mlp", "cnn", "resnet50"},
                    [&](std::string_view v) {
                      const bool known = v == "all" || v == "mlp" || v == "cnn" || v == "resnet50";
                      if (known) o.model = std::string(v);
                      return known;
                    },
                    "all", "which state to measure"),
                json_flag(&o.json_path)};
  return run_command(line, argc, argv, [&] { return run_elastic(o); });
}

}  // namespace kolo::bench

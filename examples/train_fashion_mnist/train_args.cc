#include "examples/train_fashion_mnist/train_args.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "kolo/units.h"

namespace kolo::example {
namespace {

Status bad(const std::string& flag, const std::string& expected, const std::string& got) {
  return Status::InvalidArgument(flag + ": expected " + expected + ", got '" + got + "'");
}

// Whole-string integer parse: "12x" and "" are rejected, not truncated.
bool parse_int(const std::string& s, int64_t& out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end && !s.empty();
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  size_t used = 0;
  try {
    out = std::stod(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size() && std::isfinite(out);
}

// Each flag that takes a value maps to a setter, which checks the value and stores it in the
// TrainArgs it was made for.
using Setter = std::function<Status(const std::string& flag, const std::string& value)>;

Setter integer_in(int64_t lo, int64_t hi, std::function<void(int64_t)> assign) {
  return [lo, hi, assign](const std::string& flag, const std::string& v) -> Status {
    int64_t x = 0;
    if (!parse_int(v, x) || x < lo || x > hi)
      return bad(flag,
                 hi == INT64_MAX
                     ? "an integer >= " + std::to_string(lo)
                     : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                 v);
    assign(x);
    return Status::Ok();
  };
}

Setter integer_at_least(int64_t lo, std::function<void(int64_t)> assign) {
  return integer_in(lo, INT64_MAX, std::move(assign));
}

// `range` is how the message writes [lo, hi], e.g. "in (0, 1000]" for an open lower bound.
Setter number_in(double lo, double hi, std::string range, std::function<void(double)> assign) {
  return [=](const std::string& flag, const std::string& v) -> Status {
    double x = 0;
    if (!parse_double(v, x) || x < lo || x > hi) return bad(flag, "a number " + range, v);
    assign(x);
    return Status::Ok();
  };
}

// One of a few names, each standing for a value of T; the message lists them: "a, b or c".
template <typename T>
Setter one_of(std::vector<std::pair<std::string, T>> names, T* target) {
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) expected += i + 1 == names.size() ? " or " : ", ";
    expected += names[i].first;
  }
  return [names, expected, target](const std::string& flag, const std::string& v) -> Status {
    for (const auto& [name, value] : names) {
      if (v == name) {
        *target = value;
        return Status::Ok();
      }
    }
    return bad(flag, expected, v);
  };
}

// A path or another string that must not be empty; `expected` names it ("a file path").
Setter non_empty(std::string expected, std::string* target) {
  return [expected, target](const std::string& flag, const std::string& v) -> Status {
    if (v.empty()) return bad(flag, expected, v);
    *target = v;
    return Status::Ok();
  };
}

// The flags that take a value, each writing its field of `a`.
std::map<std::string, Setter> value_flags(TrainArgs& a) {
  return {
      {"--model",
       one_of<ModelKind>({{"mlp", ModelKind::kMlp}, {"cnn", ModelKind::kCnn}}, &a.model)},
      // Bounded so that the value fits the int it is stored in (4294967296 trained 0 epochs).
      {"--epochs", integer_in(1, 1'000'000, [&](int64_t x) { a.epochs = static_cast<int>(x); })},
      {"--batch-size", integer_at_least(1, [&](int64_t x) { a.batch_size = x; })},
      {"--lr", number_in(1e-12, 1e3, "in (0, 1000]", [&](double x) { a.lr = x; })},
      {"--lr-scaling", one_of<ScalingRule>({{"linear", ScalingRule::kLinear},
                                            {"sqrt", ScalingRule::kSqrt},
                                            {"none", ScalingRule::kNone}},
                                           &a.scaling)},
      {"--warmup-epochs", number_in(0, 1e6, ">= 0", [&](double x) { a.warmup_epochs = x; })},
      {"--seed", integer_at_least(0, [&](int64_t x) { a.seed = static_cast<uint64_t>(x); })},
      {"--data-dir", non_empty("a directory", &a.data_dir)},
      {"--train-subset", integer_at_least(0, [&](int64_t x) { a.train_subset = x; })},
      {"--test-subset", integer_at_least(0, [&](int64_t x) { a.test_subset = x; })},
      {"--timeline", non_empty("a file path", &a.timeline)},
      {"--checkpoint", non_empty("a file path", &a.checkpoint)},
      {"--min-accuracy", number_in(0, 1, "in [0, 1]", [&](double x) { a.min_accuracy = x; })},
      {"--bucket-size",
       [&](const std::string& flag, const std::string& v) -> Status {
         auto bytes = parse_size(v);
         if (!bytes.ok() || *bytes > (uint64_t{1} << 40))
           return bad(flag, "a size such as 1MiB, 4096 or 0", v);
         a.bucket_bytes = static_cast<int64_t>(*bytes);
         return Status::Ok();
       }},
      {"--commit-every", integer_in(1, 1'000'000'000, [&](int64_t x) { a.commit_every = x; })},
      {"--fail-rank-at",
       [&](const std::string& flag, const std::string& v) -> Status {
         const size_t colon = v.find(':');
         int64_t rank = 0, step = 0;
         if (colon == std::string::npos || !parse_int(v.substr(0, colon), rank) ||
             !parse_int(v.substr(colon + 1), step) || rank < 0 || rank > 1'000'000 || step < 0)
           return bad(flag, "RANK:STEP with RANK >= 0 and STEP >= 0, e.g. 1:25", v);
         a.fail_rank = static_cast<int>(rank);
         a.fail_step = step;
         return Status::Ok();
       }},
      {"--shard", one_of<int>({{"0", 0}, {"1", 1}, {"2", 2}}, &a.shard)},
      {"--device", one_of<DeviceChoice>(
                       {{"cpu", DeviceChoice::kCpu}, {"cuda", DeviceChoice::kCuda}}, &a.device)},
  };
}

// --cuda-graph's combinations known from the flags alone (the device found and the number of
// ranks are checked when training starts: check_cuda_graph in train_steps.h).
Result<TrainArgs> check_cuda_graph_flags(const TrainArgs& a) {
  if (!a.cuda_graph) return a;
  if (a.device == DeviceChoice::kCpu)
    return Status::InvalidArgument(
        "--cuda-graph: needs a CUDA device (it replays GPU work), got --device cpu");
  if (a.elastic)
    return Status::InvalidArgument(
        "--cuda-graph: not with --elastic (its world, and so its batches, can change)");
  if (a.shard != 0)
    return Status::InvalidArgument("--cuda-graph: not with --shard " + std::to_string(a.shard) +
                                   " (ShardedOptimizer's collectives run during backward, "
                                   "which the graph captures)");
  return a;
}

}  // namespace

const char* model_name(ModelKind kind) { return kind == ModelKind::kMlp ? "mlp" : "cnn"; }

const char* scaling_name(ScalingRule rule) {
  switch (rule) {
    case ScalingRule::kNone:
      return "none";
    case ScalingRule::kLinear:
      return "linear";
    case ScalingRule::kSqrt:
      return "sqrt";
  }
  return "?";
}

std::string train_usage() {
  return "usage: [kolorun -np N] train_fashion_mnist [options]\n"
         "Data-parallel training on Fashion-MNIST (apt-get install dataset-fashion-mnist).\n"
         "  --model mlp|cnn          MLP 784-512-256-10 or a two-conv CNN (default cnn)\n"
         "  --epochs N               training epochs (default 4)\n"
         "  --batch-size N           samples per rank per step (default 64)\n"
         "  --lr X                   base learning rate for one rank (default 0.05, SGD momentum "
         "0.9)\n"
         "  --lr-scaling R           linear|sqrt|none: scale --lr with the number of ranks "
         "(default linear)\n"
         "  --warmup-epochs X        linear warm-up to the scaled rate, then cosine (default 0.5)\n"
         "  --seed N                 initial weights and shuffling (default 42)\n"
         "  --data-dir DIR           folder with the four IDX .gz files\n"
         "                           (default /usr/share/datasets/fashion-mnist)\n"
         "  --train-subset N         train on the first N training images only (0: all)\n"
         "  --test-subset N          evaluate on the first N test images only (0: all)\n"
         "  --timeline PATH          Chrome trace of Kolo's operations, one file per rank:\n"
         "                           '{rank}' in PATH becomes the rank, else rank r of several\n"
         "                           writes PATH with '.rank<r>' before '.json'; replaces the\n"
         "                           trace of KOLO_TIMELINE (a warning says so)\n"
         "  --checkpoint PATH        save model and optimizer after every epoch (rank 0 writes)\n"
         "  --resume                 continue from --checkpoint PATH\n"
         "  --min-accuracy X         exit 1 when the final test accuracy is below X\n"
         "  --device cpu|cuda        default: cuda when a GPU is visible, else cpu\n"
         "  --elastic                go on when ranks are lost or added (kolorun --min-np):\n"
         "                           the state is committed in memory every --commit-every\n"
         "                           steps and a re-formed world resumes from the last commit\n"
         "  --commit-every N         steps between commits with --elastic (default 10); a\n"
         "                           failure loses at most N-1 steps\n"
         "  --fail-rank-at R:S       test aid for --elastic: rank R of the first world dies\n"
         "                           (SIGKILL) before step S\n"
         "  --bucket-size SIZE       gradient bucket, e.g. 1MiB; 0: an allreduce per parameter\n"
         "                           (default 4MiB: one bucket for either model)\n"
         "  --shard 0|1|2            ZeRO stage: 1 shards the optimizer state, 2 the gradients\n"
         "                           too (CPU); prints memory per rank\n"
         "  --print-checksum         print the SHA-256 of the final parameters (rank 0)\n"
         "  --cuda-graph             replay each full-batch step (forward, loss, backward) as\n"
         "                           one CUDA graph after 3 eager warm-up steps; the optimizer\n"
         "                           and a last partial batch run eagerly. One rank, CUDA only\n"
         "Exit status: 0 ok, 1 training failed or accuracy below --min-accuracy, 2 bad usage,\n"
         "77 data set not installed.\n";
}

Result<TrainArgs> parse_train_args(int argc, char** argv) {
  TrainArgs a;
  const std::map<std::string, Setter> setters = value_flags(a);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
      continue;
    }
    if (arg == "--resume") {
      a.resume = true;
      continue;
    }
    if (arg == "--elastic") {
      a.elastic = true;
      continue;
    }
    if (arg == "--print-checksum") {
      a.print_checksum = true;
      continue;
    }
    if (arg == "--cuda-graph") {
      a.cuda_graph = true;
      continue;
    }
    std::string flag = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto it = setters.find(flag);
    if (it == setters.end()) {
      return Status::InvalidArgument("unknown argument '" + arg + "' (see --help)");
    }
    if (!has_value) {
      if (i + 1 >= argc) return Status::InvalidArgument(flag + ": missing value (see --help)");
      value = argv[++i];
    }
    KOLO_RETURN_IF_ERROR(it->second(flag, value));
  }
  if (a.resume && a.checkpoint.empty()) {
    return Status::InvalidArgument("--resume: needs --checkpoint PATH to resume from");
  }
  if (a.elastic && !a.checkpoint.empty()) {
    return Status::InvalidArgument(
        "--checkpoint: not with --elastic, whose state lives in memory (a commit every "
        "--commit-every steps) and survives lost ranks without a file");
  }
  if (a.elastic && a.shard != 0) {
    return Status::InvalidArgument(
        "--shard " + std::to_string(a.shard) +
        ": not with --elastic yet (a sharded optimizer's shards are sized by the world, and it "
        "has no reset for a new one); drop one of the two flags");
  }
  if (!a.elastic && a.fail_rank >= 0) {
    return Status::InvalidArgument("--fail-rank-at: needs --elastic (a fixed job would stop)");
  }
  return check_cuda_graph_flags(a);
}

}  // namespace kolo::example

// Command line of train_fashion_mnist. Parsing is separate from training so that every rejected
// flag has a precise message and the defaults are written down in one place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kolo/status.h"

namespace kolo::example {

enum class ModelKind { kMlp, kCnn };
enum class ScalingRule { kNone, kLinear, kSqrt };
enum class DeviceChoice { kAuto, kCpu, kCuda };

struct TrainArgs {
  ModelKind model = ModelKind::kCnn;
  // 3 epochs gave the default CNN 0.904-0.911 test accuracy with 1 or 2 ranks, 4 epochs
  // 0.907-0.915 (measured); 4 keeps a margin above 0.90 for any seed we tried.
  int epochs = 4;
  int64_t batch_size = 64;  // per rank
  double lr = 0.05;         // for one rank; scaled by `scaling` with the number of ranks
  ScalingRule scaling = ScalingRule::kLinear;
  double warmup_epochs = 0.5;  // linear warm-up length, then cosine decay to 0
  double momentum = 0.9;
  uint64_t seed = 42;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t train_subset = 0;  // 0: the whole set
  int64_t test_subset = 0;
  std::string timeline;    // empty: no trace
  std::string checkpoint;  // empty: no checkpoints
  bool resume = false;
  double min_accuracy = -1;  // < 0: no check
  DeviceChoice device = DeviceChoice::kAuto;
  std::optional<int64_t> bucket_bytes;  // unset: DistributedOptimizer's default
  // --elastic: the loop runs inside kolo::elastic::run() and commits its State every
  // commit_every steps (docs/elastic.md: at most commit_every - 1 steps are lost to a failure;
  // a commit of either model costs under 0.1 ms, so 10 keeps the loss small for free).
  bool elastic = false;
  int64_t commit_every = 10;
  // --fail-rank-at R:S, a test aid for --elastic: in the first world, rank R dies (SIGKILL)
  // before step S. fail_rank < 0: never.
  int fail_rank = -1;
  int64_t fail_step = 0;
  int shard = 0;  // --shard: ZeRO stage (0: DistributedOptimizer; 1, 2: ShardedOptimizer)
  bool print_checksum = false;  // --print-checksum: the final parameters' SHA-256
  // --cuda-graph: each full-batch training step after the warm-up replays one CUDA graph
  // (graph_step.h). One rank, --device cuda (or auto finding a GPU), no --shard, no --elastic.
  bool cuda_graph = false;
  bool help = false;
};

// Parses argv[1..]. Accepts "--flag value" and "--flag=value". InvalidArgument naming the flag,
// the value given and the accepted form, e.g. "--epochs: expected an integer >= 1, got 'x'".
Result<TrainArgs> parse_train_args(int argc, char** argv);

// The --help text.
std::string train_usage();

const char* model_name(ModelKind kind);
const char* scaling_name(ScalingRule rule);

}  // namespace kolo::example

// Command line of train_fashion_mnist. Parsing is separate from training so that every rejected
// flag has a precise message and the defaults are written down in one place.
#pragma once

#include <cstdint>
#include <string>

#include "kolo/status.h"

namespace kolo::example {

enum class ModelKind { kMlp, kCnn };
enum class ScalingRule { kNone, kLinear, kSqrt };
enum class DeviceChoice { kAuto, kCpu, kCuda };

struct TrainArgs {
  ModelKind model = ModelKind::kCnn;
  // 3 epochs bring the default CNN to about 0.90-0.91 test accuracy (measured; see README note
  // in train_fashion_mnist.cc).
  int epochs = 3;
  int64_t batch_size = 64;  // per rank
  double lr = 0.05;         // for one rank; scaled by `scaling` with the number of ranks
  ScalingRule scaling = ScalingRule::kLinear;
  double warmup_epochs = 0.5;  // linear warm-up length, then cosine decay to 0
  double momentum = 0.9;
  uint64_t seed = 42;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t train_subset = 0;  // 0: the whole set
  int64_t test_subset = 0;
  std::string timeline;      // empty: no trace
  std::string checkpoint;    // empty: no checkpoints
  bool resume = false;
  double min_accuracy = -1;  // < 0: no check
  DeviceChoice device = DeviceChoice::kAuto;
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

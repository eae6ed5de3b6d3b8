// The steps that train_fashion_mnist's two loops share: the fixed job's train() in
// train_fashion_mnist.cc and the --elastic loop in elastic_training.cc. Each talks to Kolo the
// way its comment says (the collectives are called on every rank, in the same order).
//
// Errors: kolo::Error carrying Kolo's Status (a failed collective, a bad flag value found only
// once the data set is read). Thread-safety: call from the training thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "examples/train_fashion_mnist/models.h"
#include "examples/train_fashion_mnist/progress_bar.h"
#include "examples/train_fashion_mnist/train_args.h"
#include "kolo/framework.h"

namespace kolo::example {

void throw_if_error(const Status& status);

// --device: the CPU, or a GPU shared round-robin by the ranks of a host. Unsupported when
// --device cuda finds no GPU.
Device choose_device(const TrainArgs& args);

// Joins the job and starts the trace of --timeline. KOLO_TIMELINE, when set, has started a
// trace of its own in init(): the flag wins, so that one stops here (its files hold only what
// init recorded), with a warning on every rank.
void start_kolo(const TrainArgs& args);

fw::LrScaling to_fw(ScalingRule rule);

// The two sets, normalised with the training set's statistics, and how many images of each
// this run uses (--train-subset, --test-subset). Throws InvalidArgument naming the flag for a
// subset larger than its set, and the reader's errors.
struct FashionMnist {
  explicit FashionMnist(const TrainArgs& args);

  const fw::ImageDataset train;
  const fw::ImageDataset test;
  // A DistributedSampler over the first n indices is exactly training on the first n images.
  const int64_t train_n;
  const int64_t test_n;
};

// Uneven test shards of this world: every test image is counted exactly once. (A pointer, so
// that an elastic job can make a new one for each world.) Borrows `data`.
std::unique_ptr<fw::DataLoader> make_test_loader(const FashionMnist& data);

struct TestResult {
  int64_t correct = 0;
  int64_t total = 0;
  double accuracy() const { return total > 0 ? static_cast<double>(correct) / total : 0.0; }
};

// Every rank classifies its shard (the loader's DistributedSampler) and the counts are summed
// (one allreduce).
TestResult evaluate(Model& model, fw::DataLoader& loader, Device device);

struct EpochTotals {
  double loss = 0;      // mean training loss over the epoch's global samples
  double accuracy = 0;  // training accuracy (while the weights were changing)
  int64_t samples = 0;  // global
  double seconds = 0;   // of the slowest rank
};

// One epoch's running statistics on this rank, drawn as a progress bar on rank 0.
class EpochMeter {
 public:
  // `shard`: the samples this rank takes in the epoch.
  EpochMeter(int epoch, int epochs, int64_t shard);

  const std::string& label() const { return label_; }
  int64_t steps() const { return steps_; }

  // After each step: its loss, and its logits against the batch's labels (on the CPU).
  void add(const fw::Tensor& loss, const fw::Tensor& logits, const fw::Tensor& labels);
  // Ends the epoch: the statistics of every rank combined. Collective (two allreduces).
  EpochTotals finish();

 private:
  std::string label_;
  ProgressBar bar_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double loss_sum_ = 0;
  int64_t correct_ = 0, seen_ = 0, steps_ = 0;
};

// The learning rate of every step: a linear warm-up (Goyal et al.) from the one-rank rate to
// the scaled one, then a cosine decay to 0 at the end of the last epoch.
struct LrPlan {
  LrPlan(const TrainArgs& args, double scaled_lr, int64_t steps_per_epoch);

  double lr(int epoch, int64_t step) const { return schedule.lr(epoch * steps_per_epoch + step); }

  const int64_t steps_per_epoch;
  const int64_t warmup_steps;
  const double start_lr;
  const fw::WarmupLr schedule;
};

// Rank 0 prints; the others print nothing.
void print_setup(const TrainArgs& args, const Model& model, Device device, const FashionMnist& data,
                 double lr, const LrPlan& plan);
void print_epoch(const std::string& label, const EpochTotals& totals, const TestResult& test);
// The final parameters as one number (FNV-1a over their bytes, in the model's order), so that
// two runs can be compared for identical weights from their output alone (the --elastic tests).
void print_weights_digest(const NamedParameters& params);
// --print-checksum: "parameters sha256 <64 hex digits>", the SHA-256 of every parameter's bytes
// in the model's order (names not included), printed by rank 0 (docs/determinism.md: with
// KOLO_DETERMINISTIC=1 it is the same whatever the fusion, bucket, autotuner or backend).
void print_parameters_sha256(const NamedParameters& params);

// The final accuracy, how much communication hid behind backward (the optimizer's stats and
// gradient buckets per step), and the exit code that --min-accuracy asks for (1 below it, on
// every rank alike, else 0).
int report_result(const TrainArgs& args, const TestResult& test, const fw::DistributedStats& stats,
                  size_t buckets);

}  // namespace kolo::example

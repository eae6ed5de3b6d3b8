#include "examples/train_fashion_mnist/train_steps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "examples/train_fashion_mnist/sha256.h"

namespace kolo::example {
namespace {

// Per-pixel statistics of the Fashion-MNIST training set.
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t subset_size(const char* flag, int64_t requested, int64_t available) {
  if (requested == 0) return available;
  if (requested > available) {
    throw kolo::Error(Status::InvalidArgument(std::string(flag) + ": expected at most " +
                                              std::to_string(available) +
                                              " (the images in the "
                                              "set), got " +
                                              std::to_string(requested)));
  }
  return requested;
}

// Number of rows of `logits` [N, C] whose largest value is at the label's index.
int64_t count_correct(const fw::Tensor& logits, const fw::Tensor& labels_cpu) {
  const std::vector<float> values = logits.detach().to_vector();
  const int64_t n = logits.size(0), classes = logits.size(1);
  const int64_t* labels = labels_cpu.data<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = values.data() + i * classes;
    const int64_t predicted = std::max_element(row, row + classes) - row;
    if (predicted == labels[i]) ++correct;
  }
  return correct;
}

// Combines the ranks' epoch statistics: sums of loss, hits and samples; the slowest rank's time.
EpochTotals reduce_epoch(double loss_sum, int64_t correct, int64_t samples, double seconds) {
  double sums[3] = {loss_sum, static_cast<double>(correct), static_cast<double>(samples)};
  throw_if_error(kolo::allreduce("epoch.sums", kolo::view_of(sums, {3})));
  throw_if_error(kolo::allreduce("epoch.seconds", kolo::view_of(&seconds, {1}),
                                 {.reduction = {.op = kolo::ReduceOp::kMax}}));
  EpochTotals t;
  t.samples = static_cast<int64_t>(sums[2]);
  t.loss = t.samples > 0 ? sums[0] / sums[2] : 0;
  t.accuracy = t.samples > 0 ? sums[1] / sums[2] : 0;
  t.seconds = seconds;
  return t;
}

}  // namespace

void throw_if_error(const Status& status) {
  if (!status.ok()) throw kolo::Error(status);
}

kolo::Device choose_device(const TrainArgs& args) {
  const int gpus = fw::cuda_device_count();
  if (args.device == DeviceChoice::kCpu || (args.device == DeviceChoice::kAuto && gpus == 0)) {
    return kolo::Device::cpu();
  }
  if (gpus == 0) {
    throw kolo::Error(Status::Unsupported(
        "--device cuda: no CUDA device is visible (or this is a CPU-only build); use "
        "--device cpu"));
  }
  // Ranks on one host share its GPUs round-robin.
  return kolo::Device::cuda(kolo::local_rank() % gpus);
}

TestResult evaluate(Model& model, fw::DataLoader& loader, kolo::Device device) {
  fw::NoGradGuard no_grad;
  int64_t counts[2] = {0, 0};
  loader.start_epoch(0);
  while (auto batch = loader.next()) {
    counts[0] += count_correct(model.forward(batch->x.to(device)), batch->y);
    counts[1] += batch->x.size(0);
  }
  throw_if_error(kolo::allreduce("eval.counts", kolo::view_of(counts, {2})));
  return {counts[0], counts[1]};
}

EpochMeter::EpochMeter(int epoch, int epochs, int64_t shard)
    : label_("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs)),
      bar_(stdout, label_, shard, ProgressBar::is_terminal(stdout)) {}

void EpochMeter::add(const fw::Tensor& loss, const fw::Tensor& logits, const fw::Tensor& labels) {
  const int64_t n = logits.size(0);
  loss_sum_ += static_cast<double>(loss.item()) * n;
  correct_ += count_correct(logits, labels);
  seen_ += n;
  ++steps_;
  if (kolo::rank() == 0) {
    // Rank 0's own throughput times the ranks: an estimate until the epoch's allreduce.
    bar_.update(seen_, loss_sum_ / seen_, static_cast<double>(correct_) / seen_,
                seen_ * kolo::size() / std::max(1e-9, seconds_since(start_)));
  }
}

EpochTotals EpochMeter::finish() {
  const double seconds = seconds_since(start_);
  if (kolo::rank() == 0) bar_.finish();
  return reduce_epoch(loss_sum_, correct_, seen_, seconds);
}

fw::LrScaling to_fw(ScalingRule rule) {
  switch (rule) {
    case ScalingRule::kLinear:
      return fw::LrScaling::kLinear;
    case ScalingRule::kSqrt:
      return fw::LrScaling::kSqrt;
    case ScalingRule::kNone:
      break;
  }
  return fw::LrScaling::kNone;
}

void start_kolo(const TrainArgs& args) {
  throw_if_error(kolo::init());
  // KOLO_DETERMINISTIC=1 (kolorun --deterministic) fixes the framework's kernels too; the BLAS
  // thread count is printed because the checksum depends on it.
  if (fw::configure_deterministic_kernels() && kolo::rank() == 0)
    std::printf("deterministic mode: %d BLAS thread per rank\n", fw::kDeterministicBlasThreads);
  if (args.timeline.empty()) return;
  // One file per rank; cycle markers as KOLO_TIMELINE_MARK_CYCLES says.
  Status started = kolo::start_timeline(args.timeline);
  // After init, the one PreconditionFailed of start_timeline: a trace is already recording.
  if (started.code() == kolo::StatusCode::kPreconditionFailed) {
    std::fprintf(stderr,
                 "train_fashion_mnist: warning: --timeline %s replaces the trace that "
                 "KOLO_TIMELINE started, which ends here\n",
                 args.timeline.c_str());
    throw_if_error(kolo::stop_timeline());
    started = kolo::start_timeline(args.timeline);
  }
  throw_if_error(started);
}

FashionMnist::FashionMnist(const TrainArgs& args)
    : train(fw::load_mnist(args.data_dir + "/train-images-idx3-ubyte.gz",
                           args.data_dir + "/train-labels-idx1-ubyte.gz", {kPixelMean},
                           {kPixelStd})),
      test(fw::load_mnist(args.data_dir + "/t10k-images-idx3-ubyte.gz",
                          args.data_dir + "/t10k-labels-idx1-ubyte.gz", {kPixelMean}, {kPixelStd})),
      train_n(subset_size("--train-subset", args.train_subset, train.size())),
      test_n(subset_size("--test-subset", args.test_subset, test.size())) {}

std::unique_ptr<fw::DataLoader> make_test_loader(const FashionMnist& data) {
  return std::make_unique<fw::DataLoader>(
      data.test, fw::DataLoaderOptions{.batch_size = 500},
      std::make_unique<fw::DistributedSampler>(data.test_n, kolo::rank(), kolo::size(),
                                               /*seed=*/0, /*shuffle=*/false,
                                               fw::DistributedSampler::Tail::kUneven));
}

LrPlan::LrPlan(const TrainArgs& args, double scaled_lr, int64_t steps_per_epoch_)
    : steps_per_epoch(steps_per_epoch_),
      warmup_steps(std::min<int64_t>(
          steps_per_epoch * args.epochs,
          std::llround(args.warmup_epochs * static_cast<double>(steps_per_epoch)))),
      start_lr(std::min(args.lr, scaled_lr)),
      schedule(warmup_steps,
               std::make_shared<fw::CosineLr>(
                   scaled_lr, std::max<int64_t>(1, steps_per_epoch * args.epochs - warmup_steps)),
               start_lr / scaled_lr) {}

void print_setup(const TrainArgs& args, const Model& model, kolo::Device device,
                 const FashionMnist& data, double lr, const LrPlan& plan) {
  const int world = kolo::size();
  fw::RankLogger().printf(
      "train_fashion_mnist: model %s (%lld parameters), %d rank(s), device %s\n"
      "  data %lld train / %lld test images from %s\n"
      "  batch %lld per rank (%lld global), %lld steps per epoch, %d epochs\n"
      "  lr %g (base %g, %s scaling), warm-up %lld steps from %g, then cosine to 0; SGD momentum "
      "%g\n",
      model_name(args.model), static_cast<long long>(model.num_elements()), world,
      device.to_string().c_str(), static_cast<long long>(data.train_n),
      static_cast<long long>(data.test_n), args.data_dir.c_str(),
      static_cast<long long>(args.batch_size), static_cast<long long>(args.batch_size * world),
      static_cast<long long>(plan.steps_per_epoch), args.epochs, lr, args.lr,
      scaling_name(args.scaling), static_cast<long long>(plan.warmup_steps), plan.start_lr,
      args.momentum);
}

void print_epoch(const std::string& label, const EpochTotals& totals, const TestResult& test) {
  fw::RankLogger().printf(
      "%s: train loss %.4f  train acc %.4f  test acc %.4f (%lld/%lld)  %.1f s  "
      "%.0f samples/s (global, %d rank(s))",
      label.c_str(), totals.loss, totals.accuracy, test.accuracy(),
      static_cast<long long>(test.correct), static_cast<long long>(test.total), totals.seconds,
      totals.samples / std::max(1e-9, totals.seconds), kolo::size());
}

int report_result(const TrainArgs& args, const TestResult& test, const fw::DistributedStats& stats,
                  size_t buckets) {
  const fw::RankLogger say;
  say.printf("final test accuracy %.4f (%lld/%lld)", test.accuracy(),
             static_cast<long long>(test.correct), static_cast<long long>(test.total));
  if (stats.communication_window_seconds > 0) {
    // With one bucket (the default for both models) communication starts when backward
    // ends, so little of it can hide; --bucket-size 0 overlaps more at a higher CPU cost.
    say.printf(
        "communication hidden behind backward: %.0f%% (step() waited %.2f s of a "
        "%.2f s communication window; %zu gradient bucket%s per step)",
        100.0 * (1.0 - stats.exposed_wait_seconds / stats.communication_window_seconds),
        stats.exposed_wait_seconds, stats.communication_window_seconds, buckets,
        buckets == 1 ? "" : "s");
  }
  if (args.min_accuracy >= 0 && test.accuracy() < args.min_accuracy) {
    // Every rank holds the same global counts, so every rank fails alike.
    fw::RankLogger({.out = stderr})
        .printf("train_fashion_mnist: test accuracy %.4f is below --min-accuracy %.4f",
                test.accuracy(), args.min_accuracy);
    return 1;
  }
  return 0;
}

void print_weights_digest(const NamedParameters& params) {
  uint64_t hash = 14695981039346656037ull;
  for (const auto& [name, tensor] : params) {
    const fw::Tensor cpu = tensor.detach().to(kolo::Device::cpu());
    const auto* bytes = static_cast<const unsigned char*>(cpu.raw_data());
    for (size_t i = 0; i < cpu.nbytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  fw::RankLogger().printf("final weights: fnv1a64 %016llx", static_cast<unsigned long long>(hash));
}

void print_parameters_sha256(const NamedParameters& params) {
  Sha256 sha;
  for (const auto& [name, tensor] : params) {
    const fw::Tensor cpu = tensor.detach().to(kolo::Device::cpu());
    sha.update(cpu.raw_data(), cpu.nbytes());
  }
  fw::RankLogger().printf("parameters sha256 %s", sha.hex_digest().c_str());
}

}  // namespace kolo::example

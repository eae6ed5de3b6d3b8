#include "examples/train_fashion_mnist/elastic_training.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>

#include "examples/train_fashion_mnist/train_steps.h"
#include "framework/distributed/elastic_sampler.h"
#include "kolo/elastic.h"

namespace kolo::example {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Elastic training loop]. With --elastic the loop runs inside kolo::elastic::run(), which
// calls it again on a re-formed world after a rank is lost (or ranks are added). What a rank
// needs to continue is one kolo::elastic::State: the parameters, the SGD state (momentum and
// step counters), the step count and the ElasticSampler's position (epoch, samples consumed).
// It is committed every --commit-every steps; after a re-form run() restores and syncs it, so
// every rank, a new one included, continues from the last commit, and the on_reset callback
// rebuilds what depends on the world: the sampler's rank and size, the optimizer's buckets and
// unfinished step, the learning rate (scaled by the new size) and the test shards.
//
// The data order is the ElasticSampler's (Note [Elastic order]): a step trains on the next
// batch * size samples of the epoch's permutation, so the committed history uses each sample
// once per epoch whatever the worlds were. The learning rate is the fixed job's plan for the
// current size, at the step a fixed world of that size would be at for the samples consumed
// (ElasticSampler::step_in_epoch). With a fixed world whose size divides the training set, the
// batches, rates and initial weights (run()'s first sync is a broadcast of rank 0's) are the
// fixed job's, so --elastic trains to the same weights bit for bit (a CTest checks it).
class ElasticTraining {
 public:
  ElasticTraining(const TrainArgs& args, const FashionMnist& data, kolo::Device device)
      : args_(args),
        data_(data),
        device_(device),
        model_(make_model(args.model, args.seed, device)),
        params_(model_->named_parameters()),
        sgd_(model_->parameters(), {.lr = args.lr, .momentum = args.momentum}),
        opt_(sgd_, params_, distributed_options(args)),
        sampler_({.size = data.train_n, .batch_size = args.batch_size, .seed = args.seed},
                 kolo::rank(), kolo::size()),
        train_loader_(data.train, {.batch_size = args.batch_size}, sampler_.loader_sampler()) {
    follow_world();
    register_state();
    state_.on_reset([this] { return on_reset(); });
  }

  // Trains every epoch inside kolo::elastic::run(); returns the exit code.
  int run() {
    print_setup(args_, *model_, device_, data_, lr_, *plan_);
    throw_if_error(kolo::elastic::run(state_, [this] { return train_epochs(); }));
    if (test_.total == 0) test_ = evaluate(*model_, *test_loader_, device_);
    print_weights_digest(params_);
    if (args_.print_checksum) print_parameters_sha256(params_);
    print_commit_cost();
    return report_result(args_, test_, opt_.stats(), opt_.bucket_names().size());
  }

 private:
  static fw::DistributedOptions distributed_options(const TrainArgs& args) {
    fw::DistributedOptions options;
    if (args.bucket_bytes) options.bucket_bytes = *args.bucket_bytes;
    return options;
  }

  void register_state() {
    for (const auto& [name, tensor] : params_)
      throw_if_error(state_.add_tensor("model." + name, fw::view_of_tensor(tensor)));
    for (const auto& [name, tensor] : sgd_.state_tensors())
      throw_if_error(state_.add_tensor("optim." + name, fw::view_of_tensor(*tensor)));
    throw_if_error(state_.add_counter("train.step", &step_));
    throw_if_error(sampler_.add_to(state_, "sampler"));
  }

  // What depends on the world's rank and size (see the Note).
  void follow_world() {
    sampler_.set_world(kolo::rank(), kolo::size());
    lr_ = fw::scale_lr(args_.lr, kolo::size(), to_fw(args_.scaling));
    plan_.emplace(args_, lr_, sampler_.steps_per_epoch());
    test_loader_ = make_test_loader(data_);
  }

  kolo::Status on_reset() {
    try {
      opt_.reset_for_new_world();
      follow_world();
    } catch (const kolo::Error& e) {
      return e.status();
    }
    // A rank that joined has no steps of its own to lose, nor a failure to time from. The time
    // runs from fn's failure (a lost peer seen, or WorldChanged at a commit) to the resume.
    const int64_t lost = std::max<int64_t>(0, reached_ - step_);
    const double seconds =
        failed_at_ ? std::chrono::duration<double>(Clock::now() - *failed_at_).count() : 0.0;
    fw::RankLogger().printf(
        "elastic: world re-formed: generation %lld, %d ranks, resumed at step %lld (lost %lld "
        "step%s) in %.2f s",
        static_cast<long long>(kolo::elastic::generation()), kolo::size(),
        static_cast<long long>(step_), static_cast<long long>(lost), lost == 1 ? "" : "s", seconds);
    return kolo::Status::Ok();
  }

  // run()'s fn: from the State's position to the end. Errors (a lost peer fails a collective,
  // which the training stack throws) become the Status that run() inspects.
  kolo::Status train_epochs() {
    kolo::Status status;
    try {
      status = train_to_end();
    } catch (const kolo::Error& e) {
      status = e.status();
    }
    if (!status.ok()) failed_at_ = Clock::now();
    return status;
  }

  kolo::Status train_to_end() {
    test_ = {};  // the last epoch's test is this call's, or run() tests at the end
    while (sampler_.epoch() < args_.epochs) {
      const int epoch = static_cast<int>(sampler_.epoch());
      train_loader_.start_epoch(epoch);  // this world's share of what remains
      EpochMeter meter(epoch, args_.epochs,
                       static_cast<int64_t>(sampler_.remaining_local().size()));
      for (int64_t left = sampler_.steps_left_in_epoch(); left > 0; --left) {
        train_step(epoch, meter);
        if (step_ % args_.commit_every == 0) KOLO_RETURN_IF_ERROR(commit());
      }
      const EpochTotals totals = meter.finish();
      test_ = evaluate(*model_, *test_loader_, device_);
      print_epoch(meter.label(), totals, test_);
    }
    return kolo::Status::Ok();
  }

  // State::commit(), timed for the summary that tells what the commit frequency costs.
  kolo::Status commit() {
    const auto start = Clock::now();
    kolo::Status status = state_.commit();
    commit_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    ++commits_;
    return status;
  }

  void print_commit_cost() const {
    const double total = std::chrono::duration<double>(Clock::now() - start_).count();
    fw::RankLogger().printf(
        "elastic: %lld commits (every %lld steps) took %.1f ms, %.3f ms each, %.2f%% of %.1f s",
        static_cast<long long>(commits_), static_cast<long long>(args_.commit_every),
        commit_seconds_ * 1e3, commits_ > 0 ? commit_seconds_ * 1e3 / commits_ : 0.0,
        100.0 * commit_seconds_ / std::max(1e-9, total), total);
  }

  void train_step(int epoch, EpochMeter& meter) {
    if (args_.fail_rank == kolo::rank() && args_.fail_step == step_ &&
        kolo::elastic::generation() == 0) {
      std::fflush(stdout);
      std::raise(SIGKILL);  // as a crash would: no shutdown, no message to the peers
    }
    sgd_.set_lr(plan_->lr(epoch, sampler_.step_in_epoch()));
    opt_.zero_grad();
    if (sampler_.local_count() == 0) {
      // The epoch's last step has fewer samples than ranks: this rank still takes part in the
      // allreduces, with a zero gradient and a weight of 0.
      opt_.set_local_batch_size(0);
      opt_.step();
    } else {
      std::optional<fw::Batch> batch = train_loader_.next();
      if (!batch || batch->indices != sampler_.next_local()) {
        throw kolo::Error(kolo::Status::Internal(
            "the data loader's batch is not the elastic sampler's share of this step"));
      }
      opt_.set_local_batch_size(batch->x.size(0));
      const fw::Tensor logits = model_->forward(batch->x.to(device_));
      const fw::Tensor loss = fw::cross_entropy(logits, batch->y.to(device_));
      loss.backward();
      opt_.step();
      meter.add(loss, logits, batch->y);
    }
    sampler_.advance();
    reached_ = std::max(reached_, ++step_);
  }

  const TrainArgs& args_;
  const FashionMnist& data_;
  const kolo::Device device_;
  std::unique_ptr<Model> model_;
  const NamedParameters params_;
  fw::SGD sgd_;
  fw::DistributedOptimizer opt_;
  fw::ElasticSampler sampler_;
  fw::DataLoader train_loader_;
  // Rebuilt for each world (follow_world).
  double lr_ = 0;
  std::optional<LrPlan> plan_;
  std::unique_ptr<fw::DataLoader> test_loader_;
  // State: steps taken in the committed history. Not state: the most this process reached,
  // which tells how many steps a re-form lost.
  int64_t step_ = 0;
  int64_t reached_ = 0;
  // This process's commits and their time (not state: what they cost here; rank 0 prints it).
  int64_t commits_ = 0;
  double commit_seconds_ = 0;
  std::optional<Clock::time_point> failed_at_;  // when fn last failed
  const Clock::time_point start_ = Clock::now();
  TestResult test_;
  kolo::elastic::State state_{"train"};
};

}  // namespace

int train_elastic(const TrainArgs& args) {
  start_kolo(args);
  const kolo::Device device = choose_device(args);
  if (device.is_cuda()) {
    throw kolo::Error(kolo::Status::Unsupported(
        "--elastic: the elastic State holds CPU tensors only (docs/elastic.md); use --device "
        "cpu"));
  }
  const FashionMnist data(args);
  const int exit_code = ElasticTraining(args, data, device).run();
  if (!args.timeline.empty()) throw_if_error(kolo::stop_timeline());
  throw_if_error(kolo::shutdown());
  return exit_code;
}

}  // namespace kolo::example

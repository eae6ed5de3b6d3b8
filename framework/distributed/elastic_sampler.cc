#include "framework/distributed/elastic_sampler.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "kolo/status.h"

namespace kolo::fw {
namespace {

[[noreturn]] void bad(const std::string& message) {
  throw Error(Status::InvalidArgument("ElasticSampler: " + message));
}

void check_world(int rank, int world) {
  if (world < 1) bad("world must be >= 1, got " + std::to_string(world));
  if (rank < 0 || rank >= world) {
    bad("rank must be in [0, " + std::to_string(world) + "), got " + std::to_string(rank));
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The DataLoader's view: indices(epoch) as ElasticSampler::loader_sampler() says.
class LoaderSampler : public Sampler {
 public:
  explicit LoaderSampler(ElasticSampler* owner) : owner_(owner) {}
  std::vector<int64_t> indices(int64_t epoch) override { return owner_->epoch_share(epoch); }

 private:
  ElasticSampler* owner_;
};

}  // namespace

ElasticSampler::ElasticSampler(Options options, int rank, int world)
    : options_(std::move(options)) {
  if (options_.size < 1) bad("size must be >= 1, got " + std::to_string(options_.size));
  if (options_.batch_size < 1) {
    bad("batch_size must be >= 1, got " + std::to_string(options_.batch_size));
  }
  set_world(rank, world);
}

void ElasticSampler::set_world(int rank, int world) {
  check_world(rank, world);
  rank_ = rank;
  world_ = world;
}

Status ElasticSampler::add_to(elastic::State& state, const std::string& prefix) {
  KOLO_RETURN_IF_ERROR(state.add_counter(prefix + ".epoch", &epoch_));
  return state.add_counter(prefix + ".consumed", &consumed_);
}

void ElasticSampler::set_position(int64_t epoch, int64_t consumed) {
  if (epoch < 0) bad("epoch must be >= 0, got " + std::to_string(epoch));
  if (consumed < 0 || consumed >= options_.size) {
    bad("consumed must be in [0, " + std::to_string(options_.size) + "), got " +
        std::to_string(consumed));
  }
  epoch_ = epoch;
  consumed_ = consumed;
}

void ElasticSampler::check_position() const {
  // The counters are public to a State, which writes whatever was committed; a State restored
  // from another job's layout (another --train-subset) would land here.
  if (epoch_ < 0 || consumed_ < 0 || consumed_ >= options_.size) {
    throw Error(Status::PreconditionFailed(
        "ElasticSampler: the position (epoch " + std::to_string(epoch_) + ", consumed " +
        std::to_string(consumed_) + ") is outside an epoch of " + std::to_string(options_.size) +
        " samples: was the State committed by a job with another data set size?"));
  }
}

std::vector<int64_t> ElasticSampler::identity() const {
  std::vector<int64_t> out(static_cast<size_t>(options_.size));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

const std::vector<int64_t>& ElasticSampler::order() {
  check_position();
  if (order_epoch_ != epoch_) {
    order_ =
        options_.shuffle ? seeded_permutation(options_.size, options_.seed, epoch_) : identity();
    order_epoch_ = epoch_;
  }
  return order_;
}

int64_t ElasticSampler::global_batch() const {
  check_position();
  return std::min(options_.batch_size * world_, options_.size - consumed_);
}

int64_t ElasticSampler::local_count() const {
  const int64_t g = global_batch();
  return g > rank_ ? ceil_div(g - rank_, world_) : 0;
}

// This rank's positions from `from` to the epoch's end: from + rank, from + rank + world, ...
// Every full step starts at a multiple of batch * world past `from`, so the strides of the
// steps join into one stride and the shares of all remaining steps are one strided run.
std::vector<int64_t> ElasticSampler::share(const std::vector<int64_t>& order, int64_t from) const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(ceil_div(options_.size - from, world_)));
  for (int64_t p = from + rank_; p < options_.size; p += world_)
    out.push_back(order[static_cast<size_t>(p)]);
  return out;
}

std::vector<int64_t> ElasticSampler::next_local() {
  const std::vector<int64_t>& o = order();
  const int64_t end = consumed_ + global_batch();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(local_count()));
  for (int64_t p = consumed_ + rank_; p < end; p += world_)
    out.push_back(o[static_cast<size_t>(p)]);
  return out;
}

std::vector<int64_t> ElasticSampler::remaining_local() { return share(order(), consumed_); }

std::vector<int64_t> ElasticSampler::epoch_share(int64_t epoch) {
  check_position();
  if (epoch < epoch_) {
    bad("epoch " + std::to_string(epoch) + " has ended (the position is in epoch " +
        std::to_string(epoch_) + ")");
  }
  if (epoch == epoch_) return remaining_local();
  const std::vector<int64_t> later =
      options_.shuffle ? seeded_permutation(options_.size, options_.seed, epoch) : identity();
  return share(later, 0);
}

void ElasticSampler::advance() {
  consumed_ += global_batch();
  if (consumed_ == options_.size) {
    consumed_ = 0;
    ++epoch_;
  }
}

int64_t ElasticSampler::steps_left_in_epoch() const {
  check_position();
  return ceil_div(options_.size - consumed_, options_.batch_size * world_);
}

int64_t ElasticSampler::step_in_epoch() const {
  check_position();
  return ceil_div(consumed_, options_.batch_size * world_);
}

int64_t ElasticSampler::steps_per_epoch() const {
  return ceil_div(options_.size, options_.batch_size * world_);
}

std::unique_ptr<Sampler> ElasticSampler::loader_sampler() {
  return std::make_unique<LoaderSampler>(this);
}

}  // namespace kolo::fw

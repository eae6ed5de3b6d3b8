// ElasticSampler: the data order of an elastic job (docs/elastic.md, "The training stack"), in
// which the number of ranks may change in the middle of an epoch.
//
// Note [Elastic order]. An epoch is a permutation of 0..size-1 drawn from (seed, epoch), the same
// on every rank (seeded_permutation, as RandomSampler). The position is one number, `consumed`:
// how many samples of the epoch's permutation the committed history has trained on. A step
// takes the next global batch, positions [consumed, consumed + G) with G = min(batch * world,
// size - consumed), and rank r of the world takes the positions consumed + r, consumed + r +
// world, consumed + r + 2 * world, ... below consumed + G (so a rank takes at most `batch`; in
// the epoch's last, shorter step the first ranks take one more than the last, and a rank may
// take none). Then consumed += G; at size the epoch ends and the next begins at 0.
//
// Why this works across a change of world: what a step trains on, as a set, is a contiguous run
// of the permutation that depends only on `consumed` and the world's size, never on which rank
// takes which sample, and DistributedOptimizer weights each rank by its sample count (Note
// [Exact averaging]), so the update is the one of a single process on that run. When a rank is
// lost, run() restores `consumed` to the last commit and the new world takes the remaining
// positions [consumed, size) in order: in the committed history every sample of every epoch is
// used exactly once, in the permutation's order, whatever the worlds were. A job that switches
// worlds at the same commit without a failure trains on the same samples in the same steps.
//
// With a fixed world whose size divides `size`, the batches are exactly those of a
// DistributedSampler (strided shards, Tail::kPad, which then pads nothing) cut by a DataLoader
// into batches of `batch`: rank r's k-th batch holds the same positions. With a remainder the
// DistributedSampler pads (a few samples twice) where this sampler gives a short last step.
//
// State. The position is two int64 counters (epoch, consumed) that add_to() registers in an
// elastic::State; restore() and sync() write them directly, so the sampler holds nothing else
// that a re-form could leave stale (the permutation is recomputed from the epoch when it
// changed). The rank and size are not state: set_world() after every re-form.
//
// Errors: kolo::Error(InvalidArgument) naming the argument for size < 1, batch < 1, world < 1,
// rank outside [0, world), an epoch < 0 or a consumed count outside [0, size); PreconditionFailed
// when the counters were written (by a State of another job's layout) with such values.
// Thread-safety: none; use it from the training thread (as the DataLoader it feeds).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/data/sampler.h"
#include "kolo/elastic.h"

namespace kolo::fw {

class ElasticSampler {
 public:
  struct Options {
    int64_t size = 0;        // samples per epoch, >= 1
    int64_t batch_size = 1;  // per rank per step, >= 1
    uint64_t seed = 0;
    bool shuffle = true;  // false: the identity order every epoch
  };

  ElasticSampler(Options options, int rank, int world);

  // Takes the new world after a re-form (from an elastic::State::on_reset callback). The position
  // is kept: the new world continues with the remaining samples.
  void set_world(int rank, int world);
  int rank() const { return rank_; }
  int world() const { return world_; }

  // Registers "<prefix>.epoch" and "<prefix>.consumed" as counters of `state`; the sampler must
  // outlive it. Errors: State::add_counter's (a key already registered, registration closed).
  Status add_to(elastic::State& state, const std::string& prefix = "sampler");

  int64_t epoch() const { return epoch_; }
  int64_t consumed() const { return consumed_; }
  // Moves to a position (a test, or a job that keeps it elsewhere). InvalidArgument as above.
  void set_position(int64_t epoch, int64_t consumed);

  // The next step, in this world: G, this rank's share of it, and this rank's dataset indices.
  int64_t global_batch() const;
  int64_t local_count() const;
  std::vector<int64_t> next_local();
  // Moves past the next step (consumed += G; the epoch rolls over at its end).
  void advance();

  // Steps in this world: left in the epoch, ceil((size - consumed) / (batch * world)); taken,
  // ceil(consumed / (batch * world)) (the step index a fixed world would be at, and so the
  // position of a per-step learning-rate schedule after a change); per epoch from the start.
  int64_t steps_left_in_epoch() const;
  int64_t step_in_epoch() const;
  int64_t steps_per_epoch() const;

  // This rank's indices of every remaining step of the current epoch, in order: the DataLoader
  // cuts them into batch_size batches that are exactly this rank's next_local() of each step
  // (each full step gives every rank exactly batch_size samples), except that a rank with no
  // sample in the epoch's last step gets no batch for it (check local_count() first).
  std::vector<int64_t> remaining_local();

  // remaining_local() when `epoch` is the current epoch; this rank's whole share of a later
  // epoch (in this world) otherwise. InvalidArgument for an epoch that has ended.
  std::vector<int64_t> epoch_share(int64_t epoch);

  // A Sampler for a DataLoader whose indices(e) is epoch_share(e). Unlike other samplers it
  // depends on the position when asked: start the loader's epoch again after a re-form. It
  // borrows this sampler, which must outlive it.
  std::unique_ptr<Sampler> loader_sampler();

 private:
  void check_position() const;
  std::vector<int64_t> identity() const;
  const std::vector<int64_t>& order();
  std::vector<int64_t> share(const std::vector<int64_t>& order, int64_t from) const;

  const Options options_;
  int rank_ = 0;
  int world_ = 1;
  // The position; an elastic::State writes them directly (add_to).
  int64_t epoch_ = 0;
  int64_t consumed_ = 0;
  // The permutation of order_epoch_, recomputed when epoch_ moved.
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace kolo::fw

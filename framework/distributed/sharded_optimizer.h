// ShardedOptimizer: data-parallel training with ZeRO stage 1 or 2 (Rajbhandari et al. 2020,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models") around SGD, Adam,
// AdamW or LARS. docs/zero.md tells the design; this header the contract.
//
// Every rank keeps the whole model's parameters, as with DistributedOptimizer, but only its own
// contiguous shard of every bucket's optimizer state (Note [Shard layout] in shard_layout.h).
// The hooks, the buckets, no_sync(), backward_passes_per_step and the exact sample-weighted
// averaging are DistributedOptimizer's (Notes [Buckets] and [Exact averaging] in
// distributed_optimizer.h); what travels differs:
//   - when a bucket's last gradient becomes final inside backward, the bucket's flat gradient
//     buffer is weighted by the rank's sample count and reduce-scattered: each rank receives
//     the summed gradient of its shard only;
//   - step() divides by the global sample count, updates this rank's shard of each bucket with
//     the wrapped optimizer's own kernels and hyperparameters (sharded_update.h), and
//     all-gathers the bucket's updated parameters, bucket by bucket, so that one bucket is
//     gathered while the next is updated (Note [Step pipeline] in sharded_step.cc).
// Memory layout (Notes [Flat parameters] and [Gradient views] in sharded_optimizer.cc): the
// constructor moves each bucket's parameters into one flat buffer (the Tensor handles stay the same
// objects with the same values; views or raw pointers of a parameter taken before no longer alias
// it), and zero_grad() makes every .grad() a view of its bucket's flat gradient buffer, so backward
// accumulates into what is reduce-scattered and the allgather writes into the parameters, with
// no copies. In stage 1 .grad() keeps this rank's local gradient (times its sample count) after
// step(); DistributedOptimizer leaves the averaged gradient there, of which a rank here has its
// shard only. Stage 2 (ShardStage::kGradients) in addition releases every parameter's .grad()
// once its bucket is submitted and the flat gradient buffers once every bucket is reduced: after
// a step a rank holds only its shard's gradient (1/N); the next zero_grad() allocates them
// again. Stage 1 keeps the buffers between steps (no allocation per step).
//
// The parameters equal those of DistributedOptimizer (and of one process training on the union
// of the ranks' batches) up to float rounding: the reductions sum in another order; the update
// of each element is the same arithmetic.
//
// LARS and global-norm clipping (ShardedOptions::max_grad_norm) need norms of tensors that span
// shards: each rank sums squares over its shard and one allreduce of the partial sums (float64,
// 1 value for clipping, 2 per parameter for LARS) gives the totals.
//
// The wrapped optimizer: its hyperparameters, param groups (lr_scale, weight_decay) and lr()
// (set it as usual, e.g. from an LrSchedule, before step()) are read at each step; its "step"
// and "param_steps" counters are advanced by step(). Its per-parameter state tensors are
// copied into this rank's slices and then replaced by empty ones at construction (that memory is
// what sharding saves): the wrapped optimizer must not be stepped, saved or broadcast directly
// afterwards (its step() then throws PreconditionFailed); use sharded_checkpoint.h.
//
// Devices. The parameters are float32, all on the CPU or all on one CUDA device; every buffer
// above (flat parameters and gradients, reduced shards, state slices, 16-bit copies) lives on
// that device and is counted under its kind by memory_stats.h. With CUDA parameters the
// reduce-scatter and allgather run on the device buffers (on the GPU backend, or staged through
// the host to a CPU backend, as Kolo does for any CUDA tensor), and the division by the sample
// count, the widening, the slice updates (device_update.h) and the norms' partial sums
// (Tensor::sq_norm) run on the device, on the framework's legacy default stream.
//
// Errors. Constructor: InvalidArgument as DistributedOptimizer's, and for a parameter that the
// optimizer does not hold (or one it holds that is not named), a parameter that is not float32
// or not on the first parameter's device (naming it, what was expected and what it is),
// max_grad_norm not finite or < 0; Unsupported for an optimizer whose state cannot be
// sharded (naming it); Mismatch (after one allgather over the process set) when ranks disagree
// on the stage, bucket_bytes, clipping, compression, optimizer type, the parameters' sizes or
// device kind (cpu, cuda), naming the setting and the ranks' values. step(): kolo::Error carrying
// Kolo's Status when a collective fails; when the first bucket's reduce-scatter fails (or, with
// clipping or LARS, any) no parameter has changed, when a later one fails the step is partial (Note
// [Step pipeline]; the message names the updated buckets); when an allgather fails the replicas may
// differ (restore from a checkpoint). PreconditionFailed inside no_sync().
// Thread-safety: use from the training thread; hooks run inside backward() on that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/distributed/distributed_optimizer.h"
#include "framework/distributed/shard_layout.h"
#include "framework/distributed/sharded_update.h"
#include "framework/optim/optimizer.h"
#include "framework/tensor.h"
#include "kolo/handle.h"

namespace kolo::fw {

enum class ShardStage { kOptimizerState = 1, kGradients = 2 };

struct ShardedOptions {
  // Buckets, averaging, passes and the process set, as for DistributedOptimizer.
  // name_prefix defaults to "zero" here. With fp16/bf16 compression each bucket's reduce-scatter
  // runs on a 16-bit copy (allocated per step), its shard widened back to float32; the
  // parameters' allgather stays float32.
  DistributedOptions distributed = {.name_prefix = "zero"};
  ShardStage stage = ShardStage::kOptimizerState;
  // Global-norm gradient clipping of the averaged gradient (clip_coefficient in
  // sharded_update.h); 0 disables it.
  double max_grad_norm = 0;
};

// Bytes per category that this optimizer holds or knows of (Tensor storage, counted by size),
// on the parameters' device (see Devices above).
struct MemoryBytes {
  int64_t parameters = 0;  // the model's parameters (whole on every rank in stages 1, 2)
  // Defined .grad() buffers (a flat buffer that .grad() views counted once) plus this rank's
  // reduced shard.
  int64_t gradients = 0;
  int64_t optimizer_state = 0;  // this rank's state slices
  // Flat gradient buffers that no .grad() views any more (stage 2, until reduced) and, with
  // compression, the 16-bit copies.
  int64_t communication = 0;
};
struct ShardMemory {
  MemoryBytes current;  // at the last sample
  MemoryBytes peak;     // the largest value of each category at any sample
};

class ShardedOptimizer;

// The scope of ShardedOptimizer::no_sync() (as NoSyncScope for DistributedOptimizer).
class [[nodiscard]] ShardedNoSyncScope {
 public:
  ShardedNoSyncScope(ShardedNoSyncScope&& other) noexcept
      : owner_(std::exchange(other.owner_, nullptr)) {}
  ShardedNoSyncScope& operator=(ShardedNoSyncScope&&) = delete;
  ShardedNoSyncScope(const ShardedNoSyncScope&) = delete;
  ~ShardedNoSyncScope();

 private:
  friend class ShardedOptimizer;
  explicit ShardedNoSyncScope(ShardedOptimizer* owner) : owner_(owner) {}
  ShardedOptimizer* owner_;
};

// One slice of the optimizer state: elements [param_offset, param_offset + length) of the
// wrapped optimizer's parameter `index` (flattened group order), one tensor per slot.
struct StateSlice {
  int64_t index = 0;
  int64_t param_offset = 0;
  int64_t length = 0;
  std::vector<Tensor> slots;  // each float32 [length], shared with the optimizer
};

class ShardedOptimizer {
 public:
  ShardedOptimizer(Optimizer& inner, std::vector<std::pair<std::string, Tensor>> named_params,
                   ShardedOptions options = {});
  ~ShardedOptimizer();
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  // As DistributedOptimizer's; zero_grad() also (re)makes the gradients views of the flat
  // buffers (see above), so call it before each step's first backward.
  void set_local_batch_size(int64_t n);
  void zero_grad();
  void step();
  ShardedNoSyncScope no_sync();

  Optimizer& inner() { return inner_; }
  const ShardedOptions& options() const { return options_; }
  // This rank's position in the process set and the set's size.
  int shard_rank() const { return rank_; }
  int shard_count() const { return ranks_; }
  // The buckets and every rank's shard of each (Note [Shard layout]).
  const std::vector<ShardBucket>& layout() const { return layout_; }
  // The slot names of the wrapped optimizer ("momentum"; "exp_avg", "exp_avg_sq").
  const std::vector<std::string>& slot_names() const { return updater_.slot_names(); }
  // This rank's state slices; writing through the tensors changes the state (checkpoint load).
  std::vector<StateSlice> state_slices() const;
  // Samples the current bytes per category (and updates the peaks); also sampled at each
  // bucket's submission and at the end of step(). Not during backward: a gradient's bytes
  // before its bucket is submitted show only in a later sample.
  ShardMemory memory();
  const DistributedStats& stats() const { return stats_; }

 private:
  friend class ShardedNoSyncScope;
  struct Param;
  struct Bucket;

  void check_agreement() const;
  // Moves each bucket's parameters into one flat buffer (Note [Flat parameters]).
  void move_parameters();
  // Makes the bucket's parameters' gradients zeroed views of its flat buffer.
  void attach_gradient_views(Bucket& bucket, const ShardBucket& layout);
  // Slices the wrapped optimizer's state into this rank's shards, then releases its tensors.
  void take_state();
  bool weighted() const;
  // The view of `t` that a collective reads, with (for CUDA) a ready event recorded now, so
  // that Kolo's stream waits for the kernels that wrote it and not for later ones; the event
  // is kept in `event` until the handle completes.
  TensorView ready_view(const Tensor& t, std::shared_ptr<void>& event) const;
  void on_gradient_ready(size_t index);
  // Weighs the bucket's gradients in its flat buffer (copying in those that are not views of
  // it); stage 2 then releases the .grad() handles.
  void pack_gradients(Bucket& bucket, const ShardBucket& layout);
  void submit(Bucket& bucket);
  void submit_sample_count();
  Status wait_reductions();
  Status finish_reduction(Bucket& bucket);
  struct Progress {
    Status status;
    size_t updated_buckets = 0;
  };
  Progress update_and_gather();
  double gradient_scale() const;
  void clip_and_measure(std::vector<LayerNorms>& norms);
  void update_bucket(Bucket& bucket, const std::vector<LayerNorms>& norms);
  void gather_bucket(Bucket& bucket);
  Status finish_gathers();
  void reset_step();
  void sample_memory();

  Optimizer& inner_;
  const ShardedOptions options_;
  const SliceUpdater updater_;
  Device device_ = Device::cpu();  // every parameter's, and every buffer's here
  int rank_ = 0;
  int ranks_ = 1;
  std::vector<Param> params_;
  std::vector<ShardBucket> layout_;
  std::vector<Bucket> buckets_;
  Tensor* step_counter_ = nullptr;  // the wrapped optimizer's "step"
  Tensor* param_counts_ = nullptr;  // its "param_steps"
  int64_t local_samples_ = 0;
  bool count_given_ = false;
  int64_t global_samples_ = 0;
  bool count_submitted_ = false;
  Handle count_handle_;
  int no_sync_depth_ = 0;
  std::optional<std::chrono::steady_clock::time_point> first_submit_;  // this step's
  DistributedStats stats_;
  ShardMemory memory_;
};

}  // namespace kolo::fw

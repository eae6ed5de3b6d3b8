// DistributedOptimizer: data-parallel training around any Optimizer.
//
// It registers a gradient-ready hook on every parameter (autograd.h, Note [Gradient-ready
// hooks]) and groups the parameters into buckets (Note [Buckets]). The moment backward makes
// the last gradient of a bucket final, the hook submits the bucket's allreduce to Kolo, so in a
// model of several buckets communication of the last layers' gradients runs while backward
// still computes the first layers'. step() waits for every allreduce, writes the averaged
// gradients back, then runs the wrapped optimizer's step.
//
// Note [Buckets]. Parameters are taken in reverse registration order (backward produces the
// output layers' gradients first) and packed into buckets of at most bucket_bytes of wire
// data; a parameter larger than that is a bucket alone, and a bucket never mixes devices or
// dtypes. A bucket of one parameter is an allreduce named "<prefix>.<parameter name>"; a larger
// one is a grouped allreduce named "<prefix>.bucket<k>(<first>..<last>)", whose members are
// negotiated together and run as one fused operation. Why not one allreduce per gradient:
// each submission that finds the background thread idle starts a negotiation cycle, a round of
// messages and wake-ups on every rank; on a host with a core per rank those preempt the compute
// threads. Measured on the 2-core VM (Fashion-MNIST CNN, 8 parameters, 0.8 MB, 2 ranks bound to
// a core each; docs/benchmarks.md): one allreduce per parameter (4-5 cycles per step) gave 7%
// fewer samples/s than one bucket (medians of 5 alternating runs: 9021 vs 9661), although it
// hid 88% of the communication behind backward against ~40%: with a core per rank, overlap
// saves latency but not the CPU that communication takes, and each cycle costs CPU.
// bucket_bytes = 0 gives one bucket per parameter (the most overlap, the most cycles). The
// default equals the coordinator's default fusion threshold, so one bucket is one fused
// operation; models far larger than that still overlap bucket by bucket. With the autotuner
// (KOLO_AUTOTUNE=1) bucket_bytes is only the start: between steps, the optimizer rebuilds its
// buckets when kolo::tuned_bucket_bytes() gives another size, which happens at the same step
// on every rank (Note [Autotune] in coordinator/autotune.h), so names agree across ranks.
//
// Averaging (Note [Exact averaging]). The gradient a rank computes from a mean loss is the mean
// over its local samples. When ranks hold different numbers of samples (the last batch of an
// epoch, uneven shards), a plain average over ranks weights every rank alike, which is not the
// gradient of the global batch. So by default each rank's gradient is weighted by its sample
// count: the hook pre-scales by n_local, the allreduce sums, and step() divides by the global
// count N (an int64 allreduce submitted with the first gradient). P-rank training then equals
// 1-rank training on the union of the batches up to float rounding. A rank tells its count with
// set_local_batch_size(n) before backward (0 is allowed: a rank without data this step). A rank
// that gives no count weighs as one sample, so a job where no rank gives counts gets the plain
// average over ranks. With backward_passes_per_step = k, gradients of k passes are accumulated
// locally and the step's gradient is their mean (each pass is assumed to hold the same number
// of samples within a rank; the counts of all passes are summed for the weighting).
//
// Parameters that a pass did not use (no hook fired) are still allreduced at step(), with a
// zero gradient, because other ranks may have used them.
//
// no_sync() (as DDP's): inside the scope it returns, backward accumulates gradients locally and
// nothing is submitted (the hooks neither count passes nor start allreduces); the next
// backward outside the scope makes the gradients final as usual, so their allreduce carries the
// sum of every pass since the last step. k passes under no_sync plus one synced pass thus give
// the same gradient as one process running those k+1 passes on the union of the ranks' batches
// (with equal per-rank batches; sample counts given with set_local_batch_size inside the scope
// count for the step). step() inside the scope throws PreconditionFailed: it would communicate.
//
// Compression: with Compression::kFloat16 or kBFloat16 each gradient travels as 16-bit values
// (a persistent buffer per parameter); the result is widened back into the float32 gradient.
//
// Elastic training (docs/elastic.md, "The training stack"). When run() re-forms the world, the
// job calls reset_for_new_world() from an elastic::State::on_reset callback, once per re-form:
// the optimizer forgets the step that the lost world left half done and rebuilds its buckets.
// Nothing else depends on the world's size: the global process set's size() is read at each
// step, and the averaging divides by the global sample count that the new world's ranks report,
// so it stays exact across the change. Explicit rather than detected at the next step (from
// kolo::elastic::generation()) because a step interrupted in backward holds handles and pass
// counts that must be dropped before the next backward's hooks fire, not at step().
//
// Errors: a failed allreduce (a peer died, ranks disagree on a shape) makes step() throw
// kolo::Error carrying Kolo's Status (it names the tensor); the parameters are then not
// updated. Constructor: InvalidArgument for an empty or duplicate parameter name,
// backward_passes_per_step < 1, or an undefined parameter.
// Thread-safety: use from the training thread; hooks run inside backward() on that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/optim/optimizer.h"
#include "framework/tensor.h"
#include "kolo/handle.h"
#include "kolo/process_set.h"
#include "kolo/tensor.h"

namespace kolo::fw {

enum class Compression { kNone, kFloat16, kBFloat16 };

struct DistributedOptions {
  int backward_passes_per_step = 1;
  Compression compression = Compression::kNone;
  // Allreduce names start with "<name_prefix>." (Note [Buckets]): identical on every rank.
  std::string name_prefix = "grad";
  // See Note [Exact averaging]. false: always the plain average over ranks.
  bool weight_by_sample_count = true;
  // See Note [Buckets]. 0: one bucket per parameter. Must be >= 0 and equal on every rank.
  // The autotuner, when on, replaces it between steps.
  int64_t bucket_bytes = int64_t{4} << 20;
  // The ranks that train this replica together (data parallel within a group): gradients are
  // averaged over this set's members only. Only members may construct the optimizer over it;
  // the default is every rank (kolo/process_set.h).
  ProcessSet process_set = {};
};

// Counters for tests and diagnostics.
struct DistributedStats {
  int64_t steps = 0;
  // Parameters whose allreduce started inside backward, and those whose bucket waited for
  // step() (it held a parameter that no pass used, which is reduced with zeros).
  int64_t submitted_from_hooks = 0;
  int64_t submitted_at_step = 0;
  // Per step, the communication window runs from the first bucket's submission to the end of
  // the last allreduce; the exposed part is what step() spent waiting for it. Summed here, so
  // 1 - exposed / window is the share of communication hidden behind backward.
  double communication_window_seconds = 0;
  double exposed_wait_seconds = 0;
};

class DistributedOptimizer;

// The scope of DistributedOptimizer::no_sync(): gradients accumulate locally until it ends.
// Move-only; scopes nest. Must not outlive the optimizer.
class [[nodiscard]] NoSyncScope {
 public:
  NoSyncScope(NoSyncScope&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
  NoSyncScope& operator=(NoSyncScope&&) = delete;
  NoSyncScope(const NoSyncScope&) = delete;
  ~NoSyncScope();

 private:
  friend class DistributedOptimizer;
  explicit NoSyncScope(DistributedOptimizer* owner) : owner_(owner) {}
  DistributedOptimizer* owner_;
};

class DistributedOptimizer {
 public:
  // Not collective: an elastic job's joining worker constructs it while the survivors keep
  // theirs. Throws kolo::Error InvalidArgument for a bad option or parameter list, naming it.
  DistributedOptimizer(Optimizer& inner, std::vector<std::pair<std::string, Tensor>> named_params,
                       DistributedOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Adds n samples to this rank's count for the current step (call before backward).
  void set_local_batch_size(int64_t n);
  void zero_grad() { inner_.zero_grad(); }
  // Waits for every gradient's allreduce, averages, then updates the parameters.
  void step();
  // Until the returned scope ends, backward accumulates gradients without communication
  // (see no_sync() above the class).
  NoSyncScope no_sync();
  bool syncing() const { return no_sync_depth_ == 0; }

  // After the world was re-formed (kolo::shutdown() and init() under elastic::run()): waits for
  // the old world's operations, which shutdown() failed (Kolo borrows the gradients until they
  // complete), drops them, the pass and sample counts of the unfinished step and the gradients,
  // and rebuilds the buckets for the new world (the autotuner's size if it has one). Local; the
  // parameters and the wrapped optimizer's state are the State's to restore. Errors:
  // PreconditionFailed inside no_sync(); Unsupported for an optimizer over a process set other
  // than the global one (its members belonged to the old world). Both throw kolo::Error.
  void reset_for_new_world();

  Optimizer& inner() { return inner_; }
  const DistributedStats& stats() const { return stats_; }
  // The allreduces submitted so far in the current step, one per submitted bucket (tests use
  // them to show that communication progresses while backward runs).
  std::vector<Handle> submitted_handles() const;
  // The buckets' allreduce names, in submission order when backward runs output to input.
  std::vector<std::string> bucket_names() const;

 private:
  friend class NoSyncScope;
  struct Param {
    std::string name;  // "<prefix>.<parameter name>"
    Tensor tensor;
    int hook_id = -1;
    int passes_ready = 0;  // backward passes of this step whose gradient became final
    size_t bucket = 0;
    Tensor wire;  // 16-bit buffer when compressing
    // CUDA gradients: recorded when the gradient (or its 16-bit copy) became final, passed
    // with the view so that Kolo's stream waits on it; kept until the next step's.
    std::shared_ptr<void> ready_event;
  };
  struct Bucket {
    std::string name;            // the allreduce's name
    std::vector<size_t> params;  // indices into params_
    size_t ready = 0;            // parameters whose gradient is final this step
    bool submitted = false;
    Handle handle;
  };

  // Packs params_ into buckets of at most bucket_bytes_ (replacing the old ones).
  void build_buckets();
  // Between steps: adopts the autotuner's bucket size for the coming step, if it changed.
  void follow_tuned_bucket_size();
  void on_gradient_ready(size_t index);
  void submit(Bucket& bucket);
  // The tensor this parameter's gradient travels in, weighted and (when compressing) narrowed.
  TensorView prepare_gradient(Param& param, double local_weight);
  void submit_sample_count();
  void finish_gradient(Param& param, double scale);
  // Drops the current step's handles, pass and sample counts (reset_for_new_world()).
  void clear_step();

  Optimizer& inner_;
  const DistributedOptions options_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  int64_t bucket_bytes_;  // the buckets' current size limit
  int64_t local_samples_ = 0;
  bool count_given_ = false;
  int64_t global_samples_ = 0;  // the buffer of the count allreduce
  bool count_submitted_ = false;
  Handle count_handle_;
  std::optional<std::chrono::steady_clock::time_point> first_submit_;  // this step's
  DistributedStats stats_;
  int no_sync_depth_ = 0;  // open no_sync() scopes
};

}  // namespace kolo::fw

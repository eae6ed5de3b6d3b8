// DistributedOptimizer: data-parallel training around any Optimizer.
//
// It registers a gradient-ready hook on every parameter (autograd.h, Note [Gradient-ready
// hooks]). The moment backward makes a parameter's gradient final, the hook submits that
// gradient's allreduce to Kolo under the name "<prefix>.<parameter name>", so communication of
// the last layers' gradients runs while backward still computes the first layers'. step()
// waits for every allreduce, writes the averaged gradients back, then runs the wrapped
// optimizer's step.
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
// Compression: with Compression::kFloat16 or kBFloat16 each gradient travels as 16-bit values
// (a persistent buffer per parameter); the result is widened back into the float32 gradient.
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

namespace kolo::fw {

enum class Compression { kNone, kFloat16, kBFloat16 };

struct DistributedOptions {
  int backward_passes_per_step = 1;
  Compression compression = Compression::kNone;
  // Allreduce names are "<name_prefix>.<parameter name>": identical on every rank.
  std::string name_prefix = "grad";
  // See Note [Exact averaging]. false: always the plain average over ranks.
  bool weight_by_sample_count = true;
};

// Counters for tests and diagnostics.
struct DistributedStats {
  int64_t steps = 0;
  int64_t submitted_from_hooks = 0;  // allreduces started inside backward
  int64_t submitted_at_step = 0;     // unused parameters, reduced with zeros at step()
  // Per step, the communication window runs from the first gradient's submission to the end of
  // the last allreduce; the exposed part is what step() spent waiting for it. Summed here, so
  // 1 - exposed / window is the share of communication hidden behind backward.
  double communication_window_seconds = 0;
  double exposed_wait_seconds = 0;
};

class DistributedOptimizer {
 public:
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

  Optimizer& inner() { return inner_; }
  const DistributedStats& stats() const { return stats_; }
  // The allreduces submitted so far in the current step (tests use them to show that
  // communication progresses while backward runs).
  std::vector<Handle> submitted_handles() const;

 private:
  struct Param {
    std::string name;     // allreduce name
    Tensor tensor;
    int hook_id = -1;
    int passes_ready = 0;  // backward passes of this step whose gradient became final
    bool submitted = false;
    Handle handle;
    Tensor wire;          // 16-bit buffer when compressing
  };

  void on_gradient_ready(size_t index);
  void submit(size_t index);
  void submit_sample_count();
  void finish_gradient(Param& param, double scale);

  Optimizer& inner_;
  const DistributedOptions options_;
  std::vector<Param> params_;
  int64_t local_samples_ = 0;
  bool count_given_ = false;
  int64_t global_samples_ = 0;  // the buffer of the count allreduce
  bool count_submitted_ = false;
  Handle count_handle_;
  std::optional<std::chrono::steady_clock::time_point> first_submit_;  // this step's
  DistributedStats stats_;
};

}  // namespace kolo::fw

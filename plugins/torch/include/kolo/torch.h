// Kolo for LibTorch (Kolo::torch): Kolo's collectives on torch::Tensor, a DistributedOptimizer
// around any torch::optim::Optimizer, and the helpers of data-parallel training (parameter and
// optimizer-state broadcast, a distributed sampler). Built on Kolo's public API (kolo/kolo.h)
// only; the Python module kolo.torch is built from the same code.
//
//   kolo::torch::init();
//   kolo::torch::broadcast_parameters(*model);
//   kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters());
//   loss.backward();   // hooks submit the gradients' allreduces as they become final
//   opt.step();        // waits for them, averages, steps
//
// Tensors. A tensor is viewed in place (no copy) when it is contiguous; otherwise a contiguous
// copy is reduced and, for the in-place forms, copied back when the handle is waited for. Every
// dtype Kolo has is accepted (uint8, int8, int16, int32, int64, float16, bfloat16, float32,
// float64); others (bool, complex, ...) throw Error(InvalidArgument) naming the tensor and dtype.
// CUDA tensors pass their device and an event recorded on the current stream, after which Kolo
// reads them (compiled everywhere; runs only in a CUDA build of LibTorch and Kolo).
//
// Errors: every function throws kolo::torch::Error carrying Kolo's Status (its message names
// the tensor, the ranks and what differs); waits throw the operation's error, except that an
// operation the core refuses at submission with InvalidArgument (a name already in flight on
// this rank, a rank that has joined) throws at the *_async call, as Horovod's do. Memory: the
// tensors passed are kept alive until the operation completes, also when the Handle is dropped
// before (they are then freed on a later call's thread, never on Kolo's background thread).
// Thread-safety: as kolo.h.
#pragma once

// The parts of LibTorch this API needs, not <torch/torch.h>: torch's headers dominate the
// compile time of every file that includes them (Note in plugins/torch/CMakeLists.txt).
#include <ATen/ATen.h>
#include <torch/data/samplers/distributed.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kolo/kolo.h"

#pragma GCC visibility push(default)

namespace kolo::torch {

// Kolo's Status as an exception.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status);
  const Status& status() const { return status_; }

 private:
  Status status_;
};
// Throws Error unless `s` is OK.
void check(const Status& s);

// torch dtype <-> Kolo dtype. nullopt for torch dtypes Kolo does not have.
std::optional<DataType> to_kolo_dtype(c10::ScalarType type);
c10::ScalarType to_torch_dtype(DataType type);
// A borrowed view of a contiguous tensor's storage. Throws Error(InvalidArgument) naming
// `name` for an undefined or non-contiguous tensor or an unsupported dtype.
TensorView view_of(const at::Tensor& tensor, const std::string& name);

// Lifecycle and topology (kolo.h's, throwing).
void init();
void shutdown();
inline bool is_initialized() { return kolo::is_initialized(); }
inline int rank() { return kolo::rank(); }
inline int size() { return kolo::size(); }
inline int local_rank() { return kolo::local_rank(); }
inline int local_size() { return kolo::local_size(); }

// One asynchronous operation on torch tensors. wait() returns the outputs (the input itself
// for in-place forms), throws the operation's error. Copies share the operation.
class Handle {
 public:
  Handle() = default;
  bool poll() const;
  // Blocks until completion; throws Error on failure. Returns the output tensors: one, or
  // several for a grouped allreduce.
  std::vector<at::Tensor> wait() const;
  // wait() for single-output operations.
  at::Tensor wait_one() const { return wait().at(0); }
  // alltoall: the rows received from each rank (after wait()).
  std::vector<int64_t> received_splits() const;
  const kolo::Handle& raw() const;

  struct State;  // tensors kept alive, outputs, copy-backs

 private:
  friend Handle make_handle(std::unique_ptr<State>);
  std::shared_ptr<State> state_;
};

// In place: the result replaces `tensor` (the "_" forms). Out of place: a new tensor.
// Process sets (kolo/process_set.h): every operation runs on the global set unless given one
// (AllreduceOptions::process_set, or the process_set argument); a broadcast's root is a rank of
// the set. Submitting to a set this rank is not in fails the Handle naming the set and rank.
Handle allreduce_async_(const std::string& name, const at::Tensor& tensor,
                        AllreduceOptions opts = {});
Handle allreduce_async(const std::string& name, const at::Tensor& tensor,
                       AllreduceOptions opts = {});
Handle grouped_allreduce_async_(const std::string& name, const std::vector<at::Tensor>& tensors,
                                AllreduceOptions opts = {});
Handle grouped_allreduce_async(const std::string& name, const std::vector<at::Tensor>& tensors,
                               AllreduceOptions opts = {});
// Output: every rank's tensor concatenated along dim 0 (same dtype and device as the input).
Handle allgather_async(const std::string& name, const at::Tensor& tensor,
                       const ProcessSet& process_set = {});
Handle broadcast_async_(const std::string& name, const at::Tensor& tensor, int root = 0,
                        const ProcessSet& process_set = {});
Handle broadcast_async(const std::string& name, const at::Tensor& tensor, int root = 0,
                       const ProcessSet& process_set = {});
// splits: rows sent to each rank (empty: equal shares).
Handle alltoall_async(const std::string& name, const at::Tensor& tensor,
                      std::vector<int64_t> splits = {}, const ProcessSet& process_set = {});
Handle reducescatter_async(const std::string& name, const at::Tensor& tensor,
                           AllreduceOptions opts = {});

// Blocking forms.
at::Tensor allreduce(const std::string& name, const at::Tensor& tensor, AllreduceOptions opts = {});
void allreduce_(const std::string& name, const at::Tensor& tensor, AllreduceOptions opts = {});
at::Tensor allgather(const std::string& name, const at::Tensor& tensor,
                     const ProcessSet& process_set = {});
void broadcast_(const std::string& name, const at::Tensor& tensor, int root = 0,
                const ProcessSet& process_set = {});
void barrier(const std::string& name = "barrier", const ProcessSet& process_set = {});
// Completes once every rank joined; returns the rank that joined last (kolo::join()).
int join();

// Copies root's parameters and buffers into every rank's module (names "bcast.param.<name>",
// "bcast.buffer.<name>").
void broadcast_parameters(const ::torch::nn::Module& module, int root = 0);
// Copies root's optimizer state (momentum buffers, step counts, param-group options) to every
// rank: serialised with torch::serialize on root, broadcast as bytes, loaded elsewhere. The
// optimizers must hold the same parameters in the same order.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root = 0);

// torch::data samplers that give each rank its share of a dataset of `dataset_size` samples
// (torch's own distributed samplers, with Kolo's rank and size).
std::unique_ptr<::torch::data::samplers::DistributedRandomSampler> make_random_sampler(
    size_t dataset_size);
std::unique_ptr<::torch::data::samplers::DistributedSequentialSampler> make_sequential_sampler(
    size_t dataset_size);

enum class Compression { kNone, kFloat16, kBFloat16 };

struct DistributedOptions {
  int backward_passes_per_step = 1;
  Compression compression = Compression::kNone;
  std::string name_prefix = "grad";    // allreduce names: "<prefix>.<parameter>" or buckets
  bool weight_by_sample_count = true;  // Note [Exact averaging] (distributed_optimizer.cc)
  // Without weight_by_sample_count: kAverage (over ranks) or kSum.
  ReduceOp op = ReduceOp::kAverage;
  // The step's gradient is the mean over its backward passes; false: their sum (Horovod's
  // backward_passes_per_step, whose scripts divide the loss themselves).
  bool mean_over_passes = true;
  // Allreduce prescale 1 / f and postscale f (Horovod's gradient_predivide_factor: keeps 16-bit
  // sums in range). Must be > 0.
  double gradient_predivide_factor = 1.0;
  // Note [Buckets]. 0: one bucket per parameter. The autotuner's size (kolo::tuned_bucket_bytes)
  // replaces it once there is one, between steps.
  int64_t bucket_bytes = int64_t{4} << 20;
  ProcessSet process_set = {};  // the ranks that average gradients (every member must train)
};

struct DistributedStats {
  int64_t steps = 0;                 // completed synchronize() calls
  int64_t submitted_from_hooks = 0;  // gradients that became final inside backward
  int64_t submitted_at_step = 0;     // buckets synchronize() submitted (a parameter no pass used)
  int64_t allreduces = 0;            // gradient allreduces submitted: one per bucket and step
};

// The communication half of DistributedOptimizer, for optimizers that are not a
// torch::optim::Optimizer (kolo.torch's Python DistributedOptimizer drives one): hooks on the
// parameters' gradient accumulators submit each bucket's allreduce the moment its gradients are
// final; synchronize() waits for them and leaves the averaged gradient in each parameter's
// .grad. See distributed_optimizer.cc for the design (hooks, buckets, averaging). A sparse
// gradient (nn.Embedding(sparse=true)) travels dense in its bucket and is sparse again in .grad
// after synchronize() (horovod.torch's sparse_as_dense, which Kolo does in either case).
//
// Errors: the constructor throws Error(InvalidArgument) for a bad option or a parameter Kolo
// cannot reduce (naming it). A backward pass that makes a gradient final a second time before
// synchronize() throws Error(PreconditionFailed) out of backward(). Thread-safety: hooks run on
// autograd's threads; one step at a time (backward, then synchronize) on one thread.
class GradientReducer {
 public:
  GradientReducer(const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                  DistributedOptions options = {});
  // Waits for the allreduces still in flight (they write into the gradients).
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Adds n samples to this rank's count for the current step (call before backward).
  void set_local_batch_size(int64_t n);
  // Submits the buckets no pass made final (zeros for unused parameters: other ranks may have
  // used them), waits for every allreduce, and leaves the step's averaged gradient in .grad.
  // Throws Error (naming the tensor) when an allreduce failed; the state is reset either way.
  void synchronize();
  // kolo::mark_step() (throwing), then the buckets follow the autotuner's size if it changed:
  // call once per step, after the optimizer's step.
  void mark_step();
  // A bucket's allreduce was submitted and synchronize() has not run yet (zeroing gradients
  // now would race with Kolo writing them).
  bool pending() const;
  // Drops the unfinished step without waiting: pass and sample counts and the submitted
  // allreduces' handles (a dropped handle keeps its tensors alive until the operation ends).
  // For elastic training, after the world broke: those operations fail or are aborted by the
  // shutdown that re-forms the world, which is also when they stop writing into the gradients.
  // The gradients keep whatever they hold; the caller zeroes them before the next step.
  void abandon_step();

  // While a NoSync lives, backward passes only accumulate gradients locally (no
  // communication), as DDP's no_sync(); the next pass outside it reduces the sum. Such passes
  // count as passes of the step (with mean_over_passes, the step's gradient is the mean over
  // its passes). Nests.
  class NoSync {
   public:
    explicit NoSync(GradientReducer& r) : r_(r) { ++r_.no_sync_depth_; }
    ~NoSync() { --r_.no_sync_depth_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradientReducer& r_;
  };
  NoSync no_sync() { return NoSync(*this); }

  const DistributedStats& stats() const;
  // The allreduces submitted so far in this step (tests: progress during backward).
  std::vector<Handle> submitted_handles() const;
  std::vector<std::string> bucket_names() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int no_sync_depth_ = 0;
};

// Data-parallel training around any torch::optim::Optimizer: a GradientReducer on the
// parameters, whose averaged gradients step() hands to the inner optimizer.
class DistributedOptimizer {
 public:
  DistributedOptimizer(::torch::optim::Optimizer& inner,
                       const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       DistributedOptions options = {});

  // Adds n samples to this rank's count for the current step (call before backward).
  void set_local_batch_size(int64_t n) { reducer_.set_local_batch_size(n); }
  void zero_grad() { inner_.zero_grad(); }
  // Waits for every bucket's allreduce, averages, runs the inner optimizer's step. Throws
  // Error (naming the tensor) when an allreduce failed; the parameters are then unchanged.
  void step();

  using NoSync = GradientReducer::NoSync;
  NoSync no_sync() { return reducer_.no_sync(); }

  ::torch::optim::Optimizer& inner() { return inner_; }
  GradientReducer& reducer() { return reducer_; }
  const DistributedStats& stats() const { return reducer_.stats(); }
  std::vector<Handle> submitted_handles() const { return reducer_.submitted_handles(); }
  std::vector<std::string> bucket_names() const { return reducer_.bucket_names(); }

 private:
  ::torch::optim::Optimizer& inner_;
  GradientReducer reducer_;
};

}  // namespace kolo::torch
#pragma GCC visibility pop

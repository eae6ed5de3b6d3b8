#include "framework/distributed/distributed_optimizer.h"

#include <set>

#include "framework/distributed/tensor_view.h"
#include "framework/memory_stats.h"
#include "kolo/kolo.h"
#ifdef KOLO_HAVE_CUDA
#include "framework/kernels/cuda_allocator.h"
#endif

namespace kolo::fw {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(Status::InvalidArgument("DistributedOptimizer: " + message));
}

DataType wire_dtype(Compression compression) {
  switch (compression) {
    case Compression::kFloat16:
      return DataType::kFloat16;
    case Compression::kBFloat16:
      return DataType::kBFloat16;
    case Compression::kNone:
      break;
  }
  return DataType::kFloat32;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(Optimizer& inner,
                                           std::vector<std::pair<std::string, Tensor>> named_params,
                                           DistributedOptions options)
    : inner_(inner), options_(std::move(options)), bucket_bytes_(options_.bucket_bytes) {
  if (options_.backward_passes_per_step < 1) {
    fail("backward_passes_per_step must be >= 1, got " +
         std::to_string(options_.backward_passes_per_step));
  }
  if (options_.bucket_bytes < 0)
    fail("bucket_bytes must be >= 0, got " + std::to_string(options_.bucket_bytes));
  std::set<std::string> seen;
  params_.reserve(named_params.size());
  for (auto& [name, tensor] : named_params) {
    if (name.empty()) fail("a parameter has an empty name");
    if (!seen.insert(name).second) fail("parameter name '" + name + "' appears twice");
    if (!tensor.defined()) fail("parameter '" + name + "' is undefined");
    Param param;
    param.name = options_.name_prefix + "." + name;
    param.tensor = tensor;
    params_.push_back(std::move(param));
  }
  if (auto tuned = tuned_bucket_bytes()) bucket_bytes_ = *tuned;
  build_buckets();
  // Hooks capture an index into params_, which no longer changes size.
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].hook_id =
        params_[i].tensor.register_grad_ready_hook([this, i](Tensor&) { on_gradient_ready(i); });
  }
}

void DistributedOptimizer::follow_tuned_bucket_size() {
  auto tuned = tuned_bucket_bytes();
  if (!tuned || *tuned == bucket_bytes_) return;
  bucket_bytes_ = *tuned;
  build_buckets();
}

void DistributedOptimizer::build_buckets() {
  buckets_.clear();
  const auto cap = static_cast<size_t>(bucket_bytes_);
  size_t bytes = 0;
  for (size_t i = params_.size(); i-- > 0;) {
    const Tensor& t = params_[i].tensor;
    const size_t size =
        options_.compression == Compression::kNone
            ? t.nbytes()
            : static_cast<size_t>(t.numel()) * dtype_size(wire_dtype(options_.compression));
    bool fresh = buckets_.empty() || bytes + size > cap;
    if (!fresh) {
      const Tensor& head = params_[buckets_.back().params.front()].tensor;
      fresh = head.device() != t.device() || head.dtype() != t.dtype();
    }
    if (fresh) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(i);
    params_[i].bucket = buckets_.size() - 1;
    bytes += size;
  }
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (b.params.size() == 1) {
      b.name = params_[b.params.front()].name;
    } else {
      const std::string prefix = options_.name_prefix + ".";
      b.name = prefix + "bucket" + std::to_string(k) + "(" +
               params_[b.params.front()].name.substr(prefix.size()) + ".." +
               params_[b.params.back()].name.substr(prefix.size()) + ")";
    }
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  for (auto& param : params_) param.tensor.remove_grad_ready_hook(param.hook_id);
  // Kolo borrows the gradient buffers until the handles complete.
  for (auto& bucket : buckets_)
    if (bucket.handle.valid()) (void)bucket.handle.wait();
  if (count_handle_.valid()) (void)count_handle_.wait();
}

void DistributedOptimizer::set_local_batch_size(int64_t n) {
  if (n < 0) fail("local batch size must be >= 0, got " + std::to_string(n));
  local_samples_ += n;
  count_given_ = true;
}

NoSyncScope::~NoSyncScope() {
  if (owner_) --owner_->no_sync_depth_;
}

NoSyncScope DistributedOptimizer::no_sync() {
  ++no_sync_depth_;
  return NoSyncScope(this);
}

void DistributedOptimizer::on_gradient_ready(size_t index) {
  // Inside no_sync() the gradient only accumulates: this pass is not one of the step's.
  if (no_sync_depth_ > 0) return;
  Param& param = params_[index];
  if (++param.passes_ready != options_.backward_passes_per_step) return;
  // The sample count is final once the last pass runs backward. Sent with the first final
  // gradient, its (tiny) allreduce completes while backward still runs instead of adding a
  // negotiation round after the last bucket.
  if (options_.weight_by_sample_count && options_.process_set.size() > 1) submit_sample_count();
  Bucket& bucket = buckets_[param.bucket];
  if (++bucket.ready == bucket.params.size()) {
    submit(bucket);
    stats_.submitted_from_hooks += static_cast<int64_t>(bucket.params.size());
  }
}

void DistributedOptimizer::submit_sample_count() {
  if (count_submitted_) return;
  count_submitted_ = true;
  global_samples_ = count_given_ ? local_samples_ : 1;
  count_handle_ =
      allreduce_async(options_.name_prefix + ".__samples__", view_of(&global_samples_, {}),
                      {.process_set = options_.process_set});
}

TensorView DistributedOptimizer::prepare_gradient(Param& param, double local_weight) {
  Tensor grad = param.tensor.grad();
  if (!grad.defined()) {
    // Unused on this rank in every pass: contribute zeros.
    param.tensor.set_grad(Tensor::zeros(param.tensor.shape(), param.tensor.device()));
    grad = param.tensor.grad();
  }
  if (local_weight != 1.0) grad.mul_(static_cast<float>(local_weight));
  TensorView view;
  if (options_.compression == Compression::kNone) {
    view = view_of_tensor(grad);
  } else {
    if (!param.wire.defined()) {
      MemoryCategoryScope memory(MemoryCategory::kCommunication);
      param.wire = Tensor::empty(grad.shape(), grad.device(), wire_dtype(options_.compression));
    }
    param.wire.copy_(grad);  // a device kernel for CUDA tensors (Tensor::to(DataType))
    view = view_of_tensor(param.wire);
  }
#ifdef KOLO_HAVE_CUDA
  // The gradient was written on the compute (legacy default) stream; Kolo's stream waits for
  // this event instead of the host waiting for the device.
  if (view.device.is_cuda()) {
    param.ready_event = cuda_alloc::record_event(view.device.index);
    view.ready_event = param.ready_event.get();
  }
#endif
  return view;
}

void DistributedOptimizer::submit(Bucket& bucket) {
  if (bucket.submitted) return;
  bucket.submitted = true;
  if (options_.process_set.size() == 1) return;  // nothing to exchange; step() still divides
  if (!first_submit_) first_submit_ = std::chrono::steady_clock::now();

  // Kolo requires every rank to pass the same scale factors (a difference is reported as a
  // mismatch), so this rank's own weight is applied here and the reduction is a plain sum
  // (or average) with a common prescale.
  AllreduceOptions opts;
  double local_weight = 1.0;
  if (options_.weight_by_sample_count) {
    local_weight = count_given_ ? static_cast<double>(local_samples_) : 1.0;
    opts.reduction.op = ReduceOp::kSum;
  } else {
    opts.reduction.op = ReduceOp::kAverage;
  }
  opts.reduction.prescale = 1.0 / options_.backward_passes_per_step;
  opts.process_set = options_.process_set;
  std::vector<TensorView> views;
  views.reserve(bucket.params.size());
  for (size_t i : bucket.params) views.push_back(prepare_gradient(params_[i], local_weight));
  bucket.handle = views.size() == 1 ? allreduce_async(bucket.name, views.front(), opts)
                                    : grouped_allreduce_async(bucket.name, std::move(views), opts);
  if (options_.weight_by_sample_count) submit_sample_count();  // when no hook fired
}

void DistributedOptimizer::finish_gradient(Param& param, double scale) {
  Tensor grad = param.tensor.grad();
  if (options_.compression != Compression::kNone && param.wire.defined()) grad.copy_(param.wire);
  if (scale != 1.0) grad.mul_(static_cast<float>(scale));
}

void DistributedOptimizer::step() {
  if (no_sync_depth_ > 0)
    throw Error(Status::PreconditionFailed(
        "DistributedOptimizer::step() inside no_sync(): end the scope and run one more backward "
        "pass, whose gradients (summed with those accumulated in the scope) are allreduced"));
  const bool distributed = options_.process_set.size() > 1;
  // Buckets holding a parameter whose gradient never became final in this step's passes.
  for (auto& bucket : buckets_) {
    if (!bucket.submitted) {
      submit(bucket);
      stats_.submitted_at_step += static_cast<int64_t>(bucket.params.size());
    }
  }
  const auto wait_start = std::chrono::steady_clock::now();
  Status first_error;
  for (auto& bucket : buckets_) {
    if (!bucket.handle.valid()) continue;
    Status status = bucket.handle.wait();
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  if (count_handle_.valid()) {
    Status status = count_handle_.wait();
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  if (first_submit_) {
    const auto done = std::chrono::steady_clock::now();
    stats_.communication_window_seconds +=
        std::chrono::duration<double>(done - *first_submit_).count();
    stats_.exposed_wait_seconds += std::chrono::duration<double>(done - wait_start).count();
    first_submit_.reset();
  }
  // Reset before throwing so that the optimizer stays usable for the next step.
  const int64_t global_samples = global_samples_;
  const bool weighted = distributed && options_.weight_by_sample_count;
  for (auto& param : params_) param.passes_ready = 0;
  for (auto& bucket : buckets_) {
    bucket.ready = 0;
    bucket.submitted = false;
  }
  local_samples_ = 0;
  count_given_ = false;
  count_submitted_ = false;
  if (!first_error.ok()) {
    for (auto& bucket : buckets_) bucket.handle = Handle();
    count_handle_ = Handle();
    throw Error(first_error);
  }

  double scale = 1.0;
  if (!distributed) {
    scale = 1.0 / options_.backward_passes_per_step;
  } else if (weighted) {
    // The gradients hold sum_r weight_r * g_r / passes; divide by the total weight. A step in
    // which no rank had a sample leaves the (zero) gradients as they are.
    scale = global_samples > 0 ? 1.0 / static_cast<double>(global_samples) : 1.0;
  }
  for (auto& param : params_)
    if (param.tensor.grad().defined()) finish_gradient(param, scale);
  for (auto& bucket : buckets_) bucket.handle = Handle();
  count_handle_ = Handle();
  inner_.step();
  ++stats_.steps;
  if (is_initialized()) {
    (void)mark_step();
    follow_tuned_bucket_size();
  }
}

// ---- Elastic training: a new world (see the header) -------------------------------------------

void DistributedOptimizer::clear_step() {
  for (auto& param : params_) param.passes_ready = 0;
  for (auto& bucket : buckets_) {
    bucket.ready = 0;
    bucket.submitted = false;
    bucket.handle = Handle();
  }
  local_samples_ = 0;
  count_given_ = false;
  count_submitted_ = false;
  count_handle_ = Handle();
  first_submit_.reset();
}

void DistributedOptimizer::reset_for_new_world() {
  if (no_sync_depth_ > 0) {
    throw Error(Status::PreconditionFailed(
        "DistributedOptimizer::reset_for_new_world() inside no_sync(): reset between steps, "
        "from elastic::State::on_reset"));
  }
  if (!options_.process_set.is_global()) {
    throw Error(Status::Unsupported(
        "DistributedOptimizer::reset_for_new_world(): the optimizer averages over " +
        options_.process_set.to_string() +
        ", whose members belonged to the old world; an elastic job trains over the global "
        "process set"));
  }
  // The old world's operations completed when shutdown() ended it; waiting is for the rare one
  // still running, which borrows a gradient buffer. Their failures are the lost world's.
  for (auto& bucket : buckets_)
    if (bucket.handle.valid()) (void)bucket.handle.wait();
  if (count_handle_.valid()) (void)count_handle_.wait();
  clear_step();
  inner_.zero_grad();
  bucket_bytes_ = tuned_bucket_bytes().value_or(options_.bucket_bytes);
  build_buckets();
}

// ---- end of elastic training -------------------------------------------------------------------

std::vector<Handle> DistributedOptimizer::submitted_handles() const {
  std::vector<Handle> handles;
  for (const auto& bucket : buckets_)
    if (bucket.handle.valid()) handles.push_back(bucket.handle);
  return handles;
}

std::vector<std::string> DistributedOptimizer::bucket_names() const {
  std::vector<std::string> names;
  for (const auto& bucket : buckets_) names.push_back(bucket.name);
  return names;
}

}  // namespace kolo::fw

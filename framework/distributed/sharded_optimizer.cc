#include "framework/distributed/sharded_optimizer.h"

#include <cmath>
#include <map>
#include <set>

#include "framework/distributed/settings_agreement.h"
#include "framework/distributed/sharded_internal.h"
#include "framework/distributed/tensor_view.h"
#ifdef KOLO_HAVE_CUDA
#include "framework/kernels/cuda_allocator.h"
#endif
#include "framework/memory_stats.h"
#include "framework/optim/update_kernels.h"
#include "kolo/kolo.h"

namespace kolo::fw {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(Status::InvalidArgument("ShardedOptimizer: " + message));
}

int64_t bytes_of(const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

void check_options(const ShardedOptions& o) {
  const DistributedOptions& d = o.distributed;
  if (d.backward_passes_per_step < 1)
    fail("backward_passes_per_step must be >= 1, got " +
         std::to_string(d.backward_passes_per_step));
  if (d.bucket_bytes < 0) fail("bucket_bytes must be >= 0, got " + std::to_string(d.bucket_bytes));
  if (!std::isfinite(o.max_grad_norm) || o.max_grad_norm < 0)
    fail("max_grad_norm must be finite and >= 0, got " + std::to_string(o.max_grad_norm));
  if (o.stage != ShardStage::kOptimizerState && o.stage != ShardStage::kGradients)
    fail("stage must be kOptimizerState (1) or kGradients (2)");
}

// Every parameter is float32 and on `device` (the first parameter's, named `first`): each bucket
// is one flat buffer on one device, and the update kernels are float32.
void check_parameter(const std::string& name, const Tensor& t, const std::string& first,
                     Device device) {
  if (!t.defined()) fail("parameter '" + name + "' is undefined");
  if (t.dtype() != DataType::kFloat32)
    fail("parameter '" + name + "' is " + t.to_string() + ": expected float32, got " +
         std::string(dtype_name(t.dtype())) + " (sharding updates float32 parameters only)");
  if (!t.device().is_cpu() && !t.device().is_cuda())
    fail("parameter '" + name + "' is " + t.to_string() + ": expected a CPU or CUDA device, got " +
         t.device().to_string());
  if (!first.empty() && t.device() != device)
    fail("parameter '" + name + "' is on " + t.device().to_string() + ", expected " +
         device.to_string() + " (the device of parameter '" + first +
         "'): every parameter must be on one device (each bucket is one flat buffer there)");
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(Optimizer& inner,
                                   std::vector<std::pair<std::string, Tensor>> named_params,
                                   ShardedOptions options)
    : inner_(inner), options_(std::move(options)), updater_(inner) {
  check_options(options_);
  const ProcessSet& set = options_.distributed.process_set;
  ranks_ = set.size();
  rank_ = set.rank();
  if (rank_ < 0) fail("this rank is not a member of " + set.to_string());
  // The wrapped optimizer's flattened index and group of every parameter it holds.
  std::map<const TensorImpl*, std::pair<int64_t, size_t>> held;
  int64_t flat = 0;
  for (size_t g = 0; g < inner_.param_groups().size(); ++g)
    for (const Tensor& p : inner_.param_groups()[g].params) held[p.impl().get()] = {flat++, g};
  std::set<std::string> seen;
  std::vector<int64_t> numels;
  for (auto& [name, tensor] : named_params) {
    if (name.empty()) fail("a parameter has an empty name");
    if (!seen.insert(name).second) fail("parameter name '" + name + "' appears twice");
    check_parameter(name, tensor, params_.empty() ? "" : params_.front().name, device_);
    if (params_.empty()) device_ = tensor.device();
    auto it = held.find(tensor.impl().get());
    if (it == held.end()) fail("parameter '" + name + "' is not one of the optimizer's");
    const ParamGroup& group = inner_.param_groups()[it->second.second];
    Param p;
    p.name = name;
    p.tensor = tensor;
    p.index = it->second.first;
    p.numel = tensor.numel();
    p.lr_scale = group.lr_scale;
    p.weight_decay = group.weight_decay;
    params_.push_back(std::move(p));
    numels.push_back(tensor.numel());
  }
  if (params_.size() != held.size())
    fail("the optimizer holds " + std::to_string(held.size()) + " parameters but " +
         std::to_string(params_.size()) + " are named; name every one");
  check_agreement();
  layout_ = make_shard_layout(numels, options_.distributed.bucket_bytes, ranks_);
  take_state();
  move_parameters();
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].hook_id =
        params_[i].tensor.register_grad_ready_hook([this, i](Tensor&) { on_gradient_ready(i); });
  }
  (void)memory();
}

void ShardedOptimizer::check_agreement() const {
  std::vector<int64_t> numels;
  for (const Param& p : params_) numels.push_back(p.numel);
  const bool stage1 = options_.stage == ShardStage::kOptimizerState;
  OptimizerSettings mine =
      shared_settings(stage1 ? "stage 1 (optimizer state)" : "stage 2 (gradients)", inner_.name(),
                      options_.distributed, numels);
  mine.emplace_back("max_grad_norm", std::to_string(options_.max_grad_norm));
  // Kolo needs every rank's tensors on one device kind (cpu or cuda), not on one ordinal.
  mine.emplace_back("device kind of the parameters", device_.is_cuda() ? "cuda" : "cpu");
  agree_on_settings("ShardedOptimizer", options_.distributed.process_set, mine);
}

void ShardedOptimizer::take_state() {
  std::map<std::string, Tensor*> named;
  // As allocated: the wrapped optimizer's state exists only where it already stepped (or a
  // checkpoint filled it), so the whole state is never made here, only this rank's slices.
  for (auto& [name, tensor] : inner_.state_tensors(Optimizer::StateAccess::kAsAllocated))
    named[name] = tensor;
  step_counter_ = named.at("step");
  param_counts_ = named.at("param_steps");
  const std::string prefix = options_.distributed.name_prefix + ".";
  buckets_.resize(layout_.size());
  for (size_t k = 0; k < layout_.size(); ++k) {
    const ShardBucket& b = layout_[k];
    Bucket& bucket = buckets_[k];
    bucket.name = prefix + "bucket" + std::to_string(k) + "(" + params_[b.params.front()].name +
                  ".." + params_[b.params.back()].name + ")";
    for (size_t i : b.params) params_[i].bucket = k;
    bucket.owned = owned_segments(b, rank_);
    const int64_t count = b.counts[static_cast<size_t>(rank_)];
    {
      MemoryCategoryScope memory(MemoryCategory::kGradients);
      bucket.shard_grad = Tensor::zeros({count}, device_);
    }
    for (const Segment& seg : bucket.owned) {
      std::vector<Tensor> slots;
      for (const std::string& slot : slot_names()) {
        const Tensor& full =
            *named.at("param." + std::to_string(params_[seg.param].index) + "." + slot);
        MemoryCategoryScope memory(MemoryCategory::kOptimizerState);
        Tensor slice = Tensor::zeros({seg.length}, device_);
        // A wrapped optimizer that already stepped keeps its history: this rank takes its slice.
        if (full.defined())
          slice.copy_(full.reshape({-1}).slice(seg.param_offset, seg.param_offset + seg.length));
        slots.push_back(std::move(slice));
      }
      bucket.state.push_back(std::move(slots));
    }
  }
  // Only now, with every slice copied: the whole-parameter state is what sharding saves.
  inner_.release_state();
}

// Note [Flat parameters]. Each bucket's parameters are moved into one flat buffer in bucket
// order (as llm.c keeps its parameters): the Tensor handles that the model and the wrapped
// optimizer hold are the same objects, now with storage in the buffer, so the shard a rank
// updates is one contiguous range of it and the allgather writes every rank's shard straight
// into the parameters, with no copy out of a receive buffer. The cost: views or raw pointers of
// a parameter taken before the constructor no longer alias it (sharded_optimizer.h says so).
void ShardedOptimizer::move_parameters() {
  for (size_t k = 0; k < layout_.size(); ++k) {
    const ShardBucket& b = layout_[k];
    Bucket& bucket = buckets_[k];
    {
      MemoryCategoryScope memory(MemoryCategory::kParameters);
      bucket.params = Tensor::empty({b.numel}, device_);
    }
    for (size_t j = 0; j < b.params.size(); ++j) {
      const Param& p = params_[b.params[j]];
      const int64_t start = b.param_starts[j];
      bucket.params.slice(start, start + p.numel).copy_(p.tensor);
      TensorImpl& impl = *p.tensor.impl();
      impl.storage = bucket.params.impl()->storage;
      impl.offset = bucket.params.impl()->offset + b.param_starts[j];
    }
  }
}

ShardedOptimizer::~ShardedOptimizer() {
  for (auto& param : params_) param.tensor.remove_grad_ready_hook(param.hook_id);
  // Kolo borrows the buffers until the handles complete.
  for (auto& bucket : buckets_) {
    if (bucket.reduce.valid()) (void)bucket.reduce.wait();
    if (bucket.gather.valid()) (void)bucket.gather.wait();
  }
  if (count_handle_.valid()) (void)count_handle_.wait();
}

void ShardedOptimizer::set_local_batch_size(int64_t n) {
  if (n < 0) fail("local batch size must be >= 0, got " + std::to_string(n));
  local_samples_ += n;
  count_given_ = true;
}

void ShardedOptimizer::zero_grad() {
  for (size_t k = 0; k < buckets_.size(); ++k) attach_gradient_views(buckets_[k], layout_[k]);
}

// Note [Gradient views]. Each parameter's .grad() is made a view of its place in the bucket's
// flat buffer, so that backward accumulates (autograd adds into a defined gradient in place)
// straight into what the reduce-scatter sends: no copy per step, and no second buffer of the
// model's size. A gradient that is not such a view (zero_grad() was not called, or a user set
// one) is copied in at submission instead (pack_gradients).
void ShardedOptimizer::attach_gradient_views(Bucket& bucket, const ShardBucket& b) {
  if (bucket.flat.defined()) {
    bucket.flat.zero_();
  } else {
    MemoryCategoryScope memory(MemoryCategory::kGradients);
    bucket.flat = Tensor::zeros({b.numel}, device_);
  }
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Param& p = params_[b.params[j]];
    const int64_t start = b.param_starts[j];
    p.tensor.set_grad(bucket.flat.slice(start, start + p.numel).reshape(p.tensor.shape()));
  }
}

ShardedNoSyncScope::~ShardedNoSyncScope() {
  if (owner_) --owner_->no_sync_depth_;
}

ShardedNoSyncScope ShardedOptimizer::no_sync() {
  ++no_sync_depth_;
  return ShardedNoSyncScope(this);
}

bool ShardedOptimizer::weighted() const {
  return ranks_ > 1 && options_.distributed.weight_by_sample_count;
}

void ShardedOptimizer::on_gradient_ready(size_t index) {
  if (no_sync_depth_ > 0) return;  // accumulates locally (DistributedOptimizer's no_sync)
  Param& param = params_[index];
  if (++param.passes_ready != options_.distributed.backward_passes_per_step) return;
  if (weighted()) submit_sample_count();
  Bucket& bucket = buckets_[param.bucket];
  if (++bucket.ready == layout_[param.bucket].params.size()) {
    submit(bucket);
    stats_.submitted_from_hooks += static_cast<int64_t>(bucket.ready);
  }
}

void ShardedOptimizer::submit_sample_count() {
  if (count_submitted_) return;
  count_submitted_ = true;
  global_samples_ = count_given_ ? local_samples_ : 1;
  count_handle_ = allreduce_async(options_.distributed.name_prefix + ".__samples__",
                                  view_of(&global_samples_, {}),
                                  {.process_set = options_.distributed.process_set});
}

void ShardedOptimizer::pack_gradients(Bucket& bucket, const ShardBucket& b) {
  if (!bucket.flat.defined()) {
    MemoryCategoryScope memory(MemoryCategory::kCommunication);  // no .grad() views it
    bucket.flat = Tensor::empty({b.numel}, device_);
  }
  for (size_t k = 0; k < b.params.size(); ++k) {
    Param& p = params_[b.params[k]];
    const int64_t start = b.param_starts[k];
    Tensor dst = bucket.flat.slice(start, start + p.numel);
    const Tensor grad = p.tensor.grad();
    // A view of this very place (Note [Gradient views]) is already there.
    if (!grad.defined())
      dst.zero_();  // unused on this rank in every pass: zeros (other ranks may have used it)
    else if (grad.raw_data() != dst.raw_data())
      dst.copy_(grad);
    // Stage 2: the flat buffer now holds what this rank contributes; the gradient is not
    // needed again until the next step's backward allocates a new one.
    if (options_.stage == ShardStage::kGradients) p.tensor.set_grad(Tensor());
  }
  // This rank's weight, in one pass over the bucket (one kernel on a device).
  const float w = weighted() && count_given_ ? static_cast<float>(local_samples_) : 1.0f;
  if (w != 1.0f) bucket.flat.mul_(w);
  // What no .grad() views any more is in flight only (stage 2, or a gradient copied in).
  if (options_.stage == ShardStage::kGradients)
    bucket.flat.set_memory_category(MemoryCategory::kCommunication);
}

TensorView ShardedOptimizer::ready_view(const Tensor& t, std::shared_ptr<void>& event) const {
  TensorView view = view_of_tensor(t);
#ifdef KOLO_HAVE_CUDA
  // Written on the legacy default stream just now (as DistributedOptimizer::prepare_gradient).
  if (view.device.is_cuda()) {
    event = cuda_alloc::record_event(view.device.index);
    view.ready_event = event.get();
  }
#else
  (void)event;
#endif
  return view;
}

void ShardedOptimizer::submit(Bucket& bucket) {
  if (bucket.submitted) return;
  bucket.submitted = true;
  const ShardBucket& b = layout_[static_cast<size_t>(&bucket - buckets_.data())];
  pack_gradients(bucket, b);
  sample_memory();  // the flat buffers are fullest now (stage 2's gradients were just freed)
  if (ranks_ == 1) {
    bucket.shard_grad.copy_(bucket.flat);
    return;
  }
  if (!first_submit_) first_submit_ = std::chrono::steady_clock::now();
  ReducescatterOptions opts;
  // As in DistributedOptimizer::submit: this rank's weight is applied above, so every rank
  // passes the same reduction.
  opts.reduction.op = weighted() ? ReduceOp::kSum : ReduceOp::kAverage;
  opts.reduction.prescale = 1.0 / options_.distributed.backward_passes_per_step;
  opts.recv_counts = b.counts;
  opts.process_set = options_.distributed.process_set;
  const Tensor* input = &bucket.flat;
  void* out = bucket.shard_grad.raw_data();
  if (options_.distributed.compression != Compression::kNone) {
    // The bucket travels as 16-bit values (as DistributedOptimizer's gradients do); the shard
    // is widened back into shard_grad once reduced (finish_reduction).
    const DataType wire = options_.distributed.compression == Compression::kFloat16
                              ? DataType::kFloat16
                              : DataType::kBFloat16;
    MemoryCategoryScope memory(MemoryCategory::kCommunication);
    bucket.wire = Tensor::empty({b.numel}, device_, wire);
    bucket.wire.copy_(bucket.flat);  // a device kernel for CUDA tensors
    if (!bucket.wire_shard.defined())
      bucket.wire_shard = Tensor::empty({bucket.shard_grad.numel()}, device_, wire);
    input = &bucket.wire;
    out = bucket.wire_shard.raw_data();
  }
  // For CUDA buffers `out` is device memory on the input's device, as Kolo requires.
  opts.allocator = [out](const std::vector<int64_t>&, DataType) { return out; };
  bucket.reduce =
      reducescatter_async(bucket.name, ready_view(*input, bucket.reduce_ready), std::move(opts));
  if (weighted()) submit_sample_count();  // when no hook fired
}

std::vector<StateSlice> ShardedOptimizer::state_slices() const {
  std::vector<StateSlice> out;
  for (const Bucket& b : buckets_) {
    for (size_t s = 0; s < b.owned.size(); ++s) {
      const Segment& seg = b.owned[s];
      out.push_back({params_[seg.param].index, seg.param_offset, seg.length, b.state[s]});
    }
  }
  return out;
}

void ShardedOptimizer::sample_memory() {
  MemoryBytes now;
  std::vector<bool> flat_holds_gradients(buckets_.size(), false);
  for (const Param& p : params_) {
    now.parameters += bytes_of(p.tensor);
    const Tensor grad = p.tensor.grad();
    // A view of the flat buffer (Note [Gradient views]) is counted once, with the buffer.
    if (grad.defined() && grad.shares_storage(buckets_[p.bucket].flat))
      flat_holds_gradients[p.bucket] = true;
    else
      now.gradients += bytes_of(grad);
  }
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    now.gradients += bytes_of(b.shard_grad);
    for (const auto& slots : b.state)
      for (const Tensor& t : slots) now.optimizer_state += bytes_of(t);
    (flat_holds_gradients[k] ? now.gradients : now.communication) += bytes_of(b.flat);
    now.communication += bytes_of(b.wire) + bytes_of(b.wire_shard);
  }
  memory_.current = now;
  MemoryBytes& peak = memory_.peak;
  peak.parameters = std::max(peak.parameters, now.parameters);
  peak.gradients = std::max(peak.gradients, now.gradients);
  peak.optimizer_state = std::max(peak.optimizer_state, now.optimizer_state);
  peak.communication = std::max(peak.communication, now.communication);
}

ShardMemory ShardedOptimizer::memory() {
  sample_memory();
  return memory_;
}

}  // namespace kolo::fw

// ShardedOptimizer's step: waiting for the reduce-scatters, the norms that span shards, the
// shard updates and the allgathers (the rest is in sharded_optimizer.cc).
#include <chrono>

#include "framework/distributed/sharded_internal.h"
#include "framework/distributed/sharded_optimizer.h"
#include "framework/distributed/tensor_view.h"
#include "framework/optim/update_kernels.h"
#include "kolo/kolo.h"

namespace kolo::fw {

Status ShardedOptimizer::wait_reductions() {
  Status first_error;
  for (auto& bucket : buckets_) {
    if (!bucket.reduce.valid()) continue;
    Status status = bucket.reduce.wait();
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  if (count_handle_.valid()) {
    Status status = count_handle_.wait();
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

double ShardedOptimizer::gradient_scale() const {
  if (ranks_ == 1) return 1.0 / options_.distributed.backward_passes_per_step;
  if (!weighted()) return 1.0;  // the reduce-scatter averaged
  // As DistributedOptimizer: a step in which no rank had a sample leaves the zeros as they are.
  return global_samples_ > 0 ? 1.0 / static_cast<double>(global_samples_) : 1.0;
}

namespace {

// Sums over the ranks of the set, in float64 (a few values: the norms' partial sums).
void sum_over_set(const std::string& name, std::vector<double>& values, const ProcessSet& set) {
  if (set.size() == 1 || values.empty()) return;
  Status status = allreduce(name, view_of(values.data(), {static_cast<int64_t>(values.size())}),
                            {.process_set = set});
  if (!status.ok()) throw Error(status);
}

// The sum of squares of a float32 slice, as a float64 partial sum. On a CUDA device the
// framework's own reduction (Tensor::sq_norm: accumulated in double on the device, returned as
// a float, as the unsharded LARS reads its norms); on the CPU the double loop of update_kernels.h.
double sum_of_squares(const Tensor& t) {
  if (t.device().is_cpu()) return kernels::sum_squares(sharded_detail::f32(t), t.numel());
  return t.numel() > 0 ? static_cast<double>(t.sq_norm()) : 0.0;
}

}  // namespace

void ShardedOptimizer::clip_and_measure(std::vector<LayerNorms>& norms) {
  const std::string& prefix = options_.distributed.name_prefix;
  const ProcessSet& set = options_.distributed.process_set;
  if (options_.max_grad_norm > 0) {
    std::vector<double> total = {0.0};
    for (const Bucket& b : buckets_) total[0] += sum_of_squares(b.shard_grad);
    sum_over_set(prefix + ".__grad_norm__", total, set);
    const double coef = clip_coefficient(total[0], options_.max_grad_norm);
    if (coef < 1.0)
      for (Bucket& b : buckets_) b.shard_grad.mul_(static_cast<float>(coef));
  }
  if (!updater_.needs_layer_norms()) return;
  std::vector<double> sums(2 * params_.size(), 0.0);
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    const int64_t lo = layout_[k].offsets[static_cast<size_t>(rank_)];
    for (const Segment& seg : b.owned) {
      const int64_t at = seg.bucket_offset - lo;  // in the shard
      sums[2 * seg.param] +=
          sum_of_squares(b.params.slice(seg.bucket_offset, seg.bucket_offset + seg.length));
      sums[2 * seg.param + 1] += sum_of_squares(b.shard_grad.slice(at, at + seg.length));
    }
  }
  sum_over_set(prefix + ".__layer_norms__", sums, set);
  for (size_t i = 0; i < params_.size(); ++i) norms[i] = {sums[2 * i], sums[2 * i + 1]};
}

void ShardedOptimizer::update_bucket(Bucket& bucket, const std::vector<LayerNorms>& norms) {
  const size_t k = static_cast<size_t>(&bucket - buckets_.data());
  const int64_t lo = layout_[k].offsets[static_cast<size_t>(rank_)];
  const int64_t* counts = param_counts_->data<int64_t>();
  const double default_wd = updater_.default_weight_decay();
  for (size_t s = 0; s < bucket.owned.size(); ++s) {
    const Segment& seg = bucket.owned[s];
    const Param& p = params_[seg.param];
    // Views of this segment in the flat parameters and the shard (on the parameters' device).
    Tensor param = bucket.params.slice(seg.bucket_offset, seg.bucket_offset + seg.length);
    const int64_t at = seg.bucket_offset - lo;
    const Tensor grad = bucket.shard_grad.slice(at, at + seg.length);
    updater_.update(param, grad, bucket.state[s], p.tensor.dim(), inner_.lr() * p.lr_scale,
                    p.weight_decay.value_or(default_wd), counts[p.index] + 1, norms[seg.param]);
  }
}

void ShardedOptimizer::gather_bucket(Bucket& bucket) {
  if (ranks_ == 1) return;  // updated in place: nothing to exchange
  const size_t k = static_cast<size_t>(&bucket - buckets_.data());
  const int64_t lo = layout_[k].offsets[static_cast<size_t>(rank_)];
  // In place: the input is this rank's own slot of the output, which Kolo's backends allow
  // (backends copy a rank's block only when it is elsewhere; MPI's runs as MPI_IN_PLACE).
  // For CUDA parameters both are device memory, and the view's ready event orders the gather
  // after the update kernels.
  const int64_t count = layout_[k].counts[static_cast<size_t>(rank_)];
  void* out = bucket.params.raw_data();
  bucket.gather = allgather_async(
      bucket.name + ".params", ready_view(bucket.params.slice(lo, lo + count), bucket.gather_ready),
      {.allocator = [out](const std::vector<int64_t>&, DataType) { return out; },
       .process_set = options_.distributed.process_set});
}

Status ShardedOptimizer::finish_gathers() {
  Status first_error;
  for (Bucket& bucket : buckets_) {
    if (!bucket.gather.valid()) continue;
    Status status = bucket.gather.wait();
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

void ShardedOptimizer::reset_step() {
  for (auto& param : params_) param.passes_ready = 0;
  for (auto& bucket : buckets_) {
    bucket.ready = 0;
    bucket.submitted = false;
    bucket.reduce = Handle();
    bucket.gather = Handle();
    bucket.reduce_ready.reset();  // the handles completed: Kolo no longer reads the events
    bucket.gather_ready.reset();
  }
  count_handle_ = Handle();
  local_samples_ = 0;
  count_given_ = false;
  count_submitted_ = false;
}

// Waits for bucket `k`'s reduce-scatter (and, first, the sample count), then scales its shard
// by 1 / the global count; stage 2 frees the bucket's flat gradient buffer, which only fed the
// reduce-scatter. A failure is returned, the shard left as it is.
Status ShardedOptimizer::finish_reduction(Bucket& bucket) {
  if (count_handle_.valid()) {
    Status status = count_handle_.wait();
    if (!status.ok()) return status;
  }
  if (bucket.reduce.valid()) {
    Status status = bucket.reduce.wait();
    if (!status.ok()) return status;
  }
  if (options_.stage == ShardStage::kGradients) bucket.flat = Tensor();
  if (bucket.wire.defined()) {
    bucket.shard_grad.copy_(bucket.wire_shard);
    bucket.wire = Tensor();  // per step: its model-sized memory only while it travels
  }
  const double scale = gradient_scale();
  if (scale != 1.0) bucket.shard_grad.mul_(static_cast<float>(scale));
  return Status::Ok();
}

// Note [Step pipeline]. Without norms that span buckets (no clipping, not LARS), bucket k is
// updated and its allgather submitted as soon as its own reduce-scatter completes, while the
// later buckets' reduce-scatters (the last submitted at the end of backward) still run. With
// clipping or LARS every shard must be reduced before the one allreduce of partial sums, so
// all reductions are waited for first. Either way, when a reduce-scatter fails no bucket from
// it on is updated: the parameters are unchanged when it is the first bucket's (it is the one
// that backward's last layers submit first), else the step is partial on every rank that
// received the same failure (the message says which buckets were updated).
ShardedOptimizer::Progress ShardedOptimizer::update_and_gather() {
  std::vector<LayerNorms> norms(params_.size());
  const bool spanning = options_.max_grad_norm > 0 || updater_.needs_layer_norms();
  if (spanning) {
    for (Bucket& bucket : buckets_)
      if (Status status = finish_reduction(bucket); !status.ok()) return {status, 0};
    clip_and_measure(norms);
  }
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& bucket = buckets_[k];
    if (!spanning) {
      Status status = finish_reduction(bucket);
      if (!status.ok() && k == 0) return {status, 0};
      if (!status.ok())
        return {Status(status.code(),
                       "ShardedOptimizer: buckets 0.." + std::to_string(k - 1) +
                           " of this step were updated, the others not: " + status.message()),
                k};
    }
    update_bucket(bucket, norms);
    gather_bucket(bucket);
  }
  return {Status::Ok(), buckets_.size()};
}

void ShardedOptimizer::step() {
  if (no_sync_depth_ > 0)
    throw Error(Status::PreconditionFailed(
        "ShardedOptimizer::step() inside no_sync(): end the scope and run one more backward "
        "pass, whose gradients (summed with those accumulated in the scope) are reduced"));
  for (auto& bucket : buckets_) {
    if (bucket.submitted) continue;
    submit(bucket);
    stats_.submitted_at_step +=
        static_cast<int64_t>(layout_[&bucket - buckets_.data()].params.size());
  }
  const auto wait_start = std::chrono::steady_clock::now();
  const Progress progress = update_and_gather();
  // Every handle completes before the buffers it borrows are reused or freed.
  Status gathered = finish_gathers();  // the parameters are in place (Note [Flat parameters])
  (void)wait_reductions();
  if (first_submit_) {
    const auto done = std::chrono::steady_clock::now();
    stats_.communication_window_seconds +=
        std::chrono::duration<double>(done - *first_submit_).count();
    stats_.exposed_wait_seconds += std::chrono::duration<double>(done - wait_start).count();
    first_submit_.reset();
  }
  // Counted as the parameters were updated: a partial step (Note [Step pipeline]) advances the
  // updated buckets' parameters only.
  int64_t* counts = param_counts_->data<int64_t>();
  for (size_t k = 0; k < progress.updated_buckets; ++k)
    for (size_t i : layout_[k].params) ++counts[params_[i].index];
  if (progress.updated_buckets > 0) {
    ++step_counter_->data<int64_t>()[0];
    ++stats_.steps;
  }
  reset_step();
  if (options_.stage == ShardStage::kGradients)
    for (Bucket& b : buckets_) b.flat = Tensor();
  sample_memory();
  if (!progress.status.ok()) throw Error(progress.status);
  if (!gathered.ok())
    throw Error(Status(gathered.code(),
                       "ShardedOptimizer: gathering the updated parameters failed, "
                       "so the replicas may now differ (restore a checkpoint): " +
                           gathered.message()));
  if (is_initialized()) (void)mark_step();
}

}  // namespace kolo::fw

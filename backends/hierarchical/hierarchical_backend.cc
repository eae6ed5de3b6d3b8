#include "backends/hierarchical/hierarchical_backend.h"

#include <cstddef>
#include <cstring>

#include "backends/hierarchical/hierarchy.h"
#include "common/logging.h"
#include "ops/reduce.h"

namespace kolo {

namespace {

// The context of a sub-group `ranks` (ascending world ranks, this rank at index `rank`) of the
// job: the group's rank and size, the job's store, secret and timeouts, and its own prefix.
// `same_host` says whether the group's ranks share a host (tcp then publishes a local address).
BackendContext subgroup_context(const BackendContext& job, const std::vector<int>& ranks, int rank,
                                bool same_host, std::string store_prefix) {
  BackendContext ctx = job;
  ctx.rank = rank;
  ctx.size = static_cast<int>(ranks.size());
  ctx.local_rank = same_host ? rank : 0;
  ctx.local_size = same_host ? ctx.size : 1;
  ctx.cross_rank = same_host ? 0 : rank;
  ctx.cross_size = same_host ? 1 : ctx.size;
  ctx.store_prefix = std::move(store_prefix);
  return ctx;
}

// "hierarchical <op>, <stage>, whose ranks 0, 1 are ranks 2, 3".
std::string stage_context(const std::string& op, const std::string& stage,
                          const std::vector<int>& ranks) {
  // Appended piece by piece: GCC 12's -Wrestrict misfires on a chain of operator+ here.
  std::string group, job;
  for (size_t i = 0; i < ranks.size(); ++i) {
    group.append(i == 0 ? "" : ", ").append(std::to_string(i));
    job.append(i == 0 ? "" : ", ").append(std::to_string(ranks[i]));
  }
  std::string out = "hierarchical ";
  out.append(op).append(", ").append(stage).append(", whose ranks ").append(group);
  return out.append(" are ranks ").append(job);
}

}  // namespace

HierarchicalBackend::HierarchicalBackend(const Hierarchy& plan, std::unique_ptr<Backend> flat,
                                         std::unique_ptr<Backend> intra,
                                         std::unique_ptr<Backend> cross)
    : plan_(plan),
      flat_(std::move(flat)),
      intra_(std::move(intra)),
      cross_(std::move(cross)),
      reducescatter_context_(
          stage_context("allreduce", "reduce-scatter within the host", plan.intra_ranks)),
      allreduce_context_(stage_context("allreduce", "allreduce across hosts", plan.cross_ranks)),
      allgather_context_(stage_context("allreduce", "allgather within the host", plan.intra_ranks)),
      gather_host_context_(
          stage_context("allgather", "the host's blocks within the host", plan.intra_ranks)),
      gather_cross_context_(
          stage_context("allgather", "the hosts' shards across hosts", plan.cross_ranks)),
      gather_shards_context_(
          stage_context("allgather", "every shard within the host", plan.intra_ranks)) {}

Status HierarchicalBackend::do_allreduce(const void* input, void* output, int64_t count,
                                         DataType dtype, const Reduction& reduction) {
  if (!hierarchical_ || count == 0) return flat_->allreduce(input, output, count, dtype, reduction);
  // Shard i (of the host's L ranks) is count / L elements, one more for the first count % L,
  // so that no rank's cross-host share exceeds another's by more than one element.
  const int hosts_ranks = intra_->size(), me = intra_->rank();
  shard_counts_.assign(hosts_ranks, count / hosts_ranks);
  for (int i = 0; i < count % hosts_ranks; ++i) ++shard_counts_[i];
  int64_t offset = 0;
  for (int i = 0; i < me; ++i) offset += shard_counts_[i];
  const int64_t mine = shard_counts_[me];
  const size_t es = dtype_size(dtype);
  // Out of place, the shard is reduced where it ends up, this rank's slot of the output (the
  // intra allgather takes its input there). In place, that slot is still input to the
  // reduce-scatter, so the shard goes through scratch.
  std::byte* shard = static_cast<std::byte*>(output) + offset * es;
  if (input == output) {
    if (scratch_.size() < static_cast<size_t>(mine) * es) scratch_.resize(mine * es);
    shard = scratch_.data();
  }
  // Both stages combine with the op only: the prescale happens once (the reduce-scatter
  // applies it to each rank's input), and kAverage's division (by the whole job) and the
  // postscale once, to the shard below.
  const ReduceOp combine = reduction.op == ReduceOp::kAverage ? ReduceOp::kSum : reduction.op;
  KOLO_RETURN_IF_ERROR(intra_
                           ->reducescatter(input, shard, dtype,
                                           Reduction{combine, reduction.prescale, 1.0},
                                           shard_counts_)
                           .with_context(reducescatter_context_));
  KOLO_RETURN_IF_ERROR(cross_->allreduce(shard, shard, mine, dtype, Reduction{combine, 1.0, 1.0})
                           .with_context(allreduce_context_));
  ops::finish_reduction(dtype, Reduction{reduction.op, 1.0, reduction.postscale}, shard, mine,
                        size());
  return intra_->allgather(shard, output, dtype, shard_counts_).with_context(allgather_context_);
}

Status HierarchicalBackend::do_allgather(const void* input, void* output, DataType dtype,
                                         const std::vector<int64_t>& counts) {
  if (!hierarchical_allgather_) return flat_->allgather(input, output, dtype, counts);
  if (counts != allgather_counts_) {
    allgather_plan_ = plan_allgather(plan_, rank(), counts);
    allgather_counts_ = counts;
  }
  const AllgatherPlan& p = allgather_plan_;
  if (!allgather_used_) {  // once: the log says the switch took effect (a test reads it)
    allgather_used_ = true;
    KOLO_LOG_INFO("hierarchical allgather: in use, first call of " << p.total << " elements");
  }
  if (p.total == 0) return Status::Ok();
  const size_t es = dtype_size(dtype);
  auto fit = [es](std::vector<std::byte>& buffer, int64_t elements) {
    if (buffer.size() < static_cast<size_t>(elements) * es) buffer.resize(elements * es);
    return buffer.data();
  };
  // The output is written only by the unpack below, after `input` (which may lie in it) has
  // been read by the first stage.
  std::byte* host_block = fit(host_block_, p.host_total);
  std::byte* shards = fit(shards_, p.cross_total);
  std::byte* gathered = fit(gathered_, p.total);
  KOLO_RETURN_IF_ERROR(intra_->allgather(input, host_block, dtype, p.host_counts)
                           .with_context(gather_host_context_));
  KOLO_RETURN_IF_ERROR(
      cross_->allgather(host_block + p.shard_offset * es, shards, dtype, p.cross_counts)
          .with_context(gather_cross_context_));
  KOLO_RETURN_IF_ERROR(intra_->allgather(shards, gathered, dtype, p.gather_counts)
                           .with_context(gather_shards_context_));
  auto* out = static_cast<std::byte*>(output);
  for (const AllgatherPlan::Run& run : p.unpack)
    std::memcpy(out + run.to * es, gathered + run.from * es, static_cast<size_t>(run.count) * es);
  return Status::Ok();
}

Status HierarchicalBackend::do_broadcast(void* data, int64_t count, DataType dtype, int root) {
  return flat_->broadcast(data, count, dtype, root);
}

Status HierarchicalBackend::do_alltoall(const void* input, void* output, DataType dtype,
                                        const std::vector<int64_t>& send_counts,
                                        const std::vector<int64_t>& recv_counts) {
  return flat_->alltoall(input, output, dtype, send_counts, recv_counts);
}

Status HierarchicalBackend::do_reducescatter(const void* input, void* output, DataType dtype,
                                             const Reduction& reduction,
                                             const std::vector<int64_t>& counts) {
  return flat_->reducescatter(input, output, dtype, reduction, counts);
}

Status HierarchicalBackend::do_barrier() { return flat_->barrier(); }

HierarchicalOptions hierarchical_options(const LaunchedWorld& launched,
                                         const std::string& cpu_operations, bool cpu_operations_set,
                                         bool allreduce, bool allgather) {
  World host;  // this host alone (default_cpu_backend reads the shape only)
  host.size = host.local_size = launched.world.local_size;
  const bool chosen =
      cpu_operations_set || launched.default_backend != default_cpu_backend(launched.world);
  return HierarchicalOptions{.intra = chosen ? cpu_operations : default_cpu_backend(host),
                             .cross = cpu_operations,
                             .allreduce = allreduce,
                             .allgather = allgather};
}

Result<std::unique_ptr<Backend>> make_hierarchical_backend(std::unique_ptr<Backend> flat,
                                                           const BackendContext& job,
                                                           const HierarchicalOptions& options) {
  if (flat->size() == 1) return flat;
  // "hierarchical allreduce" (or allgather): what the log lines call the knob's request.
  const std::string_view label =
      options.allgather && !options.allreduce ? "hierarchical allgather" : "hierarchical allreduce";
  const std::string knob(options.knob());
  // Every rank's host, gathered on the flat backend, so that every rank plans the same grid
  // (and reaches the same verdict on unequal hosts) whatever order the launcher numbered
  // ranks in.
  std::vector<int32_t> host_of32(flat->size());
  const int32_t my_host = job.cross_rank;
  KOLO_RETURN_IF_ERROR(flat->allgather(&my_host, host_of32.data(), DataType::kInt32,
                                       std::vector<int64_t>(flat->size(), 1))
                           .with_context(knob + ": gathering every rank's host"));
  const std::vector<int> host_of(host_of32.begin(), host_of32.end());
  Result<Hierarchy> plan = plan_hierarchy(host_of, flat->rank());
  if (!plan.ok()) {
    if (options.required()) return plan.status().with_context(knob + "=1");
    KOLO_LOG_INFO(label << " not used: " << plan.status().message());
    return flat;
  }
  if (plan->trivial()) {
    const char* why = plan->cross_ranks.size() == 1 ? "one host" : "one rank per host";
    if (options.required())
      KOLO_LOG_INFO(label << ": " << why << ", so the flat " << flat->name()
                          << " backend is the hierarchy");
    else
      KOLO_LOG_INFO(label << " not used: " << why);
    return flat;
  }
  const std::string host = std::to_string(job.cross_rank);
  KOLO_ASSIGN_OR_RETURN(
      std::unique_ptr<Backend> intra,
      create_subgroup_backend(
          options.intra,
          subgroup_context(job, plan->intra_ranks, plan->intra_rank, /*same_host=*/true,
                           job.store_prefix + "/hier/host" + host),
          plan->intra_ranks));
  KOLO_ASSIGN_OR_RETURN(
      std::unique_ptr<Backend> cross,
      create_subgroup_backend(
          options.cross,
          subgroup_context(job, plan->cross_ranks, plan->cross_rank, /*same_host=*/false,
                           job.store_prefix + "/hier/position" + std::to_string(plan->intra_rank)),
          plan->cross_ranks));
  KOLO_LOG_INFO(label << ": " << plan->cross_ranks.size() << " hosts of "
                      << plan->intra_ranks.size() << " ranks, " << options.intra
                      << " within a host, " << options.cross << " across");
  auto composite = std::make_unique<HierarchicalBackend>(*plan, std::move(flat), std::move(intra),
                                                         std::move(cross));
  composite->set_hierarchical(options.allreduce);
  composite->set_hierarchical_allgather(options.allgather);
  return std::unique_ptr<Backend>(std::move(composite));
}

}  // namespace kolo

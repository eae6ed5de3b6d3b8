// The hierarchical allreduce for jobs of several hosts (KOLO_HIERARCHICAL_ALLREDUCE; Note
// [Hierarchical allreduce] in docs/architecture.md): a composite Backend over three groups of
// the job's ranks,
//   flat   the job's CPU backend over every rank (tcp, or mpi under mpirun),
//   intra  the ranks of this rank's host (shm by default),
//   cross  the ranks at this rank's position on every host (the job's CPU backend),
// that runs an allreduce as a reduce-scatter within the host (an even split of the elements
// over the host's ranks, the first count % L shards one element longer), an allreduce of this
// rank's shard across hosts and an allgather within the host. With set_hierarchical_allgather
// (KOLO_HIERARCHICAL_ALLGATHER), an allgather runs as an allgather within the host, one of
// each host's block's shards across hosts and another within the host, then a copy into rank
// order (plan_allgather in hierarchy.h). Every other collective is the flat backend's.
//
// Reduction semantics are the flat path's exactly (kolo::Reduction, docs/architecture.md
// section 4): the prescale is applied once, to each rank's input, by the intra reduce-scatter;
// both stages then combine with the op (kAverage as a sum); the average's division by the
// job's size and the postscale are applied once, to the shard, by ops::finish_reduction. So
// integers stay exact, and an average of values whose sum divides evenly is exact.
//
// Errors: a stage's error, prefixed with the collective, the stage and its group's ranks in
// the job, since the sub-backend's message names ranks of the group ("hierarchical allreduce,
// reduce-scatter within the host, whose ranks 0, 1 are ranks 2, 3: ..."). A failed stage fails this
// rank at once; the ranks of other hosts waiting on it fail with their backend's errors (a dead
// peer, or the op timeout). Thread-safety: one thread at a time, as every Backend.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/hierarchical/hierarchy.h"
#include "backends/registry.h"
#include "kolo/status.h"

namespace kolo {

struct HierarchicalOptions {
  std::string intra;  // the backend within a host, e.g. "shm"
  std::string cross;  // the backend across hosts, e.g. "tcp"
  // Which collectives run hierarchically from the start (KOLO_HIERARCHICAL_ALLREDUCE=1,
  // KOLO_HIERARCHICAL_ALLGATHER=1): the composite's two switches. With either set, hosts of
  // unequal rank counts are an error naming that knob. With neither (a caller that only
  // offers the hierarchy, such as the autotuner) such a job keeps the flat backend, and the
  // composite starts with both switches off.
  bool allreduce = false;
  bool allgather = false;

  bool required() const { return allreduce || allgather; }
  // The knob named in errors ("KOLO_HIERARCHICAL_ALLGATHER" only when that alone is set).
  std::string_view knob() const {
    return allgather && !allreduce ? "KOLO_HIERARCHICAL_ALLGATHER" : "KOLO_HIERARCHICAL_ALLREDUCE";
  }
};

// The options of a job whose knobs ask for `allreduce` and/or `allgather` hierarchically (or
// neither: offered to the autotuner): across hosts the job's CPU backend `cpu_operations`;
// within a host the backend a job of that host alone would get by default (shm), unless the
// user named the CPU backend (`cpu_operations_set`) or the launcher brought its own (mpirun:
// mpi), which then serves both.
HierarchicalOptions hierarchical_options(const LaunchedWorld& launched,
                                         const std::string& cpu_operations, bool cpu_operations_set,
                                         bool allreduce, bool allgather);

// Builds the hierarchy over `flat` for the job described by `job` (rank, size and the
// launcher's cross rank of this rank; store, secret and timeouts for the sub-groups, whose
// store prefixes extend job.store_prefix). Collective over every rank of the job, which must
// pass the same options: it allgathers every rank's host on `flat` (so every rank reaches the
// same verdict), then connects the intra group and then the cross group with
// create_subgroup_backend.
// Returns `flat` itself when the hierarchy is trivial (one host: the flat backend is already
// the host's; one rank per host: the cross group is the flat group) or when hosts hold
// different numbers of ranks and !options.required(); otherwise the composite, which owns flat,
// its switches set from options.allreduce and options.allgather.
// Errors: InvalidArgument "KOLO_HIERARCHICAL_ALLREDUCE=1: hosts hold different numbers of
// ranks: host 0 has 3 (ranks 0, 1, 2), host 1 has 1 (rank 3)" (when required); the
// allgather's and the sub-groups' factories' errors.
Result<std::unique_ptr<Backend>> make_hierarchical_backend(std::unique_ptr<Backend> flat,
                                                           const BackendContext& job,
                                                           const HierarchicalOptions& options);

// The composite. Allreduces run hierarchically while hierarchical() (the state after
// make_hierarchical_backend), on the flat backend otherwise: set_hierarchical() is the switch
// of a knob the autotuner may toggle (KnobChange::kTunableAtRuntime); every rank must flip it
// between the same two collectives (the autotuner ships a decision to every rank in the same
// cycle).
class HierarchicalBackend final : public Backend {
 public:
  // Takes ownership of the three groups, which must form `plan`'s grid: intra over
  // plan.intra_ranks, cross over plan.cross_ranks, flat over the whole job.
  HierarchicalBackend(const Hierarchy& plan, std::unique_ptr<Backend> flat,
                      std::unique_ptr<Backend> intra, std::unique_ptr<Backend> cross);

  std::string_view name() const override { return "hierarchical"; }
  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }

  void set_hierarchical(bool on) { hierarchical_ = on; }
  bool hierarchical() const { return hierarchical_; }
  // Allgathers hierarchically (off after make_hierarchical_backend); the same rule as
  // set_hierarchical: every rank flips it between the same two collectives.
  void set_hierarchical_allgather(bool on) { hierarchical_allgather_ = on; }
  bool hierarchical_allgather() const { return hierarchical_allgather_; }

 protected:
  Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                      const Reduction& reduction) override;
  Status do_allgather(const void* input, void* output, DataType dtype,
                      const std::vector<int64_t>& counts) override;
  Status do_broadcast(void* data, int64_t count, DataType dtype, int root) override;
  Status do_alltoall(const void* input, void* output, DataType dtype,
                     const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& recv_counts) override;
  Status do_reducescatter(const void* input, void* output, DataType dtype,
                          const Reduction& reduction, const std::vector<int64_t>& counts) override;
  Status do_barrier() override;

 private:
  const Hierarchy plan_;
  const std::unique_ptr<Backend> flat_, intra_, cross_;
  bool hierarchical_ = true;
  bool hierarchical_allgather_ = false;
  bool allgather_used_ = false;        // the first hierarchical allgather was logged
  std::vector<int64_t> shard_counts_;  // per intra rank; reused across calls
  std::vector<std::byte> scratch_;     // an in-place allreduce's shard; grows to the largest
  // The allgather's plan for the last counts seen (training allgathers the same sizes again),
  // and its three stages' buffers, which grow to the largest.
  std::vector<int64_t> allgather_counts_;
  AllgatherPlan allgather_plan_;
  std::vector<std::byte> host_block_, shards_, gathered_;
  // Each stage's error prefix, which maps the group's ranks (what the sub-backend's message
  // names) to the job's: "hierarchical allreduce, allreduce across hosts, whose ranks 0, 1
  // are ranks 1, 3".
  std::string reducescatter_context_, allreduce_context_, allgather_context_;
  std::string gather_host_context_, gather_cross_context_, gather_shards_context_;
};

}  // namespace kolo

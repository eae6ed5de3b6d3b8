// ProcessSetTable: the process sets of one rank (kolo/process_set.h), each a Runtime of its
// own over backends that connect only the set's members (Note [Process sets] in
// docs/architecture.md). kolo::init() builds one beside the global Runtime; tests build one per
// thread-rank.
//
// Thread-safety: every method may be called from any thread. add() and remove() are
// serialised on this rank; add() is collective over the global set (it runs an allgather on
// the global Runtime), so every rank calls it in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "common/thread_annotations.h"
#include "coordinator/config.h"
#include "coordinator/runtime.h"
#include "kolo/process_set.h"

namespace kolo::coord {

// A set's data and control backends on one member, spanning the set's members (rank = set
// rank). Collective over the members: every member calls it for the same set at the same
// point. `id` is the set's id (distinct per set: namespaces connections), `ranks` the members'
// global ranks, ascending.
struct SetBackends {
  std::unique_ptr<Backend> data, control;
  std::unique_ptr<Backend> gpu;  // CUDA tensors' device backend (nccl); null: staged to data
};
using MakeSetBackends =
    std::function<Result<SetBackends>(int32_t id, const std::vector<int>& ranks, int set_rank)>;

// The verdict of add_process_set on every rank's list (lists[r] is what global rank r passed),
// identical on every rank: the members, ascending, or InvalidArgument naming the ranks whose
// lists differ, a duplicated or out-of-range rank, or an empty list.
Result<std::vector<int>> agree_on_ranks(const std::vector<std::vector<int>>& lists);

class ProcessSetTable {
 public:
  // `global` is the global set's Runtime (rank and size are global); each set's Runtime gets
  // a copy of its config without the autotuner (the global set's) and records on its timeline,
  // on rows "set <id>: <tensor>" (TimelineRows).
  ProcessSetTable(std::shared_ptr<Runtime> global, MakeSetBackends make_backends);
  ~ProcessSetTable();  // shutdown()

  // See kolo::add_process_set.
  Result<ProcessSet> add(std::vector<int> ranks);
  // See kolo::remove_process_set.
  Status remove(const ProcessSet& set);

  // An elastic job's re-formed world (Note [Elastic process sets] in elastic_session.cc).
  // carry(): set `id` again, its members renumbered to `members` (global ranks of the new world,
  // ascending); a ProcessSet of its former ranks (`former`) still names it. Every member calls
  // it for the same sets in the same order (no agreement: rank 0 said which). close(): set `id`
  // lost a member; operations on it fail with PreconditionFailed saying `why` (not PeerFailure:
  // the world is whole again, and kolo::elastic::run() must not re-form it for this). Both keep later add()s'
  // ids above `id`.
  Result<ProcessSet> carry(int32_t id, std::vector<int> members, std::vector<int> former);
  void close(int32_t id, std::vector<int> former, std::string why);
  // The Runtime that runs `set`'s operations on this rank, or InvalidArgument naming the set
  // and this rank (not a member, or no such set) for the operation `what` ("allreduce 'x'").
  Result<std::shared_ptr<Runtime>> runtime_for(const ProcessSet& set,
                                               const std::string& what) const;
  // The global set, then the others in id order.
  std::vector<ProcessSet> sets() const;
  // Shuts down every set's Runtime (in id order: every rank alike) and forgets the sets; the
  // global Runtime is the caller's. Idempotent.
  void shutdown();

 private:
  struct Member {
    ProcessSet set;
    std::shared_ptr<Runtime> runtime;  // null when this rank is not a member
    std::vector<int> former;           // carried: its ranks in the world before
    std::string closed;                // closed: why (the set is gone)
  };
  // The set `id` of `members` on this rank, and its Runtime when this rank is a member.
  Result<Member> create(int32_t id, const std::vector<int>& members);

  const std::shared_ptr<Runtime> global_;
  const MakeSetBackends make_backends_;
  Mutex add_mu_;  // serialises add() and remove() on this rank
  mutable Mutex mu_;
  std::map<int32_t, Member> sets_ KOLO_GUARDED_BY(mu_);
  int32_t next_id_ KOLO_GUARDED_BY(add_mu_) = 1;
  int64_t adds_ KOLO_GUARDED_BY(add_mu_) = 0;  // names the agreement's allgather
};

}  // namespace kolo::coord

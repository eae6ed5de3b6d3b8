// Process sets: collectives over a sub-group of the job's ranks (Horovod's process sets,
// PyTorch's new_group), for data parallelism inside groups of a model- or pipeline-parallel job.
//
//   KOLO_ASSIGN_OR_RETURN(kolo::ProcessSet even, kolo::add_process_set({0, 2}));
//   if (even.includes(kolo::rank()))
//     KOLO_RETURN_IF_ERROR(kolo::allreduce("grad", view, {.process_set = even}));
//
// Every operation's options take a process set; the default, ProcessSet{}, is the global set
// (every rank). Within a set, ranks are numbered 0..size()-1 in increasing order of their
// global rank: a broadcast's root and an alltoall's splits are in set ranks, and outputs are
// in set-rank order.
//
// Each set negotiates on its own: its own background thread, controller (the set's lowest
// rank), response cache and fusion, over its own connections (docs/architecture.md, Note
// [Process sets]). A slow set never stalls another, and operations of different sets run
// concurrently. Names are per set: "grad" in set 1 and "grad" in set 2 are different
// operations.
//
// Errors: submitting to a set this rank is not in fails the Handle with InvalidArgument naming
// the set and the rank; so does submitting to a removed set.
//
// Thread-safety: every function may be called from any thread after init(); add and remove
// are collective (see each) and so must be called in the same order on every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"

#pragma GCC visibility push(default)

namespace kolo {

class ProcessSet {
 public:
  // The global set: every rank of the job.
  ProcessSet() = default;

  // 0 for the global set; sets added later get 1, 2, ... in the order they were added (the
  // same on every rank).
  int32_t id() const { return id_; }
  bool is_global() const { return id_ == 0; }
  // The global ranks of the set's members, ascending. The global set: 0..kolo::size()-1.
  std::vector<int> ranks() const;
  int size() const;
  // This process's rank within the set (its position in ranks()), or -1 when not a member.
  int rank() const;
  // Whether global rank `global_rank` is a member.
  bool includes(int global_rank) const;
  // "process set 1 (ranks 0, 2)"; "the global process set".
  std::string to_string() const;

  // Same id. (Sets of one session compare by id; ids are reused by a later init().)
  bool operator==(const ProcessSet& other) const { return id_ == other.id_; }

  // For Kolo's implementation: a set with this id and these members (ascending, distinct).
  ProcessSet(int32_t id, std::vector<int> ranks);

 private:
  int32_t id_ = 0;
  std::shared_ptr<const std::vector<int>> ranks_;  // null for the global set
};

// Adds a process set of the given global ranks (any order). Collective over the whole job:
// every rank calls it, with the same ranks, in the same order relative to other
// add_process_set/remove_process_set calls; members connect to each other. Errors, the same on
// every rank: InvalidArgument when the ranks differ between ranks (naming which ranks passed
// which list), when a rank appears twice or lies outside [0, size()) (naming it), or when the
// list is empty; PreconditionFailed before init; connection errors of the set's backend.
Result<ProcessSet> add_process_set(std::vector<int> ranks);
// Removes a set: its pending operations on this rank fail with Aborted naming the set, and the
// set's other members see theirs fail too (a removal by one member ends the set for all). Each
// member should call it (non-members may: it forgets the set). InvalidArgument for the global
// set or a set that does not exist; PreconditionFailed before init.
Status remove_process_set(const ProcessSet& set);
ProcessSet global_process_set();
// Every set that exists, the global one first, then in id order (with those of
// KOLO_PROCESS_SETS, added by init()).
std::vector<ProcessSet> process_sets();

}  // namespace kolo

#pragma GCC visibility pop

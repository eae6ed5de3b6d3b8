// The two-level grid of a hierarchical collective (hierarchical_backend.h): which ranks share
// this rank's host, and which ranks hold the same position on the other hosts. Pure: it plans
// from every rank's host, as the launcher numbered hosts, and connects nothing.
//
// Thread-safety: free functions of their arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "kolo/status.h"

namespace kolo {

struct Hierarchy {
  // The world ranks on this rank's host, ascending; intra_rank indexes it. A rank's position
  // on its host (intra_rank) is what decides its shard of a hierarchical allreduce.
  std::vector<int> intra_ranks;
  int intra_rank = 0;
  // The world ranks at this rank's position on every host, ascending; cross_rank indexes it.
  std::vector<int> cross_ranks;
  int cross_rank = 0;

  // Every host's ranks, ascending, hosts in the order of their ids (hosts[k][i] is the rank at
  // position i of host k), and host_index[r] the k of world rank r. The cross group of
  // position i is {hosts[k][i] for every k}, ascending (cross_ranks for this rank's position).
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_index;

  // One host, or one rank per host: the hierarchy is the flat group itself.
  bool trivial() const { return intra_ranks.size() == 1 || cross_ranks.size() == 1; }
};

// The layout of a hierarchical allgather (hierarchical_backend.h) of per-rank `counts` (world
// ranks' element counts, as Backend::allgather takes them), for one rank of plan `h`. With L
// ranks per host, host k's block is its ranks' blocks in position order, cut into L shards
// (E / L elements each, one more for the first E % L):
//   1. allgather within the host (host_counts, by position): this host's block;
//   2. allgather across hosts, at this rank's position i (cross_counts, by cross rank): shard i
//      of every host's block;
//   3. allgather within the host (gather_counts, by position): every shard of every host, in
//      the order position j, then the cross order of position j;
//   4. unpack: each run copies `count` elements from offset `from` of step 3's buffer to
//      offset `to` of the output (world rank order).
// Out of each host go (C - 1) / C of the bytes, over L connections, against (P - 1) / P over
// one for a flat ring. Requires counts.size() == the world size (Backend validated it).
struct AllgatherPlan {
  struct Run {
    int64_t from = 0, to = 0, count = 0;
  };
  std::vector<int64_t> host_counts;
  int64_t shard_offset = 0, shard_count = 0;  // this rank's shard within its host's block
  std::vector<int64_t> cross_counts;
  std::vector<int64_t> gather_counts;
  std::vector<Run> unpack;  // adjacent runs merged
  int64_t host_total = 0, cross_total = 0, total = 0;
};
AllgatherPlan plan_allgather(const Hierarchy& h, int rank, const std::vector<int64_t>& counts);

// Plans the grid for world rank `rank` from host_of[r], the host of every world rank r (the
// launcher's cross rank: kolorun's node rank; under mpirun the rank among the ranks of the
// same local rank, which names hosts consistently in block and round-robin layouts; a layout
// where it does not still gives a grid on which the algorithm is exact, only not host-aligned).
// Every rank computes the same plan from the same host_of.
// Errors: InvalidArgument when hosts hold different numbers of ranks, naming each host's
// ranks, e.g. "hosts hold different numbers of ranks: host 0 has 3 (ranks 0, 1, 2), host 1
// has 1 (rank 3)"; InvalidArgument when rank is not in [0, host_of.size()).
Result<Hierarchy> plan_hierarchy(const std::vector<int>& host_of, int rank);

}  // namespace kolo

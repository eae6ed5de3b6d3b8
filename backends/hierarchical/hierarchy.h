// The two-level grid of a hierarchical collective (hierarchical_backend.h): which ranks share
// this rank's host, and which ranks hold the same position on the other hosts. Pure: it plans
// from every rank's host, as the launcher numbered hosts, and connects nothing.
//
// Thread-safety: free functions of their arguments.
#pragma once

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

  // One host, or one rank per host: the hierarchy is the flat group itself.
  bool trivial() const { return intra_ranks.size() == 1 || cross_ranks.size() == 1; }
};

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

// The benchmark's uses of MPI, behind one header so that a build without MPI swaps one file
// (no_mpi_support.cc) instead of sprinkling #ifdefs.
#pragma once

#include <memory>

#include "bench/bench_case.h"
#include "kolo/status.h"

namespace kolo::bench {

// The same collectives through raw MPI calls (MPI_Allreduce, MPI_Allgather, MPI_Bcast,
// MPI_Alltoall, MPI_Reduce_scatter_block) on MPI_COMM_WORLD's duplicate: the reference each
// Kolo row is compared with. One thread at a time.
class RawMpi {
 public:
  virtual ~RawMpi() = default;
  // One call of the case. average reduces as a plain sum (MPI has no average).
  virtual Status run(const BenchCase& c) = 0;
  virtual Status barrier() = 0;
  // The largest value over all ranks.
  virtual Result<double> max_over_ranks(double value) = 0;
};

// A RawMpi when the job runs under mpirun in an MPI build, otherwise null.
std::unique_ptr<RawMpi> make_raw_mpi();

}  // namespace kolo::bench

// mpi_support.h for builds without MPI: the world comes from kolorun's environment and there
// is no raw-MPI reference.
#include "bench/mpi_support.h"

namespace kolo::bench {

Result<World> make_bench_world() { return world_from_env(); }

std::unique_ptr<RawMpi> make_raw_mpi() { return nullptr; }

}  // namespace kolo::bench

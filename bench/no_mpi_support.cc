// mpi_support.h for builds without MPI: there is no raw-MPI reference.
#include "bench/mpi_support.h"

namespace kolo::bench {

std::unique_ptr<RawMpi> make_raw_mpi() { return nullptr; }

}  // namespace kolo::bench

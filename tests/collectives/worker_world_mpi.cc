#include "backends/mpi/mpi_world.h"
#include "tests/collectives/worker_world.h"

namespace kolo::testing {
Result<World> worker_world() { return launched_by_mpirun() ? world_from_mpi() : world_from_env(); }
}  // namespace kolo::testing

// The worker's World: world_from_mpi() under mpirun (MPI builds), else world_from_env().
// Two implementations (worker_world_mpi.cc, worker_world_env.cc), chosen by CMake.
#pragma once

#include "kolo/status.h"
#include "rendezvous/world.h"

namespace kolo::testing {
Result<World> worker_world();
}  // namespace kolo::testing

// The mpi backend: every Backend collective is the matching MPI collective (MPI_Allreduce,
// MPI_Allgatherv, MPI_Bcast, MPI_Alltoallv, MPI_Reduce_scatter, MPI_Barrier) on a private
// duplicate of MPI_COMM_WORLD, so Kolo's traffic never matches the application's own messages.
//
// Requirements: the process was launched by mpirun (or is an MPI singleton of size 1) and the
// BackendContext's rank and size equal MPI_COMM_WORLD's; otherwise the factory fails with
// PreconditionFailed saying so. MPI is initialised with MPI_THREAD_MULTIPLE if the
// application has not done it (see backends/mpi/mpi_runtime.h for finalisation).
//
// Limits: MPI counts and displacements are C ints. allreduce and broadcast split larger
// messages into pieces; allgather, alltoall and reducescatter return InvalidArgument naming
// the count when a per-rank count or a total exceeds INT_MAX elements.
//
// Errors: the communicator uses MPI_ERRORS_RETURN, so a failing MPI call returns IoError with
// MPI_Error_string's text instead of aborting. (Open MPI 4.1's mpirun still tears the whole job
// down when a rank dies; the backend cannot report that case itself.)
//
// Thread-safety: as for every Backend, one thread at a time per instance. Several instances
// (each with its own communicator) may be used from different threads concurrently.
#pragma once

#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/registry.h"
#include "kolo/status.h"

namespace kolo {

// Collective over MPI_COMM_WORLD (it calls MPI_Comm_dup): every rank must call it. The store
// and secret of the context are not used: MPI bootstraps itself.
Result<std::unique_ptr<Backend>> make_mpi_backend(const BackendContext& context);

// A sub-group's backend: a communicator of the members of MPI_COMM_WORLD named by
// `world_ranks` (MPI_Comm_create_group, collective over those members only).
Result<std::unique_ptr<Backend>> make_mpi_subgroup_backend(const BackendContext& context,
                                                           const std::vector<int>& world_ranks);

// The registry's entry (backends/registry.h): CPU buffers; launcher mpirun (mpi_world.h), under
// which mpi is the default backend.
BackendEntry backend_entry_mpi();

}  // namespace kolo

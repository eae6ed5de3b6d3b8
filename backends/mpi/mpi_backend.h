// The mpi backend: every Backend collective is the matching nonblocking MPI collective
// (MPI_Iallreduce, MPI_Iallgatherv, MPI_Ibcast, MPI_Ialltoallv, MPI_Ireduce_scatter,
// MPI_Ibarrier) on a private duplicate of MPI_COMM_WORLD, so Kolo's traffic never matches the
// application's own messages, waited for by polling (backends/mpi/mpi_wait.h): spinning while
// the transfer may still be moving, then sleeping between tests.
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
// Timeout: each MPI call (each piece of a split allreduce or broadcast) must complete within
// the context's op_timeout (KOLO_OP_TIMEOUT; the control plane's is bounded by
// KOLO_STALL_SHUTDOWN_TIME too, coordinator/api.cc). MPI reports no progress, so unlike tcp's
// "no byte moved for op_timeout" this bounds the whole call: a transfer that legitimately
// takes longer needs a larger KOLO_OP_TIMEOUT. One that does not complete in time ends the
// job: the rank prints an error naming the operation, its communicator (data or control
// plane) and size, the timeout and the setting it came from, then calls MPI_Abort with exit
// code 62 (mpi_wait.h's abort_job says why it cannot return an error instead: MPI may still
// write the buffers). Under mpirun that ends every rank, the frozen one included, and every
// thread of each, so no caller waits forever.
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

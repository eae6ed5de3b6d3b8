// Process-wide MPI setup shared by the mpi backend and world_from_mpi().
//
// Kolo needs MPI_THREAD_MULTIPLE: the coordinator's background thread runs the collectives
// while user threads may call MPI too. ensure_mpi() initialises MPI with that level when nobody
// has yet, or checks the level that the application already obtained.
//
// Finalisation: when ensure_mpi() is the one that initialised MPI, it registers an atexit
// handler that calls MPI_Finalize at normal process exit (after main returns or exit()). An
// application that initialised MPI itself keeps the duty of finalising it. Objects that hold
// MPI handles check mpi_finalized() before freeing them, so destruction order never matters.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <mpi.h>

#include <string_view>

#include "kolo/status.h"

namespace kolo {

// Initialises MPI (MPI_THREAD_MULTIPLE) unless it already is. Fails with PreconditionFailed
// when MPI was finalised already, or when the thread level provided is below MULTIPLE.
Status ensure_mpi();

// True once MPI_Finalize has been called (by anyone).
bool mpi_finalized();

// Turns an MPI error code into a Status: "<what>: <MPI_Error_string>". MPI_SUCCESS is OK.
// MPI_ERR_PROC_FAILED-like errors cannot be told apart portably in Open MPI 4.1, so every
// failure maps to IoError.
Status mpi_status(int error, std::string_view what);

}  // namespace kolo

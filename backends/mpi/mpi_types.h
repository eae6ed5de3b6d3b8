// Kolo's DataType and ReduceOp mapped onto MPI datatypes and operations.
//
// Open MPI 4.1 has no half-precision types, so float16 and bfloat16 are 2-byte contiguous
// datatypes (MPI_Type_contiguous(2, MPI_BYTE)) reduced by user operations (MPI_Op_create) that
// widen to float, combine and round back (kolo/float16.h). Those types and operations are
// created once per process, on first use after MPI is initialised, and live until
// MPI_Finalize frees them.
//
// Thread-safety: every function may be called from any thread after ensure_mpi().
#pragma once

#include <mpi.h>

#include <cstdint>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

// The MPI datatype that carries one element of dtype. dtype must be valid (Internal if not).
Result<MPI_Datatype> mpi_datatype(DataType dtype);

// The MPI operation that combines two elements of dtype under op. kAverage maps to a sum; the
// caller divides afterwards. op must be valid (Internal if not).
Result<MPI_Op> mpi_op(DataType dtype, ReduceOp op);

}  // namespace kolo

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

// The host arithmetic of ops/reduce.h (this library does not link ops/): half types widen to
// float, integers compute in double and truncate toward zero.
// dst[i] = src[i] * factor; factor 1 is a plain copy. dst and src must not overlap.
void scale_copy_host(DataType dtype, void* dst, const void* src, int64_t count, double factor);
// Completes a reduction over `contributors` ranks by kolo::Reduction's rule, as
// ops::finish_reduction does: kAverage divides by contributors, then postscale multiplies.
void finish_reduction_host(DataType dtype, const Reduction& reduction, void* data, int64_t count,
                           int contributors);

}  // namespace kolo

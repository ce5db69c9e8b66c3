// meshrt's dtypes and reduce ops as MPI datatypes and MPI_Ops. MPI has no 16-bit or 8-bit float
// types: f16 and bf16 travel as MPI_UINT16_T (fp8 as MPI_UINT8_T) and reduce through user-defined
// MPI_Ops that run meshrt's own kernels (runtime/reduce_op.h), so they round exactly as the other
// backends do.
#pragma once

#include <mpi.h>

#include "runtime/dtype.h"
#include "runtime/reduce_op.h"

namespace meshrt {

// The MPI datatype carrying `dtype` (MPI_UINT16_T for f16 and bf16).
MPI_Datatype mpi_datatype(DType dtype);

// The MPI_Op reducing `dtype` by `op`; kAvg gives the sum (the backend divides afterwards). Uses
// MPI's built-in ops for native types and meshrt's kernels for f16/bf16 (created on first use;
// MPI must be initialised).
MPI_Op mpi_reduce_op(DType dtype, ReduceOp op);

}  // namespace meshrt

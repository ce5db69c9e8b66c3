// meshrt's dtypes and reduce ops as MPI datatypes and MPI_Ops. MPI has no 16-bit or 8-bit float
// types: f16 and bf16 travel as MPI_UINT16_T (fp8 as MPI_UINT8_T) and reduce through user-defined
// MPI_Ops that run meshrt's own kernels (runtime/reduce_op.h), so they round exactly as the other
// backends do.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>

#include "runtime/dtype.h"
#include "runtime/reduce_op.h"

namespace meshrt {

// The MPI datatype carrying `dtype` (MPI_UINT16_T for f16 and bf16).
MPI_Datatype mpi_datatype(DType dtype);

// The MPI_Op reducing `dtype` by `op`; kAvg gives the sum (the backend divides afterwards). Uses
// MPI's built-in ops for native types and meshrt's kernels for f16/bf16 (created on first use;
// MPI must be initialised).
MPI_Op mpi_reduce_op(DType dtype, ReduceOp op);

// A caller's Reducer as MPI sees it: a datatype of its elements that carries the fold (as an
// attribute), and the one MPI_Op that folds any such datatype. MPI's user functions get no
// context pointer but do get the datatype, and may run on whichever thread drives MPI's progress.
// Lives until the op that uses it has completed.
class MpiCustomFold {
 public:
  // Creates and commits the datatype (MPI must be initialised).
  explicit MpiCustomFold(std::shared_ptr<const Reducer> reducer);
  ~MpiCustomFold();
  MpiCustomFold(const MpiCustomFold&) = delete;
  MpiCustomFold& operator=(const MpiCustomFold&) = delete;

  // The datatype to pass for the op's buffers: one element of the Reducer each.
  MPI_Datatype datatype() const { return type_; }
  // The MPI_Op to pass.
  static MPI_Op op();
  // The first failure of the Reducer in this op, if any.
  const std::optional<std::string>& failure() const { return failure_; }

 private:
  static void fold(void* in, void* inout, int* len, MPI_Datatype* type);

  std::shared_ptr<const Reducer> reducer_;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  std::optional<std::string> failure_;
};

}  // namespace meshrt

#include "runtime/backends/mpi/mpi_types.h"

#include <array>

namespace meshrt {
namespace {

// MPI calls it with inout = in (op) inout; meshrt's kernel takes (out, a, b).
template <DType D, ReduceOp R>
void reduce_with_meshrt_kernel(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  reduce_elements(D, R, inout, in, inout, static_cast<size_t>(*len));
}

template <DType D>
std::array<MPI_Op, 4> create_ops() {
  std::array<MPI_Op, 4> ops{};
  MPI_User_function* fns[] = {
      reduce_with_meshrt_kernel<D, ReduceOp::kSum>, reduce_with_meshrt_kernel<D, ReduceOp::kProd>,
      reduce_with_meshrt_kernel<D, ReduceOp::kMin>, reduce_with_meshrt_kernel<D, ReduceOp::kMax>};
  // Commutative: MPI may then reorder operands, as it does for its own float sums.
  for (size_t i = 0; i < ops.size(); ++i) MPI_Op_create(fns[i], /*commute=*/1, &ops[i]);
  return ops;
}

size_t kernel_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return 0;
    case ReduceOp::kProd:
      return 1;
    case ReduceOp::kMin:
      return 2;
    case ReduceOp::kMax:
      return 3;
  }
  return 0;
}

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kF16:
    case DType::kBF16:
      return MPI_UINT16_T;
    case DType::kI8:
      return MPI_INT8_T;
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return MPI_UINT8_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_reduce_op(DType dtype, ReduceOp op) {
  if (dtype == DType::kF16) {
    static const std::array<MPI_Op, 4> ops = create_ops<DType::kF16>();
    return ops[kernel_index(op)];
  }
  if (dtype == DType::kBF16) {
    static const std::array<MPI_Op, 4> ops = create_ops<DType::kBF16>();
    return ops[kernel_index(op)];
  }
  if (dtype == DType::kF8E4M3) {
    static const std::array<MPI_Op, 4> ops = create_ops<DType::kF8E4M3>();
    return ops[kernel_index(op)];
  }
  if (dtype == DType::kF8E5M2) {
    static const std::array<MPI_Op, 4> ops = create_ops<DType::kF8E5M2>();
    return ops[kernel_index(op)];
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;
    case ReduceOp::kProd:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_SUM;
}

}  // namespace meshrt

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
    case ReduceOp::kCustom:  // MpiCustomFold's op instead.
      return 0;
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
    case ReduceOp::kCustom:  // MpiCustomFold::op() instead.
      return MPI_OP_NULL;
  }
  return MPI_SUM;
}

namespace {

// The attribute key under which a custom fold's datatype carries its MpiCustomFold.
int fold_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &k, nullptr);
    return k;
  }();
  return keyval;
}

}  // namespace

MpiCustomFold::MpiCustomFold(std::shared_ptr<const Reducer> reducer)
    : reducer_(std::move(reducer)) {
  MPI_Type_contiguous(static_cast<int>(reducer_->element_bytes()), MPI_BYTE, &type_);
  MPI_Type_set_attr(type_, fold_keyval(), this);
  MPI_Type_commit(&type_);
}

MpiCustomFold::~MpiCustomFold() {
  if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
}

MPI_Op MpiCustomFold::op() {
  static const MPI_Op op = [] {
    MPI_Op o = MPI_OP_NULL;
    MPI_Op_create(&MpiCustomFold::fold, /*commute=*/1, &o);  // Reducers must commute.
    return o;
  }();
  return op;
}

void MpiCustomFold::fold(void* in, void* inout, int* len, MPI_Datatype* type) {
  void* value = nullptr;
  int found = 0;
  MPI_Type_get_attr(*type, fold_keyval(), &value, &found);
  if (!found) return;  // Never: only this class's datatypes reach this op.
  auto* self = static_cast<MpiCustomFold*>(value);
  std::optional<std::string> failure =
      self->reducer_->fold_into(in, inout, static_cast<size_t>(*len));
  if (failure && !self->failure_) self->failure_ = std::move(failure);
}

}  // namespace meshrt

#include "runtime/backends/nccl/nccl_types.h"

#include <fmt/format.h>

#include "runtime/error.h"

namespace meshrt::cuda {

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI8:
      return ncclInt8;
    case DType::kU8:
      return ncclUint8;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kF8E4M3:
      return ncclFloat8e4m3;
    case DType::kF8E5M2:
      return ncclFloat8e5m2;
  }
  throw Error(ErrorCode::kInvalidArgument, {},
              fmt::format("dtype {} has no NCCL type", static_cast<int>(dtype)));
}

ncclRedOp_t nccl_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kCustom:  // Validation refuses it first: a Reducer is a CPU function.
      break;
  }
  throw Error(ErrorCode::kInvalidArgument, {},
              fmt::format("reduce op {} has no NCCL op", static_cast<int>(op)));
}

std::string nccl_version_text(int code) {
  // NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z since 2.9; before, X*1000+Y*100+Z.
  if (code >= 10000) {
    return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
  }
  return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  return nccl_version_text(code);
}

}  // namespace meshrt::cuda

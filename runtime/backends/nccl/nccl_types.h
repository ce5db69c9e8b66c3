// meshrt's element types and reduce ops in NCCL's terms: small pure functions, tested as a table.
#pragma once

#include <nccl.h>

#include <string>

#include "runtime/dtype.h"
#include "runtime/reduce_op.h"

namespace meshrt::cuda {

// NCCL's type for `dtype`: every meshrt dtype has one (fp8 needs sm_90+ for reductions; NCCL
// refuses them elsewhere and the op fails with its error). Throws Error(kInvalidArgument) for a
// value outside the enum.
ncclDataType_t nccl_dtype(DType dtype);
// NCCL's op for `op`; kAvg is ncclAvg (sum divided by the group size, floating types only).
ncclRedOp_t nccl_reduce_op(ReduceOp op);
// "2.28.9" from ncclGetVersion's code (22809); codes below 10000 use the old 1000s scheme.
std::string nccl_version_text(int code);
// The linked NCCL's version, "2.28.9".
std::string nccl_version();

}  // namespace meshrt::cuda

// Reduction operators of all_reduce, reduce and reduce_scatter.
#pragma once

#include <cstdint>
#include <string_view>

#include "dtype.h"

namespace meshrt {

// Element-wise reduction. 16-bit floats reduce in float and round once per step; integer sums and
// products wrap around.
enum class ReduceOp : uint8_t {
  kSum,   // a + b.
  kProd,  // a * b.
  kMin,   // The smaller.
  kMax,   // The larger.
  kAvg    // The sum divided by the group size; floating dtypes only (else kInvalidArgument).
};

// Every reduce op, for tests and tables.
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg};

// Lowercase name: "sum", "prod", "min", "max", "avg"; "unknown" outside the enum.
std::string_view reduce_op_name(ReduceOp op);

// out[i] = a[i] (op) b[i] for n elements; out may alias a or b. kAvg reduces as kSum: the caller
// divides once at the end with divide_elements.
void reduce_elements(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t n);

// data[i] /= divisor for n elements of a floating dtype (the last step of kAvg); integer dtypes
// are left unchanged.
void divide_elements(DType dtype, void* data, size_t n, size_t divisor);

}  // namespace meshrt

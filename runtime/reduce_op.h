// Reduction operators of all_reduce, reduce and reduce_scatter.
#pragma once

#include <cstdint>
#include <string_view>

#include "dtype.h"

namespace meshrt {

// Element-wise reduction. kAvg is the sum divided by the group size (floating types only).
enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };

// Every reduce op, for tests and tables.
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg};

// Lowercase name: "sum", "prod", "min", "max", "avg".
std::string_view reduce_op_name(ReduceOp op);

// out[i] = a[i] (op) b[i] for n elements; out may alias a or b. kAvg reduces as kSum: the caller
// divides once at the end with divide_elements.
void reduce_elements(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t n);

// data[i] /= divisor for n elements of a floating dtype (the last step of kAvg).
void divide_elements(DType dtype, void* data, size_t n, size_t divisor);

}  // namespace meshrt

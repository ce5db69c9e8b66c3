// The one rule for ReduceOp::kAvg, for every backend that cannot ask its library for it (NCCL
// has ncclAvg): a sum, then a division by the group's size on each rank that holds a reduced
// result, as PyTorch's ReduceOp.AVG. Integer dtypes never get here: validation refuses avg on
// them.
#pragma once

#include <cstddef>

#include "runtime/op.h"

namespace meshrt {

// Whether group rank `rank` ends `op` holding a reduced result: every rank of an all_reduce or a
// reduce_scatter, the root of a reduce.
bool holds_reduced_result(const Op& op, int rank);
// Divides `count` elements of op's dtype at `data` by `group_size` when `op` averages:
// for an algorithm that finishes a block of the result before it places it.
void average_elements(const Op& op, void* data, size_t count, int group_size);
// Divides op.output by `group_size` where `op` averages and `rank` holds a reduced result: the
// last step of an algorithm that summed.
void finish_average(const Op& op, int rank, int group_size);

}  // namespace meshrt

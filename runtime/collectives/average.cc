#include "runtime/collectives/average.h"

#include "runtime/reduce_op.h"

namespace meshrt {

bool holds_reduced_result(const Op& op, int rank) {
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
    case OpKind::kReduceScatterV:
      return true;
    case OpKind::kReduce:
      return rank == op.root;
    default:
      return false;
  }
}

void average_elements(const Op& op, void* data, size_t count, int group_size) {
  if (op.reduce_op == ReduceOp::kAvg && group_size > 1) {
    divide_elements(op.input.dtype, data, count, static_cast<size_t>(group_size));
  }
}

void finish_average(const Op& op, int rank, int group_size) {
  if (holds_reduced_result(op, rank)) {
    average_elements(op, op.output.data, op.output.count, group_size);
  }
}

}  // namespace meshrt

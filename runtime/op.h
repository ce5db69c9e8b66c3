// The description of one communication op: what the communicator validates, the tracer records and
// a backend executes. One struct for every op keeps the three layers in step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string_view>
#include <vector>

#include "../trace/op_kind.h"
#include "../trace/op_record.h"
#include "buffer.h"
#include "reduce_op.h"

namespace meshrt {

using trace::is_p2p;
using trace::op_kind_name;

// One member of a batch of point-to-point ops (batch_isend_irecv).
struct P2POp {
  enum class Dir : uint8_t { kSend, kRecv };
  Dir dir = Dir::kSend;
  BufferView buffer;
  int peer = -1;  // Rank in the communicator.
  int tag = 0;
};

// A fully described op. Ranks (root, peer) are ranks within the communicator.
struct Op {
  OpKind kind = OpKind::kBarrier;
  BufferView input;  // In-place ops (all_reduce, broadcast, reduce) use input == output.
  BufferView output;
  ReduceOp reduce_op = ReduceOp::kSum;
  int root = -1;  // Root of broadcast, reduce, gather, scatter; peer of send and recv.
  int tag = 0;    // Send/recv tag.
  // Uneven all_to_all: elements sent to / received from each rank. Empty = equal splits.
  std::vector<size_t> input_splits;
  std::vector<size_t> output_splits;
  std::vector<P2POp> p2p;  // Members of a kBatchP2P.
  std::chrono::milliseconds timeout{0};
  uint64_t op_seq = 0;  // The communicator's count of all ops, this one included.
  // The count of collectives: equal on all ranks for the same collective (p2p ops may differ
  // per rank), so backends derive message tags from it.
  uint64_t collective_seq = 0;
};

// The message size S of `op` as nccl-tests defines it (the whole array for all_gather,
// reduce_scatter, gather and scatter; max of sent and received bytes for uneven all_to_all and
// batches), seen from group rank `rank` of a group of `group_size`.
uint64_t message_bytes(const Op& op, int group_size, int rank);

// The trace record of `op`, called at `caller`, on `comm`: kind, dtype, reduce op, counts, shapes,
// bytes, root or peer, timeout, the caller's scope and thread. The communicator adds sequence
// numbers, channels and times.
trace::OpRecord make_record(const Op& op, std::shared_ptr<const trace::CommInfo> comm,
                            const std::source_location& caller);

}  // namespace meshrt

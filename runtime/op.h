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
#include "call_site.h"
#include "collectives/algorithm.h"
#include "reduce_op.h"

namespace meshrt {

// Whether an op kind is point-to-point (trace/op_kind.h), without the trace:: prefix.
using trace::is_p2p;
// The snake_case name of an op kind ("all_reduce"), without the trace:: prefix.
using trace::op_kind_name;

// One member of a batch of point-to-point ops (batch_isend_irecv).
struct P2POp {
  // Whether the member sends or receives.
  enum class Dir : uint8_t {
    kSend,  // Sends `buffer` to `peer`.
    kRecv   // Receives into `buffer` from `peer`.
  };
  Dir dir = Dir::kSend;  // Send or receive.
  BufferView buffer;     // Sent from or received into; must stay valid until the batch is done.
  int peer = -1;         // Rank in the communicator; not this rank.
  int tag = 0;           // Matches a send with the peer's recv of the same tag, in posting order.
};

// A fully described op. Ranks (root, peer) are ranks within the communicator.
struct Op {
  OpKind kind = OpKind::kBarrier;  // Which op; it decides which fields below apply.
  BufferView input;   // In-place ops (all_reduce, broadcast, reduce) use input == output.
  BufferView output;  // Send and recv use input == output.
  ReduceOp reduce_op = ReduceOp::kSum;     // all_reduce, reduce, reduce_scatter only.
  std::shared_ptr<const Reducer> reducer;  // Set exactly when reduce_op is kCustom.
  int root = -1;  // Root of broadcast, reduce, gather, scatter; peer of send and recv.
  int tag = 0;    // Send/recv tag.
  // Uneven all_to_all: elements sent to / received from each rank. Empty = equal splits.
  std::vector<size_t> input_splits;
  std::vector<size_t> output_splits;
  // all_gather_v and reduce_scatter_v: block q of the whole buffer (the output of all_gather_v, the
  // input of reduce_scatter_v) is block_counts[q] elements from element block_offsets[q]. Both
  // have an entry per rank; the communicator fills the offsets where the caller gave none.
  std::vector<size_t> block_counts;
  std::vector<size_t> block_offsets;
  std::vector<P2POp> p2p;                // Members of a kBatchP2P.
  std::chrono::milliseconds timeout{0};  // Resolved and capped: never 0 once enqueued.
  uint64_t op_seq = 0;                   // The communicator's count of all ops, this one included.
  // The count of collectives: equal on all ranks for the same collective (p2p ops may differ
  // per rank), so backends derive message tags from it.
  uint64_t collective_seq = 0;
  // How it runs: chosen by the backend at enqueue (Backend::choose_algorithm), then recorded and
  // followed.
  Algorithm algorithm = Algorithm::kLibrary;
  // When a queued op began running: the start time its record shows, set by the communicator
  // just before Backend::run(), so that a backend's deadline costs no clock read of its own.
  // Unset (the epoch) for launched ops.
  std::chrono::steady_clock::time_point started{};
};

// The message size S of `op` as nccl-tests defines it (the whole array for all_gather,
// reduce_scatter, gather and scatter; max of sent and received bytes for uneven all_to_all and
// batches), seen from group rank `rank` of a group of `group_size`.
uint64_t message_bytes(const Op& op, int group_size, int rank);

// One word for the v-collectives' blocks (0 for ops without), equal on ranks that cut their
// buffers alike: what backends compare across ranks instead of the vectors.
uint64_t blocks_hash(const Op& op);

// How `op` folds: its Reducer or its built-in op on its input's dtype.
Reduction reduction_of(const Op& op);

// `timeout` after `op` began running; after now for an op whose start is unset.
inline std::chrono::steady_clock::time_point deadline_after(
    const Op& op, std::chrono::steady_clock::duration timeout) {
  const auto start = op.started != std::chrono::steady_clock::time_point{}
                         ? op.started
                         : std::chrono::steady_clock::now();
  return start + timeout;
}

// Fills `rec`, a fresh record, with what `op`, called at `caller`, on `comm` says: kind, dtype,
// reduce op, counts, shapes, bytes, root or peer, timeout, the caller's scope and thread. The
// communicator adds sequence numbers, channels and times. In place: a record is 448 bytes.
void fill_record(const Op& op, const std::shared_ptr<const trace::CommInfo>& comm,
                 const CallSite& caller, trace::OpRecord& rec);
// fill_record() into a new record.
trace::OpRecord make_record(const Op& op, std::shared_ptr<const trace::CommInfo> comm,
                            const CallSite& caller);

}  // namespace meshrt

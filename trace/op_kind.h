// The one table of facts about each op kind: its name, whether it is point-to-point, whether it
// reduces, nccl-tests' bus-bandwidth factor and which buffer defines its message size. The
// runtime (validation, records, backends), the bandwidth formulas, the exports and the analyzer
// all read it; no op name is compared as a string anywhere else.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace meshrt {

// Every op a communicator offers.
enum class OpKind : uint8_t {
  kAllReduce,       // Communicator::all_reduce.
  kBroadcast,       // Communicator::broadcast.
  kReduce,          // Communicator::reduce.
  kAllGather,       // Communicator::all_gather.
  kReduceScatter,   // Communicator::reduce_scatter.
  kAllToAll,        // Communicator::all_to_all, even or uneven.
  kGather,          // Communicator::gather.
  kScatter,         // Communicator::scatter.
  kBarrier,         // Communicator::barrier.
  kSend,            // Communicator::send.
  kRecv,            // Communicator::recv.
  kBatchP2P,        // Communicator::batch_isend_irecv.
  kAllGatherV,      // Communicator::all_gather_v: a block of its own size per rank.
  kReduceScatterV,  // Communicator::reduce_scatter_v: a block of its own size per rank.
  // The closing entry of Communicator::start_coalescing()/end_coalescing(): done when every member
  // is. Moves no data of its own; never given to a backend.
  kCoalesced,
};

}  // namespace meshrt

namespace meshrt::trace {

// busbw / algbw as nccl-tests defines it, for a group of n ranks.
enum class BusRule : uint8_t {
  kZero,        // barrier: moves no data.
  kOne,         // broadcast, reduce, send, recv, batches: bound by one link.
  kRing,        // all_gather(_v), reduce_scatter(_v), all_to_all, gather, scatter: (n-1)/n.
  kDoubleRing,  // all_reduce: 2(n-1)/n.
};

// Which bytes make the message size S (nccl-tests' convention).
enum class SizeRule : uint8_t {
  kNone,             // barrier.
  kInput,            // all_reduce, broadcast, reduce, reduce_scatter(_v), send, recv.
  kOutput,           // all_gather(_v): the whole gathered array.
  kLargerBuffer,     // all_to_all: max(input, output) (uneven splits differ per rank).
  kRootOutput,       // gather: the root's output; elsewhere input x n.
  kRootInput,        // scatter: the root's input; elsewhere output x n.
  kLargerDirection,  // batch_p2p: max(bytes sent, bytes received).
};

// The facts about one op kind.
struct OpKindInfo {
  OpKind kind;            // The row's kind; rows are in OpKind order.
  std::string_view name;  // snake_case, as records, dumps and exports spell it: "all_reduce".
  bool p2p;               // send, recv and batches: matched per channel, not per collective.
  bool reduces;           // Takes a ReduceOp.
  bool rooted;            // Has a root rank: broadcast, reduce, gather, scatter.
  BusRule bus;            // Bus-bandwidth factor.
  SizeRule size;          // Which bytes make the message size.
};

// The row of `kind`.
const OpKindInfo& op_info(OpKind kind);
// Every row, in OpKind order.
std::span<const OpKindInfo> op_kinds();
// The kind named `name` ("all_reduce", ...); nullopt for names meshrt does not produce.
std::optional<OpKind> op_kind_from_name(std::string_view name);

// op_info(kind).name: "all_reduce", ... (static storage).
inline std::string_view op_kind_name(OpKind kind) { return op_info(kind).name; }
// op_info(kind).p2p: true for send, recv and batch_p2p.
inline bool is_p2p(OpKind kind) { return op_info(kind).p2p; }

// A p2p op as every message, verdict and page names it, by its number on the channel between
// the two ranks and its peer's global rank: "send #3 to rank 5", "recv #3 from rank 2".
inline std::string p2p_op_text(std::string_view op, int64_t channel_seq, int peer) {
  return std::string(op) + " #" + std::to_string(channel_seq) +
         (op == op_kind_name(OpKind::kSend) ? " to rank " : " from rank ") + std::to_string(peer);
}

}  // namespace meshrt::trace

#include "runtime/op.h"

#include <algorithm>
#include <numeric>

namespace meshrt {

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kBatchP2P:
      return "batch_p2p";
  }
  return "unknown";
}

bool is_p2p(OpKind kind) {
  return kind == OpKind::kSend || kind == OpKind::kRecv || kind == OpKind::kBatchP2P;
}

uint64_t message_bytes(const Op& op, int group_size, int rank) {
  const uint64_t n = static_cast<uint64_t>(group_size);
  const bool is_root = op.root == rank;
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce:
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kReduceScatter:
      return op.input.bytes();
    case OpKind::kAllGather:
      return op.output.bytes();
    case OpKind::kAllToAll:
      return std::max(op.input.bytes(), op.output.bytes());
    case OpKind::kGather:
      return is_root ? op.output.bytes() : op.input.bytes() * n;
    case OpKind::kScatter:
      return is_root ? op.input.bytes() : op.output.bytes() * n;
    case OpKind::kBarrier:
      return 0;
    case OpKind::kBatchP2P: {
      uint64_t sent = 0, received = 0;
      for (const P2POp& p : op.p2p)
        (p.dir == P2POp::Dir::kSend ? sent : received) += p.buffer.bytes();
      return std::max(sent, received);
    }
  }
  return 0;
}

}  // namespace meshrt

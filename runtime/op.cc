#include "runtime/op.h"

#include <algorithm>
#include <numeric>

namespace meshrt {

uint64_t message_bytes(const Op& op, int group_size, int rank) {
  const uint64_t n = static_cast<uint64_t>(group_size);
  const bool is_root = op.root == rank;
  switch (trace::op_info(op.kind).size) {
    case trace::SizeRule::kNone:
      return 0;
    case trace::SizeRule::kInput:
      return op.input.bytes();
    case trace::SizeRule::kOutput:
      return op.output.bytes();
    case trace::SizeRule::kLargerBuffer:
      return std::max(op.input.bytes(), op.output.bytes());
    case trace::SizeRule::kRootOutput:
      return is_root ? op.output.bytes() : op.input.bytes() * n;
    case trace::SizeRule::kRootInput:
      return is_root ? op.input.bytes() : op.output.bytes() * n;
    case trace::SizeRule::kLargerDirection: {
      uint64_t sent = 0, received = 0;
      for (const P2POp& p : op.p2p)
        (p.dir == P2POp::Dir::kSend ? sent : received) += p.buffer.bytes();
      return std::max(sent, received);
    }
  }
  return 0;
}

}  // namespace meshrt

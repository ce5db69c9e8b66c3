// What the analyzer knows of each op name a dump can carry (profiling_name's op): meshrt's names
// through trace/op_kind.h, and the one table of names only PyTorch writes, each with its OpKind
// where it has one and the flags that decide how matching compares it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "trace/op_kind.h"

namespace meshrt::trace {

// The analyzer's view of one op name.
struct OpType {
  // How matching treats the type.
  enum Flag : uint16_t {
    kSymmetric = 1 << 0,        // Completing it on one rank needs every member.
    kClosing = 1 << 1,          // Closes a coalesced group.
    kAllToAll = 1 << 2,         // Sizes are per-rank splits: only the totals must agree.
    kSkipInputSizes = 1 << 3,   // Input shapes legitimately differ across ranks.
    kSkipOutputSizes = 1 << 4,  // Output shapes legitimately differ across ranks.
    kSkipInputDtypes = 1 << 5,  // As PyTorch's analyzer (rule 7).
    kSkipOutputDtypes = 1 << 6,
  };

  std::optional<OpKind> kind;  // nullopt: a closing "coalesced" entry, or a name nobody writes.
  uint16_t flags = 0;          // Flag bits.

  bool has(Flag flag) const { return (flags & flag) != 0; }
  // A send (the channel's source side) or a recv (its destination side).
  bool send() const { return kind == OpKind::kSend; }
  bool recv() const { return kind == OpKind::kRecv; }
  // A lone send or recv, or a member of a batch: matched per p2p channel.
  bool channel_op() const { return send() || recv(); }
};

// The type named `name` ("all_reduce", "_all_gather_base", "coalesced", ...); a name that neither
// meshrt nor PyTorch writes has no kind and no flags.
OpType op_type(std::string_view name);

}  // namespace meshrt::trace

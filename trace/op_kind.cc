#include "trace/op_kind.h"

namespace meshrt::trace {
namespace {

constexpr OpKindInfo kOpKinds[] = {
    {OpKind::kAllReduce, "all_reduce", false, true, false, BusRule::kDoubleRing, SizeRule::kInput},
    {OpKind::kBroadcast, "broadcast", false, false, true, BusRule::kOne, SizeRule::kInput},
    {OpKind::kReduce, "reduce", false, true, true, BusRule::kOne, SizeRule::kInput},
    {OpKind::kAllGather, "all_gather", false, false, false, BusRule::kRing, SizeRule::kOutput},
    {OpKind::kReduceScatter, "reduce_scatter", false, true, false, BusRule::kRing,
     SizeRule::kInput},
    {OpKind::kAllToAll, "all_to_all", false, false, false, BusRule::kRing, SizeRule::kLargerBuffer},
    {OpKind::kGather, "gather", false, false, true, BusRule::kRing, SizeRule::kRootOutput},
    {OpKind::kScatter, "scatter", false, false, true, BusRule::kRing, SizeRule::kRootInput},
    {OpKind::kBarrier, "barrier", false, false, false, BusRule::kZero, SizeRule::kNone},
    {OpKind::kSend, "send", true, false, false, BusRule::kOne, SizeRule::kInput},
    {OpKind::kRecv, "recv", true, false, false, BusRule::kOne, SizeRule::kInput},
    {OpKind::kBatchP2P, "batch_p2p", true, false, false, BusRule::kOne, SizeRule::kLargerDirection},
    {OpKind::kAllGatherV, "all_gather_v", false, false, false, BusRule::kRing, SizeRule::kOutput},
    {OpKind::kReduceScatterV, "reduce_scatter_v", false, true, false, BusRule::kRing,
     SizeRule::kInput},
    {OpKind::kCoalesced, "coalesced", false, false, false, BusRule::kZero, SizeRule::kNone},
};

// The table is indexed by the enum: a row out of order is a compile error, not a wrong name.
constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kOpKinds); ++i)
    if (static_cast<size_t>(kOpKinds[i].kind) != i) return false;
  return true;
}
static_assert(in_enum_order());
static_assert(std::size(kOpKinds) == static_cast<size_t>(OpKind::kCoalesced) + 1);

}  // namespace

const OpKindInfo& op_info(OpKind kind) { return kOpKinds[static_cast<size_t>(kind)]; }

std::span<const OpKindInfo> op_kinds() { return kOpKinds; }

std::optional<OpKind> op_kind_from_name(std::string_view name) {
  for (const OpKindInfo& info : kOpKinds)
    if (info.name == name) return info.kind;
  return std::nullopt;
}

}  // namespace meshrt::trace

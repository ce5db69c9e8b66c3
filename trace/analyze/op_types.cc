#include "trace/analyze/op_types.h"

namespace meshrt::trace {
namespace {

using enum OpType::Flag;

// The flags of meshrt's op kinds, which PyTorch's names for the same kinds share.
uint16_t kind_flags(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kBarrier:
      return kSymmetric;
    case OpKind::kAllToAll:
      return kSymmetric | kAllToAll | kSkipInputSizes | kSkipOutputSizes;
    case OpKind::kAllGatherV:  // Each rank gives its own block; the gathered whole agrees.
      return kSymmetric | kSkipInputSizes;
    case OpKind::kReduceScatterV:
      return kSymmetric | kSkipOutputSizes;
    case OpKind::kScatter:
      return kSkipInputSizes | kSkipInputDtypes;
    case OpKind::kGather:
      return kSkipOutputSizes | kSkipOutputDtypes;
    case OpKind::kBroadcast:
      return kSkipInputDtypes;
    case OpKind::kReduce:  // Non-roots may finish before the root starts.
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kBatchP2P:
      return 0;
    case OpKind::kCoalesced:
      return kClosing;
  }
  return 0;
}

// A name only PyTorch's recorder writes (meshrt's recorder writes two of them as well:
// all_reduce_barrier and coalesced), its kind and the flags it adds to the kind's.
struct TorchName {
  std::string_view name;
  std::optional<OpKind> kind;
  uint16_t extra_flags;
};

constexpr TorchName kTorchNames[] = {
    {"all_reduce_barrier", OpKind::kBarrier, 0},
    {"allreduce_coalesced", OpKind::kAllReduce, 0},
    {"ALLREDUCE_coalesced", OpKind::kAllReduce, kClosing},
    {"_all_gather_base", OpKind::kAllGather, 0},
    {"all_gather_into_tensor_coalesced", OpKind::kAllGather, 0},
    {"ALLGATHER_coalesced", OpKind::kAllGather, kClosing},
    {"_reduce_scatter_base", OpKind::kReduceScatter, 0},
    {"reduce_scatter_tensor_coalesced", OpKind::kReduceScatter, 0},
    {"REDUCE_SCATTER_coalesced", OpKind::kReduceScatter, kClosing},
    {"all_to_all_single", OpKind::kAllToAll, 0},
    {"_broadcast_oop", OpKind::kBroadcast, 0},
    {"_reduce_oop", OpKind::kReduce, 0},
    {"coalesced", std::nullopt, kClosing},  // Closes a batch_isend_irecv or coalescing block.
};

}  // namespace

OpType op_type(std::string_view name) {
  const std::optional<OpKind> kind = op_kind_from_name(name);
  // "coalesced" closes a group of any kind: like PyTorch's name, it has no kind of its own.
  if (kind && *kind != OpKind::kCoalesced) {
    return {kind, kind_flags(*kind)};
  }
  for (const TorchName& t : kTorchNames) {
    if (t.name == name) {
      return {t.kind, static_cast<uint16_t>((t.kind ? kind_flags(*t.kind) : 0) | t.extra_flags)};
    }
  }
  return {};
}

}  // namespace meshrt::trace

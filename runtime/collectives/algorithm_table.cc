#include "runtime/collectives/algorithm_table.h"

#include <fmt/format.h>

#include <bit>
#include <string>

#include "runtime/collectives/hierarchical.h"
#include "runtime/error.h"
#include "trace/env.h"

namespace meshrt {
namespace {

// Whether `algorithm` ever runs ops of `kind`, whatever the group.
bool runs_kind(Algorithm algorithm, OpKind kind) {
  switch (algorithm) {
    case Algorithm::kLibrary:  // Debian's Gloo has no reduce_scatter of unbound buffers.
      return kind != OpKind::kReduceScatter && kind != OpKind::kCoalesced &&
             kind != OpKind::kAllGatherV && kind != OpKind::kReduceScatterV;
    case Algorithm::kSlots:
      return !is_p2p(kind) && kind != OpKind::kCoalesced;
    case Algorithm::kRecursiveDoubling:
      return kind == OpKind::kAllReduce;
    case Algorithm::kRing:
      return kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce ||
             kind == OpKind::kReduce || kind == OpKind::kAllGatherV ||
             kind == OpKind::kReduceScatterV;
    case Algorithm::kHierarchical:
      return runs_hierarchically(kind);
    case Algorithm::kMailbox:
      return is_p2p(kind);
    case Algorithm::kNone:
      return false;  // Never forced: it is chosen only where there is nothing to move.
  }
  return false;
}

Error bad_override(std::string_view part, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument, {},
               fmt::format("MESHRT_ALGO: '{}': {} (docs/architecture.md, \"The collectives "
                           "layer\")",
                           part, why));
}

}  // namespace

AlgorithmOverrides parse_algorithm_overrides(std::string_view text) {
  AlgorithmOverrides overrides;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    const std::string_view algo_name = eq == std::string_view::npos ? part : part.substr(eq + 1);
    const std::optional<Algorithm> algorithm = algorithm_from_name(algo_name);
    if (!algorithm || *algorithm == Algorithm::kNone) {
      throw bad_override(part, fmt::format("'{}' is not an algorithm (library, slots, "
                                           "recursive_doubling, ring, hierarchical, mailbox)",
                                           algo_name));
    }
    if (eq == std::string_view::npos) {
      for (size_t k = 0; k < overrides.by_kind.size(); ++k) {
        if (runs_kind(*algorithm, static_cast<OpKind>(k))) overrides.by_kind[k] = algorithm;
      }
      continue;
    }
    const std::optional<OpKind> kind = trace::op_kind_from_name(part.substr(0, eq));
    if (!kind) throw bad_override(part, fmt::format("'{}' is not an op", part.substr(0, eq)));
    if (!runs_kind(*algorithm, *kind)) {
      throw bad_override(part, fmt::format("{} never runs {}", algo_name, op_kind_name(*kind)));
    }
    overrides.by_kind[static_cast<size_t>(*kind)] = algorithm;
  }
  return overrides;
}

AlgorithmOverrides algorithm_overrides_from_env() {
  const std::optional<std::string> text = trace::env::get({"MESHRT_ALGO"});
  return text ? parse_algorithm_overrides(*text) : AlgorithmOverrides{};
}

bool can_run(Algorithm algorithm, const Op& op, const GroupShape& group) {
  if (!runs_kind(algorithm, op.kind)) return false;
  switch (algorithm) {
    case Algorithm::kLibrary:  // A library folds its own types only, never a caller's Reducer.
      return op.reducer == nullptr;
    case Algorithm::kSlots:  // Uneven all_to_all's first exchange: 2n splits of 8 bytes.
      return group.slot_bytes > 0 &&
             (op.input_splits.empty() ||
              group.slot_bytes >= 2 * sizeof(uint64_t) * static_cast<size_t>(group.size)) &&
             // One element of each rank's block per exchange: a large record may not fit.
             op.input.element_bytes() * static_cast<size_t>(group.size) <= group.slot_bytes;
    case Algorithm::kRecursiveDoubling:  // Elsewhere the surplus ranks need extra steps.
      return std::has_single_bit(static_cast<unsigned>(group.size));
    case Algorithm::kHierarchical:
      return group.hierarchy;
    case Algorithm::kMailbox:  // The rings lie in the slots' segment.
      return group.slot_bytes > 0;
    default:
      return true;
  }
}

Algorithm select_algorithm(const Op& op, const GroupShape& group,
                           const AlgorithmOverrides& overrides) {
  if (op.kind == OpKind::kCoalesced || (op.kind == OpKind::kAllGather && op.input.count == 0)) {
    return Algorithm::kNone;  // Gloo's all_gather divides by the element count.
  }
  if (const auto forced = overrides.by_kind[static_cast<size_t>(op.kind)];
      forced && can_run(*forced, op, group)) {
    return *forced;
  }
  if (is_p2p(op.kind)) {
    return can_run(Algorithm::kMailbox, op, group) ? Algorithm::kMailbox : Algorithm::kLibrary;
  }
  // Across hosts: TCP carries one copy per host instead of one per rank (NCCL's and han's rule).
  if (can_run(Algorithm::kHierarchical, op, group)) return Algorithm::kHierarchical;
  const bool folds = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce;
  if (can_run(Algorithm::kSlots, op, group) &&
      (!folds || group.size <= kSlotsFoldMaxRanks || op.input.bytes() <= group.slot_bytes)) {
    return Algorithm::kSlots;
  }
  // Recursive doubling: log2(n) exchanges of the whole buffer where Gloo's ring takes 2(n-1) of a
  // block. Above 2 ranks only once the ring's blocks hold data (count >= 2n): below that Gloo's
  // ring skips its empty blocks and moves one token, one rank awake at a time, while recursive
  // doubling wakes every rank at once, a scheduler tick per op when ranks outnumber cores (4 ranks
  // on 2 cores, 8 B: 3.0 ms against the ring's 0.3 ms; docs/performance.md).
  if (op.kind == OpKind::kAllReduce && can_run(Algorithm::kRecursiveDoubling, op, group) &&
      group.size >= 2 && op.output.bytes() <= group.recursive_doubling_max_bytes &&
      (group.size == 2 || op.output.count >= 2 * static_cast<size_t>(group.size))) {
    return Algorithm::kRecursiveDoubling;
  }
  if (op.kind == OpKind::kReduceScatter || op.kind == OpKind::kReduceScatterV ||
      op.kind == OpKind::kAllGatherV || op.reducer) {
    return Algorithm::kRing;
  }
  return Algorithm::kLibrary;
}

}  // namespace meshrt

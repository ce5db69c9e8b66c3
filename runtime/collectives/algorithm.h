// The algorithms a collective can run by, named as records, dumps and MESHRT_ALGO spell them.
// Which one runs is decided in one place: algorithm_table.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace meshrt {

// How one op moves its data.
enum class Algorithm : uint8_t {
  kLibrary,            // The library underneath does it (Gloo's ring or tree, MPI, NCCL).
  kSlots,              // Through a slot exchange, chunk by chunk: every rank reads every slot.
  kRecursiveDoubling,  // all_reduce over pairs: log2(n) exchanges of the whole buffer.
  kRing,               // Over pairs, a block a step: reduce_scatter(_v), all_gather_v, all_reduce.
  kHierarchical,       // Within each host through shared memory, across hosts between leaders.
  kMailbox,            // send, recv and batches through per-pair rings in shared memory.
  kNone,               // Nothing to move (an empty all_gather, a coalesced group's closing entry).
};

// "library", "slots", "recursive_doubling", "ring", "hierarchical", "mailbox", "none" (static
// storage).
std::string_view algorithm_name(Algorithm algorithm);
// The algorithm named `name`; nullopt for an unknown name.
std::optional<Algorithm> algorithm_from_name(std::string_view name);

}  // namespace meshrt

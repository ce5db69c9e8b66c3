// The one place that picks how an op runs, for the backends built on the collectives layer (Gloo
// today; MPI and NCCL hand every op to their library): a table over the op, its bytes, the group's
// size and the transports it has, which MESHRT_ALGO overrides for experiments.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "runtime/collectives/algorithm.h"
#include "runtime/op.h"

namespace meshrt {

// What the choice depends on besides the op. Equal on every rank of a group, as are the op's
// sizes that the table reads, so that every rank picks the same algorithm.
struct GroupShape {
  int size = 1;                             // Ranks in the group.
  size_t slot_bytes = 0;                    // Of its slot exchange; 0: it has none.
  size_t recursive_doubling_max_bytes = 0;  // MESHRT_GLOO_ONESHOT_MAX_BYTES.
  // Whether it has hierarchical transports: its ranks span hosts and some host holds several.
  bool hierarchy = false;
};

// Up to this many ranks, all_reduce and reduce fold through the slots at any size. Each rank reads
// every slot (n reads per byte, where a ring reads 2(n-1)/n): at 16 ranks on 2 cores an 8 MiB
// all_reduce took 25-33 ms so, 83-86 ms over TCP. Larger groups fold only ops of one chunk.
inline constexpr int kSlotsFoldMaxRanks = 16;

// Algorithms forced per op kind (MESHRT_ALGO).
struct AlgorithmOverrides {
  std::array<std::optional<Algorithm>, static_cast<size_t>(OpKind::kCoalesced) + 1> by_kind{};
};

// Parses MESHRT_ALGO's value: comma-separated `op=algorithm` ("all_reduce=recursive_doubling,
// reduce_scatter=slots"), or one algorithm alone for every op kind it can run ("slots"). Throws
// Error(kInvalidArgument) naming the part that is not an op, not an algorithm, or an algorithm
// that never runs that op.
AlgorithmOverrides parse_algorithm_overrides(std::string_view text);
// MESHRT_ALGO parsed (none forced when unset). It must be equal on every rank: ranks that pick
// different algorithms for one op never meet.
AlgorithmOverrides algorithm_overrides_from_env();

// Whether `algorithm` can run `op` on `group` at all (the slots need a slot exchange, recursive
// doubling a power-of-two group, ...).
bool can_run(Algorithm algorithm, const Op& op, const GroupShape& group);

// The algorithm of `op`: the override for its kind where that can run it, else the table
// (algorithm_table.cc, and docs/architecture.md "The collectives layer").
Algorithm select_algorithm(const Op& op, const GroupShape& group,
                           const AlgorithmOverrides& overrides = {});

}  // namespace meshrt

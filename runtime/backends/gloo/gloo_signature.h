// What the ranks of one Gloo collective must pass alike (kind, element count, dtype, root, reduce
// op): folded into the tag Gloo already sends, so that ranks that disagree never match messages,
// and compared through the store after the op fails, to name who passed what.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/error.h"
#include "runtime/op.h"
#include "runtime/store/store.h"

namespace meshrt {

// The arguments of `op` that every rank must pass alike, as text ("all_reduce of 8 x f32 (32
// bytes), sum").
std::string gloo_signature(const Op& op);

// Gloo's tag for `op`: the low 16 bits of its collective seq and a 16-bit hash of its signature.
// Gloo aborts the process (an exception on its device thread) when a message is larger than the
// receive it lands in; with the sizes in the tag such messages go to different slots instead and
// the op times out, after which gloo_diagnose() tells a mismatch from a hang. Ops that can be in
// flight together are a few seqs apart, so 16 bits of seq keep them apart.
uint32_t gloo_tag(const Op& op);

// After `op` failed with `failure` on `rank` of a communicator of `size` ranks: publishes this
// rank's signature under `store` and reads the others' for up to `wait`. Returns
// Error(kInvalidArgument) naming every rank's signature when they differ; else `failure`.
// `global_ranks` (group rank -> global rank; empty when unknown) names each rank both ways.
Error gloo_diagnose(const Op& op, int rank, int size, Store& store, std::chrono::milliseconds wait,
                    Error failure, std::span<const int> global_ranks = {});

// "rank 2" when group and global rank agree (or the global one is unknown), else "group rank 0
// (global rank 2)"; for several, "group ranks [0, 1] (global ranks [2, 3])".
std::string group_ranks_phrase(std::span<const int> group_ranks, std::span<const int> global_ranks);

}  // namespace meshrt

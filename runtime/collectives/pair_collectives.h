// Collectives over a pair channel (pair_channel.h), written once for any transport that offers
// one. Each keeps its scratch in the caller's PairScratch, reused across ops.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/collectives/pair_channel.h"
#include "runtime/op.h"

namespace meshrt {

// Buffers an algorithm reuses from op to op: no allocation per op once warm.
struct PairScratch {
  std::vector<char> a;
  std::vector<char> b;
  std::vector<char> c;
};

// all_reduce of `op` on a power-of-two group by recursive doubling: in round k each rank swaps
// its partial result with rank ^ 2^k and both fold the pair in rank order (lower op higher: the
// ops commute, NaN payloads and min/max of a NaN do not), so every rank ends with the same bits.
// log2(n) exchanges of the whole buffer on `tag`.
void all_reduce_recursive_doubling(const Op& op, PairChannel& pairs, uint64_t tag,
                                   std::chrono::steady_clock::time_point deadline,
                                   PairScratch& scratch);

// reduce_scatter of `op` by a ring: n-1 steps, each sends one partially reduced block to the
// right neighbour and folds the block arriving from the left, so every rank moves (n-1)/n of the
// input once, on `tag`.
void reduce_scatter_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                         std::chrono::steady_clock::time_point deadline, PairScratch& scratch);

}  // namespace meshrt

// Collectives over a pair channel (pair_channel.h), written once for any transport that offers
// one. Each keeps its scratch in the caller's PairScratch, reused across ops.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
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

// A buffer cut into one block per rank of a pair channel's group, in rank order: block i is
// `counts[i]` elements from element `offsets[i]`. Blocks may differ in size, and be empty.
struct Blocks {
  std::span<const size_t> offsets;
  std::span<const size_t> counts;
};

// reduce_scatter in place by a ring: afterwards rank r's block of `data` holds the reduction of
// every rank's block r (by `reduce`, never avg); the other blocks hold partial results. n-1 steps
// on `tag`, each sending one block to the right neighbour and folding the one from the left.
void reduce_scatter_ring_in_place(char* data, const Reduction& reduce, const Blocks& blocks,
                                  PairChannel& pairs, uint64_t tag,
                                  std::chrono::steady_clock::time_point deadline,
                                  PairScratch& scratch);

// all_gather in place by a ring: rank r's block of `data` goes to every rank's block r. n-1 steps
// on `tag`, each passing on the block that arrived in the step before. Blocks count elements of
// `element_bytes`.
void all_gather_ring_in_place(char* data, size_t element_bytes, const Blocks& blocks,
                              PairChannel& pairs, uint64_t tag,
                              std::chrono::steady_clock::time_point deadline);

// all_reduce of `count` elements at `data` in place: the ring's reduce_scatter then all_gather
// over n near-equal blocks, so every rank moves 2(n-1)/n of the buffer and every block is folded
// once, on one rank, so every rank ends with the same bits.
void all_reduce_ring_in_place(char* data, size_t count, const Reduction& reduce, PairChannel& pairs,
                              uint64_t tag, std::chrono::steady_clock::time_point deadline,
                              PairScratch& scratch);

// all_reduce or reduce of `op` by all_reduce_ring_in_place on its output (a reduce's non-roots
// work in scratch and keep their output), then the avg rule.
void all_reduce_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                     std::chrono::steady_clock::time_point deadline, PairScratch& scratch);

// all_gather_v of `op` by the ring: this rank's input into its block of the output, then
// all_gather_ring_in_place over the op's blocks.
void all_gather_v_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                       std::chrono::steady_clock::time_point deadline);

// reduce_scatter_v of `op` by the ring: reduce_scatter_ring_in_place over a copy of the input
// cut in the op's blocks, this rank's block to the output, then the avg rule.
void reduce_scatter_v_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                           std::chrono::steady_clock::time_point deadline, PairScratch& scratch);

// Broadcast of `bytes` at `data` from rank `root` by a binomial tree: ceil(log2 n) rounds.
void broadcast_tree(char* data, size_t bytes, int root, PairChannel& pairs, uint64_t tag,
                    std::chrono::steady_clock::time_point deadline);

// Returns once every rank of `pairs` has called it: ceil(log2 n) rounds of one byte
// (dissemination).
void barrier_dissemination(PairChannel& pairs, uint64_t tag,
                           std::chrono::steady_clock::time_point deadline);

}  // namespace meshrt

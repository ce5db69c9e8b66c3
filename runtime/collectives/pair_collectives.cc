#include "runtime/collectives/pair_collectives.h"

#include <algorithm>
#include <cstring>

#include "runtime/collectives/average.h"
#include "runtime/reduce_op.h"

namespace meshrt {
namespace {

// i modulo n, for i down to -2n.
int wrap(int i, int n) { return ((i % n) + n) % n; }

}  // namespace

void all_reduce_recursive_doubling(const Op& op, PairChannel& pairs, uint64_t tag,
                                   std::chrono::steady_clock::time_point deadline,
                                   PairScratch& scratch) {
  const int rank = pairs.rank();
  const int n = pairs.size();
  const size_t bytes = op.output.bytes();
  scratch.a.resize(bytes);
  scratch.b.resize(bytes);
  char* mine = scratch.a.data();
  char* theirs = scratch.b.data();
  for (int bit = 1; bit < n; bit <<= 1) {
    const int peer = rank ^ bit;
    // An empty op has no buffer: memcpy's pointers must not be null even for 0 bytes (UBSan).
    if (bytes != 0) std::memcpy(mine, op.output.data, bytes);
    pairs.send_recv(peer, mine, bytes, peer, theirs, bytes, tag, deadline);
    const bool lower = (rank & bit) == 0;
    reduction_of(op)(op.output.data, lower ? mine : theirs, lower ? theirs : mine, op.output.count);
  }
  finish_average(op, rank, n);
}

void reduce_scatter_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                         std::chrono::steady_clock::time_point deadline, PairScratch& scratch) {
  const int n = pairs.size();
  const int rank = pairs.rank();
  const size_t count = op.output.count;
  const size_t bytes = op.output.bytes();
  if (n == 1) {
    if (op.output.data != op.input.data) std::memmove(op.output.data, op.input.data, bytes);
    return;
  }
  const int right = (rank + 1) % n;
  const int left = (rank + n - 1) % n;
  auto block = [&](int i) {
    return static_cast<const char*>(op.input.data) + static_cast<size_t>(wrap(i, n)) * bytes;
  };
  // a and b: partial sums, alternated so the block in flight is never overwritten; c: arrivals.
  scratch.a.resize(bytes);
  scratch.b.resize(bytes);
  scratch.c.resize(bytes);
  const Reduction reduce = reduction_of(op);
  const char* outgoing = block(rank - 1);
  for (int step = 0; step < n - 1; ++step) {
    const bool last = step == n - 2;
    // Never the block in flight: that is the other one of a and b.
    char* target = last            ? static_cast<char*>(op.output.data)
                   : step % 2 == 0 ? scratch.a.data()
                                   : scratch.b.data();
    pairs.send_recv(right, outgoing, bytes, left, scratch.c.data(), bytes, tag, deadline, [&] {
      // The last step writes the output, which may alias this rank's input block: that block
      // is read only here, as the second operand, element by element.
      reduce(target, scratch.c.data(), block(rank - step - 2), count);
    });
    outgoing = target;
  }
  finish_average(op, rank, n);
}

void reduce_scatter_ring_in_place(char* data, const Reduction& reduce, const Blocks& blocks,
                                  PairChannel& pairs, uint64_t tag,
                                  std::chrono::steady_clock::time_point deadline,
                                  PairScratch& scratch) {
  const int n = pairs.size();
  const int rank = pairs.rank();
  const size_t element_bytes = reduce.element_bytes;
  auto at = [&](int i) { return data + blocks.offsets[wrap(i, n)] * element_bytes; };
  auto count = [&](int i) { return blocks.counts[wrap(i, n)]; };
  size_t most = 0;
  for (const size_t c : blocks.counts) most = std::max(most, c);
  scratch.c.resize(most * element_bytes);
  // Step s sends block r-s-1 (folded in step s-1) and folds the arrival into block r-s-2, so the
  // block in flight is never the one being written; the last step folds block r.
  for (int step = 0; step < n - 1; ++step) {
    const int out = rank - step - 1;
    const int in = rank - step - 2;
    pairs.send_recv(wrap(rank + 1, n), at(out), count(out) * element_bytes, wrap(rank - 1, n),
                    scratch.c.data(), count(in) * element_bytes, tag, deadline,
                    [&] { reduce(at(in), at(in), scratch.c.data(), count(in)); });
  }
}

void all_gather_ring_in_place(char* data, size_t element_bytes, const Blocks& blocks,
                              PairChannel& pairs, uint64_t tag,
                              std::chrono::steady_clock::time_point deadline) {
  const int n = pairs.size();
  const int rank = pairs.rank();
  auto at = [&](int i) { return data + blocks.offsets[wrap(i, n)] * element_bytes; };
  auto bytes = [&](int i) { return blocks.counts[wrap(i, n)] * element_bytes; };
  for (int step = 0; step < n - 1; ++step) {
    const int out = rank - step;
    const int in = rank - step - 1;
    pairs.send_recv(wrap(rank + 1, n), at(out), bytes(out), wrap(rank - 1, n), at(in), bytes(in),
                    tag, deadline);
  }
}

void all_reduce_ring_in_place(char* data, size_t count, const Reduction& reduce, PairChannel& pairs,
                              uint64_t tag, std::chrono::steady_clock::time_point deadline,
                              PairScratch& scratch) {
  const size_t n = static_cast<size_t>(pairs.size());
  std::vector<size_t> offsets(n), counts(n);
  for (size_t i = 0; i < n; ++i) {
    offsets[i] = count * i / n;
    counts[i] = count * (i + 1) / n - offsets[i];
  }
  const Blocks blocks{offsets, counts};
  reduce_scatter_ring_in_place(data, reduce, blocks, pairs, tag, deadline, scratch);
  all_gather_ring_in_place(data, reduce.element_bytes, blocks, pairs, tag, deadline);
}

void all_reduce_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                     std::chrono::steady_clock::time_point deadline, PairScratch& scratch) {
  BufferView out = op.output;
  if (op.kind == OpKind::kReduce && pairs.rank() != op.root) {
    scratch.a.resize(out.bytes());
    out.data = scratch.a.data();
  }
  if (out.data != op.input.data && out.bytes() != 0) {
    std::memmove(out.data, op.input.data, out.bytes());
  }
  all_reduce_ring_in_place(static_cast<char*>(out.data), out.count, reduction_of(op), pairs, tag,
                           deadline, scratch);
  finish_average(op, pairs.rank(), pairs.size());
}

void all_gather_v_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                       std::chrono::steady_clock::time_point deadline) {
  const size_t es = op.output.element_bytes();
  char* out = static_cast<char*>(op.output.data);
  char* mine = out + op.block_offsets[static_cast<size_t>(pairs.rank())] * es;
  if (mine != op.input.data && op.input.count != 0) {
    std::memcpy(mine, op.input.data, op.input.bytes());
  }
  all_gather_ring_in_place(out, es, Blocks{op.block_offsets, op.block_counts}, pairs, tag,
                           deadline);
}

void reduce_scatter_v_ring(const Op& op, PairChannel& pairs, uint64_t tag,
                           std::chrono::steady_clock::time_point deadline, PairScratch& scratch) {
  const size_t es = op.input.element_bytes();
  scratch.a.resize(op.input.bytes());
  if (op.input.count != 0) std::memcpy(scratch.a.data(), op.input.data, op.input.bytes());
  reduce_scatter_ring_in_place(scratch.a.data(), reduction_of(op),
                               Blocks{op.block_offsets, op.block_counts}, pairs, tag, deadline,
                               scratch);
  const size_t me = static_cast<size_t>(pairs.rank());
  if (op.output.count != 0) {
    std::memcpy(op.output.data, scratch.a.data() + op.block_offsets[me] * es, op.output.bytes());
  }
  finish_average(op, pairs.rank(), pairs.size());
}

void broadcast_tree(char* data, size_t bytes, int root, PairChannel& pairs, uint64_t tag,
                    std::chrono::steady_clock::time_point deadline) {
  const int n = pairs.size();
  const int me = wrap(pairs.rank() - root, n);  // Ranks relative to the root.
  for (int span = 1; span < n; span <<= 1) {
    if (me < span && me + span < n) {
      pairs.send_recv(wrap(me + span + root, n), data, bytes, -1, nullptr, 0, tag, deadline);
    } else if (me >= span && me < 2 * span) {
      pairs.send_recv(-1, nullptr, 0, wrap(me - span + root, n), data, bytes, tag, deadline);
    }
  }
}

void barrier_dissemination(PairChannel& pairs, uint64_t tag,
                           std::chrono::steady_clock::time_point deadline) {
  const int n = pairs.size();
  const int rank = pairs.rank();
  char out = 0;
  char in = 0;
  for (int distance = 1; distance < n; distance <<= 1) {
    pairs.send_recv(wrap(rank + distance, n), &out, 1, wrap(rank - distance, n), &in, 1, tag,
                    deadline);
  }
}

}  // namespace meshrt

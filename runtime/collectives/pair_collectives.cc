#include "runtime/collectives/pair_collectives.h"

#include <cstring>

#include "runtime/collectives/average.h"
#include "runtime/reduce_op.h"

namespace meshrt {

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
    reduce_elements(op.output.dtype, op.reduce_op, op.output.data, lower ? mine : theirs,
                    lower ? theirs : mine, op.output.count);
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
    return static_cast<const char*>(op.input.data) + static_cast<size_t>((i % n + n) % n) * bytes;
  };
  // a and b: partial sums, alternated so the block in flight is never overwritten; c: arrivals.
  scratch.a.resize(bytes);
  scratch.b.resize(bytes);
  scratch.c.resize(bytes);
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
      reduce_elements(op.input.dtype, op.reduce_op, target, scratch.c.data(),
                      block(rank - step - 2), count);
    });
    outgoing = target;
  }
  finish_average(op, rank, n);
}

}  // namespace meshrt
